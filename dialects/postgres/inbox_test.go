package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/dialecttest"
	"github.com/queuebox/queuebox/dialects/postgres"
)

func TestInboxConformance(t *testing.T) {
	dialecttest.RunInbox(t, dialecttest.Harness{
		New:  func(t *testing.T, upTo int) dialects.Dialect { return open(t, upTo) },
		Exec: exec,
	})
}

// relayGated probes the inbox, then relays with the gate the probes so far
// allow, as the inbox relay does, and returns the topics of the outbox
// rows it created, in outbox sequence order.
func relayGated(t *testing.T, d *postgres.Dialect, w *dialects.Watermark) []string {
	t.Helper()
	ctx := context.Background()
	p, err := d.InboxProbe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.Observe(p, time.Now())
	var before int64
	tbl := pgx.Identifier{d.Names().Schema, "outbox"}.Sanitize()
	if err := d.Pool().QueryRow(ctx, `SELECT COALESCE(max(sequence), 0) FROM `+tbl).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if _, err := d.InboxRelay(ctx, dialects.InboxRelayParams{Limit: 100, MaxAttempts: 5, Gate: w.Gate()}); err != nil {
		t.Fatal(err)
	}
	rows, err := d.Pool().Query(ctx, `SELECT topic FROM `+tbl+` WHERE sequence > $1 ORDER BY sequence`, before)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// Two transactions store inbox rows of one aggregate; the one with the
// larger sequence commits first. The relay holds the later row back until
// the earlier transaction has ended, and then relays both in receive order;
// an unkeyed row and another aggregate's row do not wait.
func TestInboxGateHoldsBackRowsOfOpenTransactions(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	ctx := context.Background()
	tbl := pgx.Identifier{d.Names().Schema, "inbox"}.Sanitize()
	ins := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}, id string, agg any) int64 {
		var seq int64
		if err := q.QueryRow(ctx, `INSERT INTO `+tbl+` (source, message_id, topic, aggregate_id, payload)
			VALUES ('web', $1, $1, $2, '{}') RETURNING sequence`, id, agg).Scan(&seq); err != nil {
			t.Fatal(err)
		}
		return seq
	}
	t1, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer t1.Rollback(ctx)
	first := ins(t1, "x-first", "x")
	t2, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second := ins(t2, "x-second", "x")
	if err := t2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if second <= first {
		t.Fatalf("sequences %d then %d", first, second)
	}
	ins(d.Pool(), "other", "y")
	ins(d.Pool(), "unkeyed", nil)
	var w dialects.Watermark
	var got []string
	for range 5 {
		got = append(got, relayGated(t, d, &w)...)
	}
	for _, topic := range got {
		if topic == "x-second" || topic == "x-first" {
			t.Fatalf("relayed %v while a transaction that stored an earlier row of aggregate x is open", got)
		}
	}
	if !slices.Contains(got, "unkeyed") {
		t.Fatalf("relayed %v; the unkeyed row must not wait", got)
	}
	if err := t1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var x []string
	for deadline := time.Now().Add(10 * time.Second); len(x) < 2 && time.Now().Before(deadline); {
		for _, topic := range relayGated(t, d, &w) {
			if strings.HasPrefix(topic, "x-") {
				x = append(x, topic)
			}
		}
	}
	if !slices.Equal(x, []string{"x-first", "x-second"}) {
		t.Fatalf("after the first transaction committed, relayed %v, want x-first then x-second", x)
	}
}

// The inbox's statement trigger gives an inserting transaction its id
// before any row draws an inbox sequence value (see
// TestTransactionIDComesBeforeTheSequenceValue for the outbox).
func TestInboxTransactionIDComesBeforeTheSequenceValue(t *testing.T) {
	t.Parallel()
	idBeforeSequence(t, "inbox", `(source, message_id, topic, payload) VALUES ('web', 'm', 't', '{}')`)
}

// InboxWriters lists an open transaction that stored inbox rows, not one
// that wrote only the outbox.
func TestInboxWritersAreTheOpenInboxTransactions(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	ctx := context.Background()
	schema := d.Names().Schema
	writer, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Rollback(ctx)
	var pid int64
	if err := writer.QueryRow(ctx, `INSERT INTO `+pgx.Identifier{schema, "inbox"}.Sanitize()+
		` (source, message_id, topic, payload) VALUES ('web', 'm', 't', '{}') RETURNING pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	bystander, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer bystander.Rollback(ctx)
	var other int64
	if err := bystander.QueryRow(ctx, `INSERT INTO `+pgx.Identifier{schema, "outbox"}.Sanitize()+
		` (topic, payload) VALUES ('t', '{}') RETURNING pg_backend_pid()`).Scan(&other); err != nil {
		t.Fatal(err)
	}
	ws, err := d.InboxWriters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var mine int
	for _, w := range ws {
		if w.PID == other {
			t.Fatalf("an outbox writer is listed as an inbox writer: %+v", w)
		}
		if w.PID == pid && w.Xid > 0 {
			mine++
		}
	}
	if mine != 1 {
		t.Fatalf("writers %+v; want the open inbox transaction of pid %d", ws, pid)
	}
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
