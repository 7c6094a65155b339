package rabbitmq

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/inbox/sourcetest"
	"github.com/queuebox/queuebox/internal/inboxtest"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testlog"
	"github.com/queuebox/queuebox/internal/testrabbit"
)

func TestMain(m *testing.M) {
	testdb.Main(runner{m})
}

// runner stops the private RabbitMQ node (when a test started one) before
// testdb stops its cluster.
type runner struct{ m *testing.M }

func (r runner) Run() int { return testrabbit.Main(r.m) }

// The RabbitMQ source passes the sources' conformance suite: it refuses a
// message by rejecting it without requeue, so the queue's dead-letter
// exchange gets it, and its templates read the AMQP type property as
// {{ headers.type }}. The broker closes its connections on a private node.
func TestConformance(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, sourcetest.Harness{
		Features: sourcetest.Features{Refusal: sourcetest.DeadLettered, HeaderNUL: true, CloseConnections: true},
		Open:     openQueue,
	})
}

func openQueue(t *testing.T, faults bool) *sourcetest.Target {
	tg := &sourcetest.Target{Inbox: testdb.Migrated(t, 10), MaxBatch: 7, GeneratedID: sourcetest.NewID}
	var url string
	if faults {
		if os.Getenv("QUEUEBOX_TEST_AMQP_URL") != "" {
			t.Skip("closes connections on a private node of the local installation")
		}
		node := testrabbit.Private(t)
		url, tg.CloseConnections = node.URL, node.CloseConnections
	} else {
		url = testrabbit.URL(t)
	}
	dead := testrabbit.DurableQueue(t, url, "qbt-inbox-dead", nil)
	q := testrabbit.DurableQueue(t, url, "qbt-inbox", amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead})
	tg.Send = func(t *testing.T, msgs ...sourcetest.Message) {
		out := make([]amqp.Publishing, len(msgs))
		for i, m := range msgs {
			h := amqp.Table{}
			if m.Aggregate != "" {
				h["Aggregate-Id"] = m.Aggregate
			}
			for k, v := range m.Headers {
				h[k] = v
			}
			out[i] = amqp.Publishing{MessageId: m.ID, Type: m.Type, ContentType: "application/json", DeliveryMode: amqp.Persistent, Headers: h, Body: m.Body}
		}
		publish(t, url, q, out...)
	}
	tg.Consumer = func(t *testing.T, o sourcetest.Options) (inbox.Consumer, error) {
		return New(Config{Broker: o.Broker(t, tg, "billing", "type", "Aggregate-Id"), URL: url, Queue: q})
	}
	// Every case counts after it stopped its consumers, whose messages not
	// acknowledged are then back in the queue.
	tg.Left = func(*testing.T) (int, error) { return ready(url, q) }
	tg.SetAside = func(t *testing.T) int {
		n, err := ready(url, dead)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return tg
}

// publish sends messages to the queue through the default exchange, with
// publisher confirms. It reports a failure with t.Error: the suite may call
// it from a goroutine of its own.
func publish(t *testing.T, url, q string, msgs ...amqp.Publishing) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	for _, m := range msgs {
		if err != nil {
			break
		}
		var dc *amqp.DeferredConfirmation
		if dc, err = ch.PublishWithDeferredConfirm("", q, true, false, m); err == nil {
			if ok, werr := dc.WaitContext(context.Background()); !ok {
				err = werr
				if err == nil {
					err = errNotConfirmed
				}
			}
		}
	}
	if err != nil {
		t.Errorf("publish to %s: %v", q, err)
	}
}

var errNotConfirmed = errors.New("the broker did not confirm the publish")

// ready counts the messages ready in a queue (not taken by a consumer).
func ready(url, q string) (int, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	return st.Messages, err
}

// Only RabbitMQ: a missing queue is waited for (the source never declares
// it) and the log says so; once the queue exists the source consumes, and
// says that it consumes again.
func TestWaitsForAMissingQueue(t *testing.T) {
	t.Parallel()
	url := testrabbit.URL(t)
	d := testdb.Migrated(t, 10)
	q := testrabbit.Unique("qbt-late")
	logs := &testlog.Buffer{}
	c, err := New(Config{Broker: billing(t, d, logs.Logger()), URL: url, Queue: q})
	sourcetest.Started(t, c, err)
	inboxtest.WaitFor(t, "a log line about the missing queue", func() bool { return strings.Contains(logs.String(), "does not exist") })
	testrabbit.DeclareQueue(t, url, q, nil)
	publish(t, url, q, amqp.Publishing{MessageId: "a", Type: "paid", Headers: amqp.Table{"Aggregate-Id": "i"}, Body: sourcetest.Body(1)})
	inboxtest.WaitFor(t, "the message sent once the queue exists", func() bool { return len(inboxtest.Rows(t, d)) == 1 })
	if !strings.Contains(logs.String(), "consuming again") {
		t.Errorf("no log line says the consumer came back:\n%s", logs.String())
	}
}

// Only RabbitMQ: AMQP header values are typed; the inbox stores them as
// text.
func TestStoresHeaderValuesAsText(t *testing.T) {
	t.Parallel()
	url := testrabbit.URL(t)
	d := testdb.Migrated(t, 10)
	q := testrabbit.DurableQueue(t, url, "qbt-inbox", nil)
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	publish(t, url, q, amqp.Publishing{MessageId: "m1", Type: "paid", Body: sourcetest.Body(1), Headers: amqp.Table{
		"Aggregate-Id": "inv-1", "attempt": int32(1), "big": int64(1) << 40, "ok": true, "raw": []byte("bytes"), "at": at}})
	c, err := New(Config{Broker: billing(t, d, nil), URL: url, Queue: q})
	sourcetest.Started(t, c, err)
	inboxtest.WaitFor(t, "the message", func() bool { return len(inboxtest.Rows(t, d)) == 1 })
	h := inboxtest.Rows(t, d)[0].Headers
	for name, want := range map[string]string{"attempt": "1", "big": "1099511627776", "ok": "true", "raw": "bytes", "at": "2025-01-02T03:04:05Z"} {
		if h[name] != want {
			t.Errorf("header %s stored as %q, want %q (all: %v)", name, h[name], want, h)
		}
	}
}

// billing is the tests' source "billing" into the inbox d, outside the
// suite.
func billing(t *testing.T, d dialects.Inbox, log *slog.Logger) inbox.Broker {
	return inbox.Broker{Mapping: sourcetest.Mapping(t, "billing", "type", "Aggregate-Id"), Storer: inbox.NewStorer("billing", d, nil, nil), Log: log}
}
