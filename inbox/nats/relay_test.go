package nats

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/internal/inboxtest"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testnats"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// pub publishes one message through JetStream and returns the stream's ack.
func pub(js jetstream.JetStream, subject, id, typ, order, body string) (*jetstream.PubAck, error) {
	m := natsgo.NewMsg(subject)
	m.Data = []byte(body)
	m.Header.Set("Event-Type", typ)
	m.Header.Set("Order-Id", order)
	m.Header.Set(jetstream.MsgIDHeader, id)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return js.PublishMsg(ctx, m)
}

// From a JetStream stream through the source, the inbox relay and the
// outbox to an HTTP destination: a message published twice with one
// Nats-Msg-Id, the second time past the stream's own duplicate window so
// that the stream holds both, is stored once and delivered once; a burst
// over several aggregates from concurrent publishers is stored in stream
// order and comes out of the destination in that order per aggregate.
func TestStreamToDestination(t *testing.T) {
	t.Parallel()
	s := testnats.Start(t)
	d := testdb.Migrated(t, 20)
	stream := testnats.Unique("QBT")
	subject := stream + ".in"
	// The shortest duplicate window the server allows, so that a repeat
	// can get past it.
	st := s.NewStreamConfig(t, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}, Storage: jetstream.FileStorage,
		Duplicates: 100 * time.Millisecond})
	recv := testrecv.New(t, nil)
	inboxtest.Relay(t, d, recv.URL+"/{{ topic }}")

	tp, _ := inbox.ParseTemplate("orders.{{ headers.Event-Type }}")
	typ, _ := inbox.ParseTemplate("order")
	agg, _ := inbox.ParseTemplate("{{ headers.Order-Id }}")
	m, err := inbox.NewMapping("orders", tp, typ, agg)
	if err != nil {
		t.Fatal(err)
	}
	obs := &inboxtest.Counter{}
	// The default ack wait (30 s): no redelivery muddles the counts.
	c, err := New(Config{Mapping: m, Storer: inbox.NewStorer("orders", d, obs, nil), URL: s.URL, Stream: stream, Durable: "qb-inbox", MaxBatch: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	js, err := jetstream.New(s.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	// Once, then again past the window (as often as the stream still
	// drops it) until the stream holds it twice.
	if _, err := pub(js, subject, "once", "created", "o-1", `{"n":0}`); err != nil {
		t.Fatal(err)
	}
	for dup := true; dup; {
		time.Sleep(150 * time.Millisecond)
		ack, err := pub(js, subject, "once", "created", "o-1", `{"n":0}`)
		if err != nil {
			t.Fatal(err)
		}
		dup = ack.Duplicate
	}
	if ms := st.Messages(); len(ms) != 2 || ms[1].Header.Get(jetstream.MsgIDHeader) != "once" {
		t.Fatalf("the stream holds %d messages; want the message twice", len(ms))
	}
	inboxtest.WaitFor(t, "both copies taken", func() bool { return obs.Get(inbox.Stored)+obs.Get(inbox.Duplicate) == 2 })
	if obs.Get(inbox.Duplicate) != 1 {
		t.Fatalf("counted %v; want the repeat counted as a duplicate", obs)
	}
	inboxtest.Settled(t, d, 1)
	if rows := inboxtest.Rows(t, d); len(rows) != 1 || rows[0].MessageID != "once" {
		t.Fatalf("inbox rows %+v; want the message once", rows)
	}
	reqs := recv.Requests()
	if len(reqs) != 1 || reqs[0].Topic != "orders.created" || reqs[0].Key != "o-1" ||
		reqs[0].Header.Get("X-Aggregate-Type") != "order" || reqs[0].Header.Get("Event-Type") != "created" ||
		reqs[0].Header.Get(jetstream.MsgIDHeader) != "once" {
		t.Fatalf("deliveries %+v; want the one message, once, with its topic, key and headers", reqs)
	}

	// The burst: two publishers per aggregate, so that an aggregate's
	// receive order is the stream's, and each publisher's own messages
	// keep theirs.
	const publishers, each = 6, 20
	conns := make([]jetstream.JetStream, publishers)
	for p := range conns {
		if conns[p], err = jetstream.New(s.Connect(t)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := pub(conns[p], subject, fmt.Sprintf("p%d-%d", p, i), "paid", fmt.Sprintf("agg-%d", p/2),
					fmt.Sprintf(`{"client":%d,"n":%d}`, p, i)); err != nil {
					t.Errorf("publisher %d message %d: %v", p, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	total := 1 + publishers*each
	inboxtest.Settled(t, d, int64(total))
	if dups := recv.CheckOrder(t); dups != 0 {
		t.Errorf("%d duplicate deliveries", dups)
	}
	if got, reqs := recv.Delivered(), len(recv.Requests()); got != total || reqs != total {
		t.Fatalf("%d requests delivered %d distinct messages; want %d, each once", reqs, got, total)
	}
	if n := obs.Get(inbox.Stored); n != total {
		t.Fatalf("stored %d; want %d (counts %v)", n, total, obs)
	}

	// Per aggregate, the message ids in the stream's order, in the inbox's
	// receive order, and in the order the destination received them.
	streamOrder, inboxOrder, delivered := map[string][]string{}, map[string][]string{}, map[string][]string{}
	for _, sm := range st.Messages()[2:] {
		k := sm.Header.Get("Order-Id")
		streamOrder[k] = append(streamOrder[k], sm.Header.Get(jetstream.MsgIDHeader))
	}
	for _, r := range inboxtest.Rows(t, d)[1:] {
		inboxOrder[*r.AggregateID] = append(inboxOrder[*r.AggregateID], r.MessageID)
	}
	last := map[int]int{}
	for _, q := range recv.Requests()[1:] {
		delivered[q.Key] = append(delivered[q.Key], q.Header.Get(jetstream.MsgIDHeader))
		p, n := testrecv.JSONField(q.Body, "client"), testrecv.JSONField(q.Body, "n")
		if l, ok := last[p]; ok && n <= l {
			t.Errorf("publisher %d: message %d delivered after %d", p, n, l)
		}
		last[p] = n
	}
	if len(streamOrder) != publishers/2 {
		t.Fatalf("the stream holds %d aggregates, want %d", len(streamOrder), publishers/2)
	}
	for k, want := range streamOrder {
		if len(want) != 2*each {
			t.Errorf("%s: %d messages in the stream, want %d", k, len(want), 2*each)
		}
		if !slices.Equal(inboxOrder[k], want) {
			t.Errorf("%s: inbox receive order %v, stream order %v", k, inboxOrder[k], want)
		}
		if !slices.Equal(delivered[k], want) {
			t.Errorf("%s: delivered in order %v, stream order %v", k, delivered[k], want)
		}
	}
}
