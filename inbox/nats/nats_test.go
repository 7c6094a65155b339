package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/inboxtest"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testlog"
	"github.com/queuebox/queuebox/internal/testnats"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type event struct {
	id, typ, order string
	n              int
	body           string
}

// publish sends events to subject (through JetStream, with Nats-Msg-Id
// when the event has an id).
func publish(t *testing.T, s *testnats.Server, subject string, evs ...event) {
	t.Helper()
	js, err := jetstream.New(s.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		body := e.body
		if body == "" {
			body = fmt.Sprintf(`{"n":%d}`, e.n)
		}
		m := natsgo.NewMsg(subject)
		m.Data = []byte(body)
		m.Header.Set("Event-Type", e.typ)
		m.Header.Set("Order-Id", e.order)
		if e.id != "" {
			m.Header.Set(jetstream.MsgIDHeader, e.id)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := js.PublishMsg(ctx, m)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}

func mapping(t *testing.T) *inbox.Mapping {
	t.Helper()
	tp, _ := inbox.ParseTemplate("orders.{{ headers.Event-Type }}")
	agg, _ := inbox.ParseTemplate("{{ headers.order-id }}")
	m, err := inbox.NewMapping("orders", tp, nil, agg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fixture gives a test a migrated database of its own and a new stream on
// s over the subject it returns.
func fixture(t *testing.T, s *testnats.Server) (d *postgres.Dialect, stream, subject string) {
	t.Helper()
	d = testdb.Migrated(t, 10)
	stream = testnats.Unique("QBT")
	subject = stream + ".in"
	s.NewStream(t, stream, subject)
	return d, stream, subject
}

func consumer(t *testing.T, d dialects.Inbox, s *testnats.Server, stream, durable string, obs inbox.Observer, hook func() error) *Consumer {
	t.Helper()
	return start(t, Config{Mapping: mapping(t), Storer: inbox.NewStorer("orders", d, obs, nil), URL: s.URL, Stream: stream, Durable: durable,
		MaxBatch: 10, ackWait: time.Second, afterStore: hook})
}

// start runs a consumer of cfg until the test ends.
func start(t *testing.T, cfg Config) *Consumer {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// info reads the durable's state.
func info(t *testing.T, s *testnats.Server, stream, durable string) *jetstream.ConsumerInfo {
	t.Helper()
	js, err := jetstream.New(s.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		t.Fatal(err)
	}
	i, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// pending is how many messages the durable has not had acknowledged
// (delivered and waiting, or not yet delivered).
func pending(t *testing.T, s *testnats.Server, stream, durable string) uint64 {
	t.Helper()
	i := info(t, s, stream, durable)
	return i.NumPending + uint64(i.NumAckPending)
}

// Messages are stored once per message id (Nats-Msg-Id, else
// stream/sequence); the durable is created when missing, and every message
// is acknowledged.
func TestStoresOnceAndAcknowledges(t *testing.T) {
	t.Parallel()
	s := testnats.Start(t)
	d, stream, subject := fixture(t, s)
	// A republish with the same Nats-Msg-Id beyond the stream's duplicate
	// window would reach the stream twice; here the second is a distinct
	// message without an id, and one more has an id of its own.
	publish(t, s, subject, event{id: "m1", typ: "created", order: "o-1", n: 1}, event{typ: "paid", order: "o-1", n: 2},
		event{id: "m3", typ: "created", order: "o-2", n: 3})
	obs := &inboxtest.Counter{}
	c := consumer(t, d, s, stream, "qb-inbox", obs, nil)
	inboxtest.WaitFor(t, "three rows", func() bool { return len(inboxtest.Rows(t, d)) == 3 })
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := inboxtest.Rows(t, d)
	if got[0].MessageID != "m1" || got[0].Topic != "orders.created" || *got[0].AggregateID != "o-1" ||
		got[1].MessageID != stream+"/2" || got[1].Topic != "orders.paid" {
		t.Fatalf("rows %+v", got)
	}
	if p := pending(t, s, stream, "qb-inbox"); p != 0 {
		t.Fatalf("%d messages not acknowledged after a drain", p)
	}
	if obs.Get(inbox.Stored) != 3 {
		t.Errorf("counted %v", obs)
	}
}

// crashAfterOneBatch publishes n messages over three orders to the
// stream's subject, and runs a consumer of the durable qb-inbox that dies
// (as a crash would) once it has stored its first batch and before it
// acknowledges it.
func crashAfterOneBatch(t *testing.T, d dialects.Inbox, s *testnats.Server, stream string, n int) {
	t.Helper()
	var evs []event
	for i := range n {
		evs = append(evs, event{id: fmt.Sprintf("m%d", i), typ: "created", order: fmt.Sprintf("o-%d", i%3), n: i})
	}
	publish(t, s, stream+".in", evs...)
	var crashed atomic.Bool
	consumer(t, d, s, stream, "qb-inbox", nil, func() error {
		crashed.Store(true)
		return errors.New("crash")
	})
	inboxtest.WaitFor(t, "the first consumer to store a batch and die", crashed.Load)
}

// startLogged runs a consumer of the durable qb-inbox on stream at url,
// with batches of 10 and hook after each store (nil: none), until the test
// ends, and returns its log.
func startLogged(t *testing.T, d dialects.Inbox, url, stream string, hook func() error) *testlog.Buffer {
	t.Helper()
	logs := &testlog.Buffer{}
	start(t, Config{Mapping: mapping(t), Storer: inbox.NewStorer("orders", d, nil, nil), URL: url, Stream: stream,
		Durable: "qb-inbox", MaxBatch: 10, Log: logs.Logger(), afterStore: hook})
	return logs
}

// checkReceiveOrder fails the test where an order's messages (their "n")
// were received out of the order they were published in.
func checkReceiveOrder(t *testing.T, d *postgres.Dialect) {
	t.Helper()
	last := map[string]int{}
	for _, r := range inboxtest.Rows(t, d) {
		if prev, ok := last[*r.AggregateID]; ok && r.N < prev {
			t.Errorf("order %s: message %d received after %d", *r.AggregateID, r.N, prev)
		}
		last[*r.AggregateID] = r.N
	}
}

// A consumer that dies between the insert and the acknowledgement loses
// nothing and stores nothing twice: the next consumer's reset (or, without
// one, the ack wait) brings the batch back, and the repeats are duplicates.
func TestCrashBetweenInsertAndAck(t *testing.T) {
	t.Parallel()
	s := testnats.Start(t)
	d, stream, _ := fixture(t, s)
	const n = 40
	crashAfterOneBatch(t, d, s, stream, n)
	stored := len(inboxtest.Rows(t, d))
	if stored == 0 || stored > 10 {
		t.Fatalf("the first consumer stored %d rows, want one batch", stored)
	}
	obs := &inboxtest.Counter{}
	consumer(t, d, s, stream, "qb-inbox", obs, nil)
	inboxtest.WaitFor(t, "every message, and the batch again", func() bool { return len(inboxtest.Rows(t, d)) == n && obs.Get(inbox.Duplicate) >= stored })
	inboxtest.WaitFor(t, "every message acknowledged", func() bool { return pending(t, s, stream, "qb-inbox") == 0 })
	if got := len(inboxtest.Rows(t, d)); got != n {
		t.Fatalf("%d rows for %d messages", got, n)
	}
	if obs.Get(inbox.Stored) != n-stored {
		t.Fatalf("the second consumer counted %v; want %d stored", obs, n-stored)
	}
}

// Messages a dead consumer was delivered and never acknowledged (a stored
// batch, and the pulled batch behind it that it never stored) come again at
// once and in stream order when the next consumer starts, not after the
// durable's ack wait behind the messages that followed them: every order's
// messages are received in the order they were published.
func TestCrashKeepsStreamOrder(t *testing.T) {
	t.Parallel()
	s := testnats.Start(t)
	d, stream, _ := fixture(t, s)
	longAckWait(t, s, stream)
	const n = 60
	crashAfterOneBatch(t, d, s, stream, n)
	if p := info(t, s, stream, "qb-inbox").NumAckPending; p <= 10 {
		t.Fatalf("the dead consumer left %d messages unacknowledged; want its stored batch and more pulled behind it", p)
	}
	logs := startLogged(t, d, s.URL, stream, nil)
	inboxtest.WaitFor(t, "every message, long before the ack wait", func() bool { return len(inboxtest.Rows(t, d)) == n })
	checkReceiveOrder(t, d)
	if !strings.Contains(logs.String(), "delivering again from the first of them") {
		t.Errorf("the log does not say the durable was reset:\n%s", logs.String())
	}
}

// A connection that breaks in the middle of a stream, with messages the
// server sent and the source never received, ends the session, and the
// next one resets the durable: those messages come again at once and in
// stream order, not after the durable's ten-minute ack wait behind the ones
// that followed them. A proxy between the source and the server swallows
// what the server sends for a moment, then the server drops the
// connection.
func TestReconnectKeepsStreamOrder(t *testing.T) {
	t.Parallel()
	s := testnats.Start(t)
	d, stream, subject := fixture(t, s)
	longAckWait(t, s, stream)
	tox := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	proxy := toxiproxy.NewProxy(tox, "nats", "127.0.0.1:0", strings.TrimPrefix(s.URL, "nats://"))
	if err := tox.Collection.Add(proxy, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Stop)
	const n = 400
	var evs []event
	for i := range n {
		evs = append(evs, event{id: fmt.Sprintf("m%d", i), typ: "created", order: fmt.Sprintf("o-%d", i%3), n: i})
	}
	publish(t, s, subject, evs...)
	logs := startLogged(t, d, "nats://"+proxy.Listen, stream, func() error {
		time.Sleep(3 * time.Millisecond) // a slow database: the pull runs ahead
		return nil
	})
	for _, at := range []int{80, 240} {
		inboxtest.WaitFor(t, fmt.Sprintf("%d messages stored", at), func() bool { return len(inboxtest.Rows(t, d)) >= at })
		if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(`{"name": "swallow", "type": "timeout", "stream": "downstream", "attributes": {"timeout": 0}}`)); err != nil {
			t.Fatal(err)
		}
		inboxtest.WaitFor(t, "messages sent and never received", func() bool {
			return info(t, s, stream, "qb-inbox").NumAckPending > 0 && len(inboxtest.Rows(t, d)) >= at
		})
		time.Sleep(200 * time.Millisecond) // what was on its way is swallowed too
		s.Disconnect(t, "queuebox inbox orders")
		if err := proxy.Toxics.RemoveToxic(context.Background(), "swallow"); err != nil {
			t.Fatal(err)
		}
	}
	inboxtest.WaitFor(t, "every message, long before the ack wait", func() bool { return len(inboxtest.Rows(t, d)) == n })
	checkReceiveOrder(t, d)
	if got := strings.Count(logs.String(), "delivering again from the first of them"); got < 2 {
		t.Errorf("%d resets after two broken connections with messages lost on their way, want 2:\n%s", got, logs.String())
	}
}

// longAckWait creates the durable qb-inbox with an ack wait far longer than
// a test waits, so that a message delivered and not acknowledged can only
// come back through the source's reset.
func longAckWait(t *testing.T, s *testnats.Server, stream string) {
	t.Helper()
	js, err := jetstream.New(s.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "qb-inbox", AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy, AckWait: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
}

// A user who may not reset the durable (or a server older than 2.14) only
// costs the order: after a crash the source says once that it cannot
// reset, goes on consuming, and the unacknowledged messages come back after
// the ack wait; nothing is lost or stored twice.
func TestNoResetStillConsumes(t *testing.T) {
	t.Parallel()
	s := testnats.StartDenying(t, "$JS.API.CONSUMER.RESET.>")
	d, stream, _ := fixture(t, s)
	const n = 40
	crashAfterOneBatch(t, d, s, stream, n) // the durable it makes has an ack wait of 1 s
	logs := startLogged(t, d, s.URL, stream, nil)
	inboxtest.WaitFor(t, "every message", func() bool { return len(inboxtest.Rows(t, d)) == n })
	inboxtest.WaitFor(t, "every message acknowledged", func() bool { return pending(t, s, stream, "qb-inbox") == 0 })
	if got := strings.Count(logs.String(), "could not be reset"); got != 1 {
		t.Errorf("the refused reset was logged %d times, want once:\n%s", got, logs.String())
	}
}

// A message that can never be stored is terminated, and the messages
// behind it are stored.
func TestRefusedMessagesAreTerminated(t *testing.T) {
	t.Parallel()
	s := testnats.Start(t)
	d, stream, subject := fixture(t, s)
	publish(t, s, subject, event{id: "bad", typ: "x", order: "o", body: "nope"}, event{id: "no-type", order: "o", n: 1},
		event{id: "ok", typ: "created", order: "o", n: 2})
	obs := &inboxtest.Counter{}
	consumer(t, d, s, stream, "qb-inbox", obs, nil)
	inboxtest.WaitFor(t, "the good message and two refusals", func() bool { return len(inboxtest.Rows(t, d)) == 1 && obs.Get(inbox.Rejected) == 2 })
	inboxtest.WaitFor(t, "nothing left to deliver", func() bool { return pending(t, s, stream, "qb-inbox") == 0 })
	if r := inboxtest.Rows(t, d); r[0].MessageID != "ok" {
		t.Fatalf("rows %+v", r)
	}
}

// The consumer comes back by itself after the server closed its
// connection, and after a restart of the server.
func TestReconnects(t *testing.T) {
	t.Parallel()
	s := testnats.Start(t)
	d, stream, subject := fixture(t, s)
	consumer(t, d, s, stream, "qb-inbox", nil, nil)
	publish(t, s, subject, event{id: "a", typ: "created", order: "o", n: 1})
	inboxtest.WaitFor(t, "the first message", func() bool { return len(inboxtest.Rows(t, d)) == 1 })
	s.Disconnect(t, "queuebox inbox orders")
	publish(t, s, subject, event{id: "b", typ: "created", order: "o", n: 2})
	inboxtest.WaitFor(t, "the message sent after the disconnect", func() bool { return len(inboxtest.Rows(t, d)) == 2 })
	s.Stop(t)
	s.Start(t)
	publish(t, s, subject, event{id: "c", typ: "created", order: "o", n: 3})
	inboxtest.WaitFor(t, "the message sent after the restart", func() bool { return len(inboxtest.Rows(t, d)) == 3 })
}
