package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/queuebox/queuebox/internal/inboxtest"

	"github.com/queuebox/queuebox/internal/testlog"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testrabbit"
)

func TestMain(m *testing.M) {
	testdb.Main(runner{m})
}

// runner stops the private RabbitMQ node (when a test started one) before
// testdb stops its cluster.
type runner struct{ m *testing.M }

func (r runner) Run() int { return testrabbit.Run(r.m) }

// queue declares a durable queue of its own on the server at url (with
// args), deleted when the test ends.
func queue(t *testing.T, url string, args amqp.Table) string {
	t.Helper()
	return testrabbit.DurableQueue(t, url, "qbt-inbox", args)
}

// publish sends messages to the queue through the default exchange, with
// publisher confirms.
func publish(t *testing.T, url, q string, msgs ...amqp.Publishing) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		dc, err := ch.PublishWithDeferredConfirm("", q, true, false, m)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
			t.Fatalf("publish not confirmed: %v", err)
		}
	}
}

// ready counts the messages ready in a queue (not taken by a consumer).
func ready(t *testing.T, url, q string) int {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return st.Messages
}

func event(id, typ, invoice string, n int) amqp.Publishing {
	return amqp.Publishing{MessageId: id, Type: typ, ContentType: "application/json", DeliveryMode: amqp.Persistent,
		Headers: amqp.Table{"invoice-id": invoice, "attempt": int32(n)}, Body: []byte(fmt.Sprintf(`{"n":%d}`, n))}
}

func consumer(t *testing.T, d dialects.Inbox, url, q string, obs inbox.Observer, hook func() error) *Consumer {
	t.Helper()
	topic, _ := inbox.ParseTemplate("billing.{{ headers.type }}")
	agg, _ := inbox.ParseTemplate("{{ headers.invoice-id }}")
	m, err := inbox.NewMapping("billing", topic, nil, agg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Mapping: m, Storer: inbox.NewStorer("billing", d, obs, nil), URL: url, Queue: q, MaxBatch: 7, afterStore: hook})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// Messages are stored once per message_id with the templates' topic and
// aggregate; every one is acknowledged, duplicates too.
func TestStoresOnceAndAcknowledges(t *testing.T) {
	t.Parallel()
	url := testrabbit.URL(t)
	d := testdb.Migrated(t, 10)
	q := queue(t, url, nil)
	publish(t, url, q, event("m1", "paid", "inv-1", 1), event("m2", "sent", "inv-2", 2), event("m1", "paid", "inv-1", 1), event("m3", "paid", "inv-1", 3))
	obs := &inboxtest.Counter{}
	c := consumer(t, d, url, q, obs, nil)
	inboxtest.WaitFor(t, "three rows", func() bool { return len(inboxtest.Rows(t, d)) == 3 && obs.Get(inbox.Duplicate) == 1 })
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := inboxtest.Rows(t, d)
	if got[0].MessageID != "m1" || got[0].Topic != "billing.paid" || *got[0].AggregateID != "inv-1" || got[0].Headers["attempt"] != "1" ||
		got[1].Topic != "billing.sent" || got[2].MessageID != "m3" {
		t.Fatalf("rows %+v", got)
	}
	if n := ready(t, url, q); n != 0 {
		t.Fatalf("%d messages back in the queue after a drain; every one should be acknowledged", n)
	}
	if obs.Get(inbox.Stored) != 3 {
		t.Errorf("counted %v", obs)
	}
}

// A consumer that dies between the insert and the acknowledgement loses
// nothing and stores nothing twice: the broker delivers the batch again to
// the next consumer, which finds duplicates and acknowledges them.
func TestCrashBetweenInsertAndAck(t *testing.T) {
	t.Parallel()
	url := testrabbit.URL(t)
	d := testdb.Migrated(t, 10)
	q := queue(t, url, nil)
	const n = 40
	var msgs []amqp.Publishing
	for i := range n {
		msgs = append(msgs, event(fmt.Sprintf("m%d", i), "paid", fmt.Sprintf("inv-%d", i%4), i))
	}
	publish(t, url, q, msgs...)
	var crashed atomic.Bool
	first := &inboxtest.Counter{}
	consumer(t, d, url, q, first, func() error {
		crashed.Store(true)
		return errors.New("crash")
	})
	inboxtest.WaitFor(t, "the first consumer to store a batch and die", crashed.Load)
	stored := len(inboxtest.Rows(t, d))
	if stored == 0 || stored > 7 {
		t.Fatalf("the first consumer stored %d rows before dying, want one batch", stored)
	}
	second := &inboxtest.Counter{}
	c := consumer(t, d, url, q, second, nil)
	inboxtest.WaitFor(t, "every message", func() bool { return len(inboxtest.Rows(t, d)) == n })
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := inboxtest.Rows(t, d); len(got) != n {
		t.Fatalf("%d rows for %d messages", len(got), n)
	}
	if second.Get(inbox.Duplicate) != stored || second.Get(inbox.Stored) != n-stored {
		t.Fatalf("the second consumer counted %v; want %d duplicates (the redelivered batch) and %d stored", second, stored, n-stored)
	}
	if r := ready(t, url, q); r != 0 {
		t.Fatalf("%d messages left in the queue", r)
	}
}

// A message that can never be stored is rejected without requeue: the
// queue's dead-letter exchange gets it, and the messages behind it are
// stored.
func TestRefusedMessagesAreDeadLettered(t *testing.T) {
	t.Parallel()
	url := testrabbit.URL(t)
	d := testdb.Migrated(t, 10)
	dead := queue(t, url, nil)
	q := queue(t, url, amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead})
	notJSON := event("bad-1", "paid", "inv-1", 0)
	notJSON.Body = []byte("not json")
	noType := event("bad-2", "", "inv-1", 0)
	// JSON that PostgreSQL's jsonb refuses, in the same batch as good
	// messages: only it is refused.
	refused := event("bad-3", "paid", "inv-1", 0)
	refused.Body = []byte(`{"n":"\ud800"}`)
	// A NUL in a header is dropped, not a reason to refuse.
	nul := event("ok-2", "paid", "inv-1", 2)
	nul.Headers["note"] = "a\x00b"
	publish(t, url, q, notJSON, noType, event("ok", "paid", "inv-1", 1), refused, nul)
	obs := &inboxtest.Counter{}
	consumer(t, d, url, q, obs, nil)
	inboxtest.WaitFor(t, "two good messages and three dead-lettered", func() bool { return len(inboxtest.Rows(t, d)) == 2 && ready(t, url, dead) == 3 })
	if got := inboxtest.Rows(t, d); got[0].MessageID != "ok" || got[1].MessageID != "ok-2" || got[1].Headers["note"] != "ab" {
		t.Fatalf("rows %+v", got)
	}
	if obs.Get(inbox.Rejected) != 3 {
		t.Fatalf("counted %v, want 3 rejected", obs)
	}
}

// Stop drains: afterwards every message is either stored and acknowledged,
// or back in the queue, never both and never lost.
func TestStopDrains(t *testing.T) {
	t.Parallel()
	url := testrabbit.URL(t)
	d := testdb.Migrated(t, 10)
	q := queue(t, url, nil)
	const n = 400
	var msgs []amqp.Publishing
	for i := range n {
		msgs = append(msgs, event(fmt.Sprintf("m%d", i), "paid", "inv", i))
	}
	publish(t, url, q, msgs...)
	c := consumer(t, d, url, q, nil, nil)
	inboxtest.WaitFor(t, "a first batch", func() bool { return len(inboxtest.Rows(t, d)) > 0 })
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	stored := len(inboxtest.Rows(t, d))
	if left := ready(t, url, q); stored+left != n {
		t.Fatalf("%d stored and %d left in the queue for %d messages", stored, left, n)
	}
	// The rest is taken by the next consumer, without a duplicate.
	obs := &inboxtest.Counter{}
	consumer(t, d, url, q, obs, nil)
	inboxtest.WaitFor(t, "every message", func() bool { return len(inboxtest.Rows(t, d)) == n })
	if obs.Get(inbox.Duplicate) != 0 {
		t.Fatalf("%d duplicates after a clean drain", obs.Get(inbox.Duplicate))
	}
}

// The consumer reconnects by itself when the broker closes its connection,
// and a missing queue is waited for.
func TestReconnects(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a private RabbitMQ node")
	}
	if os.Getenv("QUEUEBOX_TEST_AMQP_URL") != "" {
		t.Skip("closes connections on a private node of the local installation")
	}
	node := testrabbit.Private(t)
	d := testdb.Migrated(t, 10)
	q := testrabbit.Unique("qbt-late")
	// The queue does not exist yet: the consumer waits for it.
	logs := &testlog.Buffer{}
	topic, _ := inbox.ParseTemplate("billing.{{ headers.type }}")
	m, _ := inbox.NewMapping("billing", topic, nil, nil)
	c, err := New(Config{Mapping: m, Storer: inbox.NewStorer("billing", d, nil, nil), URL: node.URL, Queue: q, Log: logs.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	inboxtest.WaitFor(t, "a log line about the missing queue", func() bool { return strings.Contains(logs.String(), "does not exist") })
	conn, err := amqp.Dial(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	ch, _ := conn.Channel()
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	publish(t, node.URL, q, event("a", "paid", "i", 1))
	inboxtest.WaitFor(t, "the first message", func() bool { return len(inboxtest.Rows(t, d)) == 1 })
	node.CloseConnections(t)
	publish(t, node.URL, q, event("b", "paid", "i", 2))
	inboxtest.WaitFor(t, "the message sent after the connection was closed", func() bool { return len(inboxtest.Rows(t, d)) == 2 })
	if !strings.Contains(logs.String(), "consuming again") {
		t.Errorf("no log line says the consumer came back:\n%s", logs.String())
	}
}
