package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/dialecttest"
)

func TestInboxConformance(t *testing.T) {
	dialecttest.RunInbox(t, dialecttest.Harness{
		New:   func(t *testing.T, upTo int) dialects.Dialect { return open(t, upTo) },
		Exec:  exec,
		Begin: begin,
	})
}

// The inbox's statement trigger gives an inserting transaction its id
// before any row draws an inbox sequence value (see
// TestTransactionIDComesBeforeTheSequenceValue for the outbox).
func TestInboxTransactionIDComesBeforeTheSequenceValue(t *testing.T) {
	t.Parallel()
	idBeforeSequence(t, "inbox", `(source, message_id, topic, payload) VALUES ('web', 'm', 't', '{}')`)
}

// A value jsonb refuses (a lone surrogate escape, which Go's JSON checks
// accept) is ErrInvalidValue with PostgreSQL's reason, and stores nothing.
func TestInboxReceiveRefusesWhatJSONBCannotHold(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	_, err := d.InboxReceive(context.Background(), []dialects.InboxMessage{
		{Source: "web", MessageID: "ok", Topic: "t", Payload: []byte(`{"a":1}`)},
		{Source: "web", MessageID: "bad", Topic: "t", Payload: []byte(`{"a":"\ud800"}`)},
	})
	if !errors.Is(err, dialects.ErrInvalidValue) || !strings.Contains(err.Error(), "surrogate") {
		t.Fatalf("got %v, want ErrInvalidValue naming the surrogate", err)
	}
	st, err := d.InboxStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows[dialects.InboxReceived] != 0 {
		t.Fatalf("a refused statement stored %d rows", st.Rows[dialects.InboxReceived])
	}
}

// BenchmarkInboxReceive stores messages from 8 concurrent senders, one or
// eight messages per statement: what an HTTP source's rate is bound by.
func BenchmarkInboxReceive(b *testing.B) {
	for _, per := range []int{1, 8} {
		b.Run(fmt.Sprintf("messages=%d", per), func(b *testing.B) {
			d := open(b, 0)
			var n atomic.Int64
			b.SetParallelism(8)
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					msgs := make([]dialects.InboxMessage, per)
					for i := range msgs {
						agg := fmt.Sprintf("agg-%d", n.Add(1)%1000)
						msgs[i] = dialects.InboxMessage{Source: "bench", MessageID: uuid.NewString(), Topic: "bench.created",
							AggregateID: &agg, Payload: []byte(`{"orderId":"11111111-1111-1111-1111-111111111111","amount":99.99}`),
							Headers: []byte(`{"X-Event-Type":"created"}`)}
					}
					if _, err := d.InboxReceive(context.Background(), msgs); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "messages/s")
		})
	}
}
