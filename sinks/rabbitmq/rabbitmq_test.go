package rabbitmq

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrabbit"
	"github.com/queuebox/queuebox/sinks"
	"github.com/queuebox/queuebox/sinks/sinktest"
)

func TestMain(m *testing.M) { testrabbit.Main(m) }

func newSink(t testing.TB, cfg Config) *Sink {
	t.Helper()
	if cfg.RoutingKey == nil {
		cfg.RoutingKey = sinktest.Template(t, "{{ topic }}")
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// The shared server serves the ordinary cases, each on its own exchange and
// queue; the fault cases restart a private node, or close its connections,
// one at a time.
func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		Features: sinktest.Features{Observable: true, Templated: true, Unroutable: true, Refuses: true,
			Restart: true, CloseConnections: true, Down: true},
		Open: func(t *testing.T, faults bool) *sinktest.Target {
			url := testrabbit.URL(t)
			var node *testrabbit.Node
			if faults {
				node = testrabbit.Private(t)
				url = node.URL
			}
			q := testrabbit.NewQueue(t, url, "r1")
			fullQueue(t, url, q.Exchange, "full")
			s := newSink(t, Config{URL: url, Exchange: sinktest.Template(t, q.Exchange), RoutingKey: sinktest.Template(t, "{{ headers.Route }}"), Mandatory: true, Timeout: 5 * time.Second})
			tg := &sinktest.Target{
				Sink: s, Route: "r1", Unroutable: "nowhere", Refused: "full",
				Received: func() []sinktest.Delivery { return deliveries(q.Get()) },
				Down: func(t *testing.T) (sinks.Sink, string) {
					addr := sinktest.ClosedAddress(t)
					return newSink(t, Config{URL: "amqp://guest:guest@" + addr + "/", Exchange: sinktest.Template(t, "x")}), addr
				},
			}
			if node != nil {
				tg.Stop = func(t *testing.T) { node.Stop(t) }
				tg.Start = func(t *testing.T) { node.Start(t) }
				tg.CloseConnections = func(t *testing.T) { node.CloseConnections(t) }
			}
			return tg
		},
	})
}

// fullQueue binds to exchange, with bindingKey, a queue that takes no
// message: its length limit is 0 and it rejects publishes when full, which
// the broker confirms with a nack.
func fullQueue(t testing.TB, url, exchange, bindingKey string) {
	t.Helper()
	name := testrabbit.DurableQueue(t, url, "qbt-full", amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"})
	if err := testrabbit.Channel(t, url).QueueBind(name, bindingKey, exchange, false, nil); err != nil {
		t.Fatal(err)
	}
}

func deliveries(ds []amqp.Delivery) []sinktest.Delivery {
	out := make([]sinktest.Delivery, len(ds))
	for i, d := range ds {
		h := map[string]string{}
		for k, v := range d.Headers {
			h[k] = fmt.Sprint(v)
		}
		out[i] = sinktest.Delivery{ID: d.MessageId, Key: h["X-Key"], Headers: h, Body: d.Body}
	}
	return out
}

func waitGet(t *testing.T, q *testrabbit.Queue, n int) []amqp.Delivery {
	t.Helper()
	var got []amqp.Delivery
	testkit.Eventually(t, fmt.Sprintf("%d messages arrive", n), 30*time.Second, func() error {
		if got = q.Get(); len(got) < n {
			return fmt.Errorf("%d of %d messages arrived", len(got), n)
		}
		return nil
	})
	return got
}

func message() sinks.Message {
	agg := "order"
	return sinks.Message{ID: "0b7e3f4e-0000-4000-8000-000000000001", Topic: "order.created", Key: "cust-42", AggregateType: &agg,
		Sequence: 7, Attempt: 1, CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Headers: map[string]string{"X-Tenant": "acme", "X-Topic": "spoofed"}, Body: []byte(`{"a":1}`)}
}

// The AMQP properties: persistent, message_id, content_type, timestamp, and
// the headers table with QueueBox's values winning over the row's.
func TestProperties(t *testing.T) {
	t.Parallel()
	url := testrabbit.URL(t)
	q := testrabbit.NewQueue(t, url, "order.#")
	s := newSink(t, Config{URL: url, Exchange: sinktest.Template(t, q.Exchange), Mandatory: true})
	m := message()
	if err := s.Publish(context.Background(), []sinks.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	d := waitGet(t, q, 1)[0]
	if d.MessageId != m.ID || d.ContentType != "application/json" || d.DeliveryMode != amqp.Persistent ||
		!d.Timestamp.Equal(m.CreatedAt) || d.RoutingKey != "order.created" || d.Exchange != q.Exchange {
		t.Errorf("properties: id %q, content type %q, mode %d, timestamp %v, routing key %q, exchange %q",
			d.MessageId, d.ContentType, d.DeliveryMode, d.Timestamp, d.RoutingKey, d.Exchange)
	}
	for k, v := range map[string]string{"X-Topic": "order.created", "X-Tenant": "acme", "X-Message-Id": m.ID, "X-Attempt": "1", "X-Key": "cust-42"} {
		if d.Headers[k] != v {
			t.Errorf("header %s = %v, want %q", k, d.Headers[k], v)
		}
	}
}

// exchangeFrom: aggregate_type is the exchange template {{ aggregateType }}:
// each row goes to the exchange its aggregate type names, and a row without
// one can never be delivered, with an error that names the column.
func TestExchangeFromAggregateType(t *testing.T) {
	t.Parallel()
	url := testrabbit.URL(t)
	q := testrabbit.NewQueue(t, url, "#")
	other := testrabbit.Unique("qbt-agg")
	q.Declare(t, other, "#")
	s := newSink(t, Config{URL: url, Exchange: sinktest.Template(t, "{{ aggregateType }}"), Mandatory: true})
	a, b := message(), message()
	a.AggregateType, b.AggregateType = &q.Exchange, &other
	b.ID = "0b7e3f4e-0000-4000-8000-000000000002"
	none := message()
	none.AggregateType = nil
	errs := s.Publish(context.Background(), []sinks.Message{a, b})
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	got := waitGet(t, q, 2)
	if got[0].Exchange != q.Exchange || got[1].Exchange != other {
		t.Errorf("exchanges %q, %q; want %q, %q", got[0].Exchange, got[1].Exchange, q.Exchange, other)
	}
	err := s.Publish(context.Background(), []sinks.Message{none})[0]
	if !sinks.IsPermanent(err) || !strings.Contains(err.Error(), "aggregate_type") {
		t.Errorf("a row without aggregate_type: %v", err)
	}
}

// A value the broker would misread in a routing key (white space, the
// wildcards of topic bindings) can never be delivered; the error names it.
func TestForbiddenRoutingKeyValues(t *testing.T) {
	t.Parallel()
	s := newSink(t, Config{URL: testrabbit.URL(t), Exchange: sinktest.Template(t, "x"), RoutingKey: sinktest.Template(t, "{{ topic }}.{{ key }}")})
	for _, key := range []string{"cust 42", "cust*", "a#b", "tab\there"} {
		m := message()
		m.Key = key
		err := s.Publish(context.Background(), []sinks.Message{m})[0]
		if !sinks.IsPermanent(err) || !strings.Contains(err.Error(), fmt.Sprintf("%q", key)) {
			t.Errorf("key %q: %v", key, err)
		}
	}
	m := message()
	m.Key = strings.Repeat("k", 300)
	if err := s.Publish(context.Background(), []sinks.Message{m})[0]; !sinks.IsPermanent(err) || !strings.Contains(err.Error(), "255") {
		t.Errorf("a routing key of 300 bytes: %v", err)
	}
}

// An exchange that does not exist closes the channel of that call (404):
// a retryable error naming the broker's reason, and the sink goes on.
func TestMissingExchangeIsRetriedAndSpoilsNothingElse(t *testing.T) {
	t.Parallel()
	url := testrabbit.URL(t)
	q := testrabbit.NewQueue(t, url, "#")
	s := newSink(t, Config{URL: url, Exchange: sinktest.Template(t, "{{ headers.Exchange }}"), Mandatory: true})
	bad, good := message(), message()
	bad.Headers = map[string]string{"Exchange": testrabbit.Unique("qbt-missing")}
	good.Headers = map[string]string{"Exchange": q.Exchange}
	good.ID = "0b7e3f4e-0000-4000-8000-000000000003"
	err := s.Publish(context.Background(), []sinks.Message{bad})[0]
	if err == nil || sinks.IsPermanent(err) || !strings.Contains(err.Error(), "NOT_FOUND") {
		t.Fatalf("publish to a missing exchange: %v", err)
	}
	for range 3 { // whichever channel the pool hands out
		if err := s.Publish(context.Background(), []sinks.Message{good})[0]; err != nil {
			t.Fatalf("a good message after the channel error: %v", err)
		}
	}
	waitGet(t, q, 3)
}

// declareExchange declares a durable topic exchange before the first
// publish: declaring it again with those properties succeeds, with others
// fails (the broker checks equivalence).
func TestDeclareExchange(t *testing.T) {
	t.Parallel()
	url := testrabbit.URL(t)
	name := testrabbit.Unique("qbt-declared")
	s := newSink(t, Config{URL: url, Exchange: sinktest.Template(t, name), DeclareExchange: true})
	if err := s.Publish(context.Background(), []sinks.Message{message()})[0]; err != nil {
		t.Fatal(err)
	}
	c, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, _ := c.Channel()
	defer func() {
		// The failed redeclaration closed ch.
		if ch, err := c.Channel(); err == nil {
			_ = ch.ExchangeDelete(name, false, false)
		}
	}()
	if err := ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err != nil {
		t.Fatalf("the declared exchange is not a durable topic exchange: %v", err)
	}
	if err := ch.ExchangeDeclare(name, "direct", true, false, false, false, nil); err == nil {
		t.Fatal("redeclaring as direct succeeded: the exchange was not there")
	}
}

// A long run of one key is pipelined on one channel and arrives in order.
func TestLongRunArrivesInOrder(t *testing.T) {
	t.Parallel()
	url := testrabbit.URL(t)
	q := testrabbit.NewQueue(t, url, "#")
	s := newSink(t, Config{URL: url, Exchange: sinktest.Template(t, q.Exchange), Mandatory: true})
	msgs := make([]sinks.Message, MaxOrderedBatch)
	for i := range msgs {
		msgs[i] = message()
		msgs[i].ID = fmt.Sprintf("0b7e3f4e-0000-4000-8000-%012d", i)
		msgs[i].Sequence = int64(i)
	}
	for i, err := range s.Publish(context.Background(), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := waitGet(t, q, len(msgs))
	for i, d := range got {
		if d.MessageId != msgs[i].ID {
			t.Fatalf("position %d holds %s, want %s", i, d.MessageId, msgs[i].ID)
		}
	}
}

func TestNewRejectsBadURL(t *testing.T) {
	for _, u := range []string{"http://localhost", "amqp://", "nonsense"} {
		if _, err := New(Config{URL: u, Exchange: sinktest.Template(t, "x"), RoutingKey: sinktest.Template(t, "k")}); err == nil || !strings.Contains(err.Error(), "url") {
			t.Errorf("%q: %v", u, err)
		}
	}
}

// BenchmarkPublish: 100,000 persistent, confirmed messages over 1,000 keys
// into one durable queue on the shared server, runs of up to 10.
func BenchmarkPublish(b *testing.B) {
	url := testrabbit.URL(b)
	q := testrabbit.NewQueue(b, url, "#")
	s := newSink(b, Config{URL: url, Exchange: sinktest.Template(b, q.Exchange), Mandatory: true})
	sinktest.Throughput(b, &sinktest.Target{Sink: s}, 1000, 100, 10)
}

// BenchmarkPublishTopicsTakeTurns: as BenchmarkPublish, with three topics
// taking turns within each key, so that the routing key changes from one
// message of a key to the next (the bench's rabbitmq scenario).
func BenchmarkPublishTopicsTakeTurns(b *testing.B) {
	url := testrabbit.URL(b)
	q := testrabbit.NewQueue(b, url, "#")
	s := newSink(b, Config{URL: url, Exchange: sinktest.Template(b, q.Exchange), Mandatory: true})
	sinktest.Throughput(b, &sinktest.Target{Sink: s}, 1000, 50, 10, "order.created", "order.paid", "order.shipped")
}

// Many keys share a channel: each message's outcome is its own. Keys
// publish at once, one message per call, to a routing key that is bound,
// one that no queue is bound for (returned), and one whose queue is full
// (nacked); every call gets the outcome of its own message, and exactly
// the good ones arrive.
func TestOutcomesOnASharedChannel(t *testing.T) {
	t.Parallel()
	url := testrabbit.URL(t)
	q := testrabbit.NewQueue(t, url, "good")
	fullQueue(t, url, q.Exchange, "full")
	s := newSink(t, Config{URL: url, Exchange: sinktest.Template(t, q.Exchange), RoutingKey: sinktest.Template(t, "{{ topic }}"), Mandatory: true})
	const keys, perKey = 40, 30
	routes := []string{"good", "nowhere", "good", "full"}
	var mu sync.Mutex
	var want []string
	var wg sync.WaitGroup
	for k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range perKey {
				m := message()
				m.ID = fmt.Sprintf("0b7e3f4e-%04d-4000-8000-%012d", k, n)
				m.Key, m.Topic = fmt.Sprintf("key-%d", k), routes[(k+n)%len(routes)]
				err := s.Publish(context.Background(), []sinks.Message{m})[0]
				switch m.Topic {
				case "good":
					if err != nil {
						t.Errorf("%s to a bound routing key: %v", m.ID, err)
					}
					mu.Lock()
					want = append(want, m.ID)
					mu.Unlock()
				case "nowhere":
					if err == nil || !strings.Contains(err.Error(), "NO_ROUTE") {
						t.Errorf("%s to a routing key no queue is bound for: %v", m.ID, err)
					}
				case "full":
					if err == nil || !strings.Contains(err.Error(), "nack") {
						t.Errorf("%s to a full queue: %v", m.ID, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	got := waitGet(t, q, len(want))
	ids := make([]string, len(got))
	for i, d := range got {
		ids[i] = d.MessageId
	}
	slices.Sort(ids)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("%d messages arrived, want the %d good ones", len(ids), len(want))
	}
}

// A row published twice at once (an attempt that gave up waiting, and its
// retry) is two messages with one message_id: a return belongs to the
// attempt that was returned.
func TestReturnsBelongToTheirAttempt(t *testing.T) {
	t.Parallel()
	url := testrabbit.URL(t)
	q := testrabbit.NewQueue(t, url, "good")
	s := newSink(t, Config{URL: url, Exchange: sinktest.Template(t, q.Exchange), RoutingKey: sinktest.Template(t, "{{ topic }}"), Mandatory: true})
	for round := range 20 {
		returned, routed := message(), message()
		returned.ID = fmt.Sprintf("0b7e3f4e-0000-4000-8000-%012d", round)
		routed.ID = returned.ID
		returned.Topic, returned.Attempt = "nowhere", 1
		routed.Topic, routed.Attempt = "good", 2
		var errReturned, errRouted error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); errReturned = s.Publish(context.Background(), []sinks.Message{returned})[0] }()
		go func() { defer wg.Done(); errRouted = s.Publish(context.Background(), []sinks.Message{routed})[0] }()
		wg.Wait()
		if errReturned == nil || errRouted != nil {
			t.Fatalf("round %d: the returned attempt got %v, the routed one %v", round, errReturned, errRouted)
		}
	}
}

// A channel error (an exchange that does not exist) fails the publishes to
// that exchange only: other exchanges' publishes, at the same moment, go on.
func TestChannelErrorStaysWithItsExchange(t *testing.T) {
	t.Parallel()
	url := testrabbit.URL(t)
	q := testrabbit.NewQueue(t, url, "#")
	missing := testrabbit.Unique("qbt-missing")
	s := newSink(t, Config{URL: url, Exchange: sinktest.Template(t, "{{ headers.Exchange }}"), Mandatory: true})
	var wg sync.WaitGroup
	for k := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 20 {
				m := message()
				m.ID = fmt.Sprintf("0b7e3f4e-%04d-4000-8000-%012d", k, n)
				m.Key = fmt.Sprintf("key-%d", k)
				bad := k%2 == 1
				m.Headers = map[string]string{"Exchange": q.Exchange}
				if bad {
					m.Headers["Exchange"] = missing
				}
				err := s.Publish(context.Background(), []sinks.Message{m})[0]
				if bad && (err == nil || !strings.Contains(err.Error(), "NOT_FOUND")) {
					t.Errorf("to the missing exchange: %v", err)
				}
				if !bad && err != nil {
					t.Errorf("to the exchange that exists, while another fails: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	waitGet(t, q, 10*20)
}
