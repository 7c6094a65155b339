package inbox_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/inboxtest"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testrecv"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
	httpsink "github.com/queuebox/queuebox/sinks/http"
)

// A message sent twice with one id is stored once and delivered once; a
// burst over several aggregates from eight concurrent clients comes out of
// the destination in receive order per aggregate.
func TestHTTPToDestination(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 20)
	recv := testrecv.New(t, nil)
	inboxtest.Relay(t, d, recv.URL+"/{{ topic }}")
	s := server(t, d, nil, nil)
	url := s.URL + "/inbox/payments"

	a := post(t, url, `{"n":0}`, with(auth(), "X-Message-Id", "once"))
	b := post(t, url, `{"n":0}`, with(auth(), "X-Message-Id", "once"))
	if a.Status != 202 || b.Status != 200 || a.ID != b.ID {
		t.Fatalf("answers %+v then %+v", a, b)
	}
	inboxtest.Settled(t, d, 1)
	reqs := recv.Requests()
	if len(reqs) != 1 || reqs[0].ID != a.ID || reqs[0].Topic != "payment.captured" || reqs[0].Key != "pay-1" ||
		reqs[0].Header.Get("X-Aggregate-Type") != "payment" || reqs[0].Header.Get("X-Event-Type") != "captured" {
		t.Fatalf("deliveries %+v; want the one message, once, with its topic, key and headers", reqs)
	}

	const clients, perClient = 8, 25
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perClient {
				// Two clients share each aggregate: its receive order is
				// then the inbox's, and each client's own messages keep
				// theirs.
				h := with(auth(), "X-Aggregate-Id", fmt.Sprintf("agg-%d", c/2))
				h["X-Message-Id"] = fmt.Sprintf("c%d-%d", c, i)
				if r := post(t, url, fmt.Sprintf(`{"client":%d,"n":%d}`, c, i), h); r.Status != 202 {
					t.Errorf("client %d message %d: %+v", c, i, r)
					return
				}
			}
		}()
	}
	wg.Wait()
	total := 1 + clients*perClient
	inboxtest.Settled(t, d, int64(total))
	if dups := recv.CheckOrder(t); dups != 0 {
		t.Errorf("%d duplicate deliveries", dups)
	}
	if got := recv.Delivered(); got != total {
		t.Fatalf("delivered %d distinct messages, want %d", got, total)
	}
	last := map[int]int{}
	for _, q := range recv.Requests()[1:] {
		c, n := testrecv.JSONField(q.Body, "client"), testrecv.JSONField(q.Body, "n")
		if l, ok := last[c]; ok && n <= l {
			t.Errorf("client %d: message %d delivered after %d", c, n, l)
		}
		last[c] = n
	}
}

// QueueBox's own HTTP destination, with a signing secret, delivers to an
// inbox source that verifies Standard Webhooks signatures: the signature of
// one implementation is accepted by the other, and a redelivery of the row
// is a duplicate (X-Message-Id is the row id).
func TestHTTPAcceptsQueueBoxSignatures(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 20)
	s := server(t, d, nil, nil)
	key, _ := base64.StdEncoding.DecodeString(webhookKey)
	addr, _ := routing.ParseTemplate(s.URL + "/inbox/hooks")
	sink, err := httpsink.New(httpsink.Config{URL: addr, Method: "POST", Timeout: 5 * time.Second, MaxConnections: 4, MaxErrorBody: 1024, SigningSecret: key})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	msg := sinks.Message{ID: "0b7d9c1e-59a3-4c4b-9d55-6f7b1d9a2c11", Topic: "order.created", Key: "o-1", Sequence: 7,
		CreatedAt: time.Now(), Body: []byte(`{"order":"o-1"}`)}
	for i := range 2 {
		msg.Attempt = i
		if errs := sink.Publish(context.Background(), []sinks.Message{msg}); errs[0] != nil {
			t.Fatalf("delivery %d: %v", i, errs[0])
		}
	}
	rows := inboxRows(t, d)
	if len(rows) != 1 || rows[0].MessageID != msg.ID || rows[0].Headers["X-Key"] != "o-1" {
		t.Fatalf("rows %+v; want the row once, with the sender's headers", rows)
	}
	// A tampered body is refused.
	req, _ := http.NewRequest("POST", s.URL+"/inbox/hooks", strings.NewReader(`{"order":"o-2"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("an unsigned request: %d", resp.StatusCode)
	}
}
