package nats

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/inbox/sourcetest"
	"github.com/queuebox/queuebox/internal/inboxtest"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testlog"
	"github.com/queuebox/queuebox/internal/testnats"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// The NATS source passes the sources' conformance suite: it terminates a
// message it cannot store, and receives a stream's messages in stream
// order. Its durable has an ack wait far longer than the suite waits, so
// that a message delivered and not acknowledged comes back only through
// the source's reset (see TestCrashResetsTheDurable). The stream's
// duplicate window is the shortest the server allows, so that a repeat of
// a Nats-Msg-Id can get past it and reach the source.
func TestConformance(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, sourcetest.Harness{
		Features: sourcetest.Features{Refusal: sourcetest.Terminated, BrokerOrder: true, CloseConnections: true, Restart: true},
		Open: func(t *testing.T, _ bool) *sourcetest.Target {
			f := newFixture(t, testnats.Start(t))
			f.longAckWait(t)
			tg := &sourcetest.Target{Inbox: f.d, MaxBatch: 10, GeneratedID: regexp.MustCompile("^" + f.stream + `/\d+$`),
				Send: f.publish, Stop: f.s.Stop, Start: f.s.Start}
			tg.Consumer = func(t *testing.T, o sourcetest.Options) (inbox.Consumer, error) {
				cfg := f.config(t, f.s.URL, o.Observer, o.AfterStore, nil)
				cfg.Mapping = o.Traced(cfg.Mapping)
				return New(cfg)
			}
			tg.Left = func(*testing.T) (int, error) {
				i, err := f.state()
				if err != nil {
					return 0, err
				}
				return unacknowledged(i), nil
			}
			tg.BrokerOrder = func(*testing.T) []string {
				var ids []string
				for _, m := range f.st.Messages() {
					ids = append(ids, m.Header.Get(jetstream.MsgIDHeader))
				}
				return ids
			}
			tg.CloseConnections = func(t testing.TB) { f.s.Disconnect(t, "queuebox inbox orders") }
			return tg
		},
	})
}

// fixture is a server, a stream on it over subject, a database of the
// test's own, and a connection for the test's own requests.
type fixture struct {
	s               *testnats.Server
	js              jetstream.JetStream
	st              *testnats.Stream
	d               *postgres.Dialect
	stream, subject string
}

// durable is the name of the durable consumer every test uses.
const durable = "qb-inbox"

func newFixture(t *testing.T, s *testnats.Server) *fixture {
	t.Helper()
	f := &fixture{s: s, d: testdb.Migrated(t, 10), stream: testnats.Unique("QBT")}
	f.subject = f.stream + ".in"
	// The shortest duplicate window the server allows (see publish).
	f.st = s.NewStreamConfig(t, jetstream.StreamConfig{Name: f.stream, Subjects: []string{f.subject}, Storage: jetstream.FileStorage,
		Duplicates: 100 * time.Millisecond})
	var err error
	if f.js, err = jetstream.New(s.Connect(t)); err != nil {
		t.Fatal(err)
	}
	return f
}

var errDuplicate = errors.New("the stream dropped it as a duplicate")

// publish sends msgs to the stream's subject through JetStream, with
// Nats-Msg-Id when the message has an id. The stream drops a repeat of an
// id within its duplicate window: such a repeat is sent again until the
// stream takes it, so that the source receives it twice as a sender's
// late retry would make it. It reports a failure with t.Error: the suite
// may call it from a goroutine of its own.
func (f *fixture) publish(t *testing.T, msgs ...sourcetest.Message) {
	t.Helper()
	for _, m := range msgs {
		nm := natsgo.NewMsg(f.subject)
		nm.Data = m.Body
		for name, v := range m.Headers {
			nm.Header.Set(name, v)
		}
		for name, v := range map[string]string{"Event-Type": m.Type, "Order-Id": m.Aggregate, jetstream.MsgIDHeader: m.ID} {
			if v != "" {
				nm.Header.Set(name, v)
			}
		}
		var err error
		if perr := testkit.Poll(sourcetest.Wait, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var ack *jetstream.PubAck
			if ack, err = f.js.PublishMsg(ctx, nm); err == nil && ack.Duplicate {
				return errDuplicate
			}
			return nil // taken, or an error that sending again could store twice
		}); perr != nil {
			err = perr
		}
		if err != nil {
			t.Errorf("publish %s: %v", m.ID, err)
			return
		}
	}
}

// config is a consumer of the durable on the server at url, with batches
// of 10 and an ack wait of a second when it creates the durable itself.
func (f *fixture) config(t *testing.T, url string, obs inbox.Observer, hook func() error, logs *testlog.Buffer) Config {
	cfg := Config{Broker: inbox.Broker{Mapping: sourcetest.Mapping(t, "orders", "Event-Type", "Order-Id"), Storer: inbox.NewStorer("orders", f.d, obs, nil),
		MaxBatch: 10, AfterStore: hook}, URL: url, Stream: f.stream, Durable: durable, ackWait: time.Second}
	if logs != nil {
		cfg.Log = logs.Logger()
	}
	return cfg
}

// consume starts a consumer (see config) that logs to the buffer it
// returns, stopped when the test ends.
func (f *fixture) consume(t *testing.T, url string, hook func() error) *testlog.Buffer {
	t.Helper()
	logs := &testlog.Buffer{}
	c, err := New(f.config(t, url, nil, hook, logs))
	sourcetest.Started(t, c, err)
	return logs
}

// longAckWait creates the durable with an ack wait far longer than a test
// waits, so that a message delivered and not acknowledged can only come
// back through the source's reset.
func (f *fixture) longAckWait(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.js.CreateConsumer(ctx, f.stream, jetstream.ConsumerConfig{Durable: durable, AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy, AckWait: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
}

// state reads the durable's state.
func (f *fixture) state() (*jetstream.ConsumerInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := f.js.Consumer(ctx, f.stream, durable)
	if err != nil {
		return nil, err
	}
	return c.Info(ctx)
}

// info is state, failing the test on an error.
func (f *fixture) info(t *testing.T) *jetstream.ConsumerInfo {
	t.Helper()
	i, err := f.state()
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// unacknowledged is how many messages the durable has not had
// acknowledged (delivered and waiting, or not yet delivered).
func unacknowledged(i *jetstream.ConsumerInfo) int { return int(i.NumPending) + i.NumAckPending }

func (f *fixture) rows(t *testing.T) int { return len(inboxtest.Rows(t, f.d)) }

// crashAfterOneBatch publishes n messages over three orders, and runs a
// consumer that dies (as a crash would) once it has stored its first batch
// and before it acknowledges it.
func (f *fixture) crashAfterOneBatch(t *testing.T, n int) {
	t.Helper()
	msgs := make([]sourcetest.Message, n)
	for i := range msgs {
		msgs[i] = sourcetest.Message{ID: fmt.Sprintf("m%d", i), Type: "created", Aggregate: fmt.Sprintf("o-%d", i%3), Body: sourcetest.Body(i)}
	}
	f.publish(t, msgs...)
	crashed := make(chan struct{})
	f.consume(t, f.s.URL, func() error {
		select {
		case <-crashed:
		default:
			close(crashed)
		}
		return errors.New("crash")
	})
	select {
	case <-crashed:
	case <-time.After(sourcetest.Wait):
		t.Fatal("the first consumer stored no batch")
	}
}

// checkReceiveOrder fails the test where an order's messages (their "n")
// were received out of the order they were published in.
func (f *fixture) checkReceiveOrder(t *testing.T) {
	t.Helper()
	last := map[string]int{}
	for _, r := range inboxtest.Rows(t, f.d) {
		if prev, ok := last[*r.AggregateID]; ok && r.N < prev {
			t.Errorf("order %s: message %d received after %d", *r.AggregateID, r.N, prev)
		}
		last[*r.AggregateID] = r.N
	}
}

// Only NATS resets its durable: JetStream would deliver a dead consumer's
// unacknowledged messages (a stored batch, and the pulled batch behind it
// that it never stored) again only after the ack wait, behind the messages
// that followed them. The suite checks the order that the reset keeps;
// this checks the reset itself: the dead consumer left more than a batch
// unacknowledged, the next one says that it delivers again from the first
// of them, and everything comes long before the ack wait.
func TestCrashResetsTheDurable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testnats.Start(t))
	f.longAckWait(t)
	const n = 60
	f.crashAfterOneBatch(t, n)
	if p := f.info(t).NumAckPending; p <= 10 {
		t.Fatalf("the dead consumer left %d messages unacknowledged; want its stored batch and more pulled behind it", p)
	}
	logs := f.consume(t, f.s.URL, nil)
	inboxtest.WaitFor(t, "every message, long before the ack wait", func() bool { return f.rows(t) == n })
	f.checkReceiveOrder(t)
	if !strings.Contains(logs.String(), "delivering again from the first of them") {
		t.Errorf("the log does not say the durable was reset:\n%s", logs.String())
	}
}

// Only NATS: a connection that breaks in the middle of a stream, with
// messages the server sent and the source never received, ends the
// session, and the next one resets the durable: those messages come again
// at once and in stream order, not after the durable's ten-minute ack wait
// behind the ones that followed them. A proxy between the source and the
// server holds back what the server sends, then the server drops the
// connection, and what the proxy held is lost.
func TestReconnectKeepsStreamOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testnats.Start(t))
	f.longAckWait(t)
	tox := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	proxy := toxiproxy.NewProxy(tox, "nats", "127.0.0.1:0", strings.TrimPrefix(f.s.URL, "nats://"))
	if err := tox.Collection.Add(proxy, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Stop)
	const n = 400
	msgs := make([]sourcetest.Message, n)
	for i := range msgs {
		msgs[i] = sourcetest.Message{ID: fmt.Sprintf("m%d", i), Type: "created", Aggregate: fmt.Sprintf("o-%d", i%3), Body: sourcetest.Body(i)}
	}
	f.publish(t, msgs...)
	// The source stops in the middle of the stream, after a batch that
	// brings it to 80 and to 240 messages stored, until the test has put
	// the proxy in its way.
	breaks := []int{80, 240}
	reached, resume := make(chan struct{}), make(chan struct{})
	obs := &inboxtest.Counter{}
	next := 0
	logs := &testlog.Buffer{}
	c, err := New(f.config(t, "nats://"+proxy.Listen, obs, func() error {
		// A slow database, so that the pull runs ahead of the stores.
		time.Sleep(3 * time.Millisecond)
		if next < len(breaks) && obs.Get(inbox.Stored) >= breaks[next] {
			next++
			select {
			case reached <- struct{}{}:
				<-resume
			case <-t.Context().Done():
			}
		}
		return nil
	}, logs))
	sourcetest.Started(t, c, err)
	for _, at := range breaks {
		select {
		case <-reached:
		case <-time.After(sourcetest.Wait):
			t.Fatalf("the source did not store %d messages", at)
		}
		if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(`{"name": "swallow", "type": "timeout", "stream": "downstream", "attributes": {"timeout": 0}}`)); err != nil {
			t.Fatal(err)
		}
		resume <- struct{}{}
		inboxtest.WaitFor(t, "messages sent and never received", func() bool { return f.info(t).NumAckPending > 0 })
		// A quiet spell, not a wait for an event: the source stores what
		// it already has in hand, and what the server sends meanwhile, the
		// proxy holds back. Without it the connection may break while
		// everything sent is still in the source's buffer, and nothing is
		// lost for a reset to bring back. Nothing reports that the
		// source's buffer is empty.
		time.Sleep(200 * time.Millisecond)
		f.s.Disconnect(t, "queuebox inbox orders")
		if err := proxy.Toxics.RemoveToxic(context.Background(), "swallow"); err != nil {
			t.Fatal(err)
		}
	}
	inboxtest.WaitFor(t, "every message, long before the ack wait", func() bool { return f.rows(t) == n })
	f.checkReceiveOrder(t)
	if got := strings.Count(logs.String(), "delivering again from the first of them"); got < 2 {
		t.Errorf("%d resets after two broken connections with messages lost on their way, want 2:\n%s", got, logs.String())
	}
}

// Only NATS: a user who may not reset the durable (or a server older than
// 2.14) only costs the order. After a crash the source, which created the
// durable itself (a second's ack wait), says once that it cannot reset,
// goes on consuming, and the unacknowledged messages come back after the
// ack wait; nothing is lost or stored twice.
func TestNoResetStillConsumes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testnats.StartDenying(t, "$JS.API.CONSUMER.RESET.>"))
	const n = 40
	f.crashAfterOneBatch(t, n)
	logs := f.consume(t, f.s.URL, nil)
	inboxtest.WaitFor(t, "every message", func() bool { return f.rows(t) == n })
	inboxtest.WaitFor(t, "every message acknowledged", func() bool { return unacknowledged(f.info(t)) == 0 })
	if got := strings.Count(logs.String(), "could not be reset"); got != 1 {
		t.Errorf("the refused reset was logged %d times, want once:\n%s", got, logs.String())
	}
}
