// Package sourcetest is the conformance suite of the inbox's sources: the
// same cases run against every source (HTTP, RabbitMQ, Kafka, NATS), each
// through a Harness that knows how to send the source messages, build its
// consumer, see what its broker still holds for it, and break the broker.
//
// What a source promises and the suite checks:
//
//   - a message is stored once per message id: a repeat stores nothing and
//     is counted a duplicate; the row has the templates' topic and
//     aggregate id, the first receipt's body and the message's headers, and
//     a message sent without an id gets one of the source's making;
//   - a source that dies between the insert and the acknowledgement loses
//     nothing and stores nothing twice: the message comes again (the broker
//     delivers it again; an HTTP sender that got no answer sends it again)
//     and is a duplicate;
//   - a message that can never be stored (not JSON, a template's header
//     missing, a value the database refuses) is refused the way the source
//     documents (Refusal), counted, and does not hold up the messages
//     behind it;
//   - Stop drains: what the source took is stored and acknowledged, the
//     rest stays with the broker (or the sender) for the next consumer;
//     nothing is lost and nothing is stored twice;
//   - receive order is kept per aggregate id, across a crash too;
//   - through the inbox relay and the outbox, a repeat is delivered once,
//     and concurrent senders' messages come out of a destination in receive
//     order per aggregate;
//   - after the broker closes the source's connections, or restarts, the
//     source consumes again by itself.
//
// Features switch cases off, or choose the check, for sources that work
// another way, never to let a source off a promise it makes: a harness that
// declares a feature must supply what the case needs, or the case fails.
//
// Messages: the harness maps Message.Type to the topic "in.TYPE" and
// Message.Aggregate to the aggregate id (Mapping builds that mapping from
// the names that carry them in its protocol), with the aggregate type
// "order".
package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/internal/inboxtest"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrecv"
	"github.com/queuebox/queuebox/sinks/tracing"
)

// Harness adapts one source to the suite.
type Harness struct {
	// Features says which cases apply, and how the source refuses.
	Features Features
	// Open prepares a fresh place for one case: a migrated database of its
	// own, and a queue, topic, stream or HTTP source, so that cases may run
	// in parallel. faults is true for the cases that close the broker's
	// connections or restart it: a harness may give those a private
	// server.
	Open func(t *testing.T, faults bool) *Target
}

// Refusal is what a source does with a message it can never store.
type Refusal int

// The refusals of the sources.
const (
	// Answered: the sender is answered with the reason (HTTP: 400); the
	// sender does not send it again. Target.Refusals tells the reasons.
	Answered Refusal = iota + 1
	// DeadLettered: the broker gets it back without requeue (RabbitMQ's
	// reject), so that a dead-letter exchange keeps it. Target.SetAside
	// counts what the dead-letter queue got.
	DeadLettered
	// Terminated: the broker is told never to deliver it again (NATS).
	Terminated
	// SkippedPast: the source's position moves past it (Kafka's committed
	// offsets).
	SkippedPast
)

// Features are the suite's capability flags.
type Features struct {
	// Refusal is how the source refuses; required.
	Refusal Refusal
	// HeaderNUL: the protocol carries a NUL character in a header value;
	// the inbox stores the header without it.
	HeaderNUL bool
	// BrokerOrder: Target.BrokerOrder gives the order in which the broker
	// holds the messages of each aggregate (a stream, a partition).
	BrokerOrder bool
	// CloseConnections: Target.CloseConnections closes the source's
	// connections from the broker's side.
	CloseConnections bool
	// Restart: Target.Stop and Target.Start stop the broker and start it
	// again, keeping what it stored.
	Restart bool
}

// Target is one prepared source.
type Target struct {
	// Inbox is the database the source stores in.
	Inbox *postgres.Dialect
	// MaxBatch is the most messages the source stores in one transaction
	// when the suite's messages wait for it.
	MaxBatch int
	// GeneratedID matches the id the source gives a message sent without
	// one.
	GeneratedID *regexp.Regexp
	// Send hands messages to the source the way a sender does, in order.
	// A broker harness returns once the broker holds them; HTTP sends from
	// a sender of its own, which sends each message, again and again, until
	// a running source answers it. Safe for concurrent use: each call is
	// one sender. A failure is reported with t.Error, not t.Fatal: Send may
	// run on a goroutine of the suite's.
	Send func(t *testing.T, msgs ...Message)
	// Consumer builds (does not start) a consumer of the source that
	// reports to o.Observer and runs o.AfterStore after each stored batch.
	Consumer func(t *testing.T, o Options) (inbox.Consumer, error)
	// Left is how many messages sent to the source are still to be taken:
	// not acknowledged, committed or answered. It may lag (acknowledgements
	// travel) or fail (a broker that is still starting): the suite polls
	// it.
	Left func(t *testing.T) (int, error)
	// SetAside counts the refused messages that the broker keeps aside
	// (DeadLettered).
	SetAside func(t *testing.T) int
	// Refusals maps the id of each message the sender was refused to the
	// reason it was answered with (Answered).
	Refusals func() map[string]string
	// BrokerOrder returns the message ids as the broker holds them
	// (Features.BrokerOrder).
	BrokerOrder func(t *testing.T) []string
	// CloseConnections makes the broker close every connection of the
	// source (Features.CloseConnections).
	CloseConnections func(t testing.TB)
	// Stop stops the broker; Start starts it again at the same address with
	// what it stored, and returns once it is up (Features.Restart).
	Stop, Start func(t testing.TB)
}

// Options are what the suite gives a consumer it starts.
type Options struct {
	Observer inbox.Observer
	// AfterStore runs after a batch committed and before it is
	// acknowledged (HTTP: before the answer); an error ends the consumer
	// there, as a crash would.
	AfterStore func() error
	// Tracer makes the spans of the receipts; nil is tracing off. The
	// harness gives it to the mapping (Options.Traced).
	Tracer *tracing.Tracer
}

// Message is one message as the suite sends it.
type Message struct {
	// ID is the sender's message id; "" sends none.
	ID string
	// Type makes the topic, "in.TYPE"; "" sends none, and the message then
	// cannot be mapped.
	Type string
	// Aggregate is the aggregate id.
	Aggregate string
	// Headers are the message's own headers (canonical names, as X-Note).
	Headers map[string]string
	Body    []byte
}

// Mapping is the mapping a harness gives its source: the topic
// "in.{{ headers.TYPE }}", the aggregate type "order" and the aggregate id
// "{{ headers.AGGREGATE }}", where typ and aggregate name what carries
// Message.Type and Message.Aggregate in the source's protocol (a header, or
// a property the source reads as one).
func Mapping(t testing.TB, source, typ, aggregate string) *inbox.Mapping {
	t.Helper()
	topic, err := inbox.ParseTemplate("in.{{ headers." + typ + " }}")
	if err != nil {
		t.Fatal(err)
	}
	aggType, err := inbox.ParseTemplate("order")
	if err != nil {
		t.Fatal(err)
	}
	aggID, err := inbox.ParseTemplate("{{ headers." + aggregate + " }}")
	if err != nil {
		t.Fatal(err)
	}
	m, err := inbox.NewMapping(source, topic, aggType, aggID)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// NewID matches a new UUID, the id that HTTP and RabbitMQ give a message
// sent without one.
var NewID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// Wait is how long the suite waits for an eventual condition: consumer
// groups and sessions take their time on a loaded machine.
var Wait = inboxtest.Wait

// Run runs every case that applies to h.
func Run(t *testing.T, h Harness) {
	f := h.Features
	if f.Refusal == 0 {
		t.Fatal("the harness declares no Refusal")
	}
	for _, c := range []struct {
		name string
		run  func(*testing.T, Harness)
	}{
		{"StoresOnce", storesOnce},
		{"CrashBetweenInsertAndAck", crashBetweenInsertAndAck},
		{"RefusesWhatItCannotStore", refuses},
		{"StopDrains", stopDrains},
		{"OrderPerAggregate", orderPerAggregate},
		{"OnceAndInOrderToADestination", toDestination},
		{"KeepsTheTraceContext", keepsTheTraceContext},
	} {
		t.Run(c.name, func(t *testing.T) { t.Parallel(); c.run(t, h) })
	}
	// The fault cases may share a private server of the harness: they run
	// one at a time (before the parallel cases above, as Go orders them).
	if f.CloseConnections {
		t.Run("ConsumesAfterConnectionsClosed", func(t *testing.T) { reconnects(t, h, false) })
	}
	if f.Restart {
		t.Run("ConsumesAfterRestart", func(t *testing.T) { reconnects(t, h, true) })
	}
}

// Body is a JSON body whose "n" is n (inboxtest.Row.N reads it back).
func Body(n int) []byte { return fmt.Appendf(nil, `{"n":%d}`, n) }

// series is n messages of type "created" over the given number of
// aggregates, in turn; message i has the id m<i> and the body's n = i.
func series(n, aggregates int) []Message {
	out := make([]Message, n)
	for i := range out {
		out[i] = Message{ID: fmt.Sprintf("m%d", i), Type: "created", Aggregate: fmt.Sprintf("o-%d", i%aggregates), Body: Body(i)}
	}
	return out
}

// start builds and starts a consumer, stopped when the test ends.
func start(t *testing.T, tg *Target, o Options) inbox.Consumer {
	t.Helper()
	c, err := tg.Consumer(t, o)
	return Started(t, c, err)
}

// Started starts c, which New returned with err, and stops it when the
// test ends: a source's own tests start their consumers as the suite does.
func Started(t *testing.T, c inbox.Consumer, err error) inbox.Consumer {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// stop drains c, which must end within Wait.
func stop(t *testing.T, c inbox.Consumer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	testkit.Eventually(t, what, Wait, cond)
}

// rowsAre waits until the inbox holds n rows and cond (nil: nothing more)
// holds too, and returns the rows.
func rowsAre(t *testing.T, tg *Target, n int, cond func() error) []inboxtest.Row {
	t.Helper()
	var rows []inboxtest.Row
	eventually(t, fmt.Sprintf("%d rows in the inbox", n), func() error {
		if rows = inboxtest.Rows(t, tg.Inbox); len(rows) != n {
			return fmt.Errorf("%d rows", len(rows))
		}
		if cond != nil {
			return cond()
		}
		return nil
	})
	return rows
}

// leftIs waits until the broker (or sender) holds n messages for the
// source.
func leftIs(t *testing.T, tg *Target, n int, what string) {
	t.Helper()
	eventually(t, what, func() error {
		left, err := tg.Left(t)
		if err == nil && left != n {
			err = fmt.Errorf("%d messages still to be taken, want %d", left, n)
		}
		return err
	})
}

func counted(obs *inboxtest.Counter, stored, duplicates, rejected int) error {
	if obs.Get(inbox.Stored) != stored || obs.Get(inbox.Duplicate) != duplicates || obs.Get(inbox.Rejected) != rejected {
		return fmt.Errorf("counted %v, want %d stored, %d duplicates and %d rejected", obs, stored, duplicates, rejected)
	}
	return nil
}

func byID(rows []inboxtest.Row) map[string]inboxtest.Row {
	out := make(map[string]inboxtest.Row, len(rows))
	for _, r := range rows {
		out[r.MessageID] = r
	}
	return out
}

func storesOnce(t *testing.T, h Harness) {
	tg := h.Open(t, false)
	first := Message{ID: "m1", Type: "paid", Aggregate: "inv-1", Headers: map[string]string{"X-Note": "kept"}, Body: Body(1)}
	// The sender's retry, with another body: the first receipt's stays.
	again := first
	again.Body = Body(9)
	tg.Send(t, first, Message{ID: "m2", Type: "sent", Aggregate: "inv-2", Body: Body(2)}, again,
		Message{Type: "paid", Aggregate: "inv-3", Body: Body(3)})
	obs := &inboxtest.Counter{}
	c := start(t, tg, Options{Observer: obs})
	rows := rowsAre(t, tg, 3, func() error { return counted(obs, 3, 1, 0) })
	stop(t, c)
	ids := byID(rows)
	if r := ids["m1"]; r.Topic != "in.paid" || r.AggregateID == nil || *r.AggregateID != "inv-1" || r.N != 1 || r.Headers["X-Note"] != "kept" {
		t.Errorf("m1 stored as %+v; want topic in.paid, aggregate inv-1, the first body (n 1) and the header X-Note", r)
	}
	if r := ids["m2"]; r.Topic != "in.sent" || r.AggregateID == nil || *r.AggregateID != "inv-2" {
		t.Errorf("m2 stored as %+v", r)
	}
	var generated []inboxtest.Row
	for id, r := range ids {
		if id != "m1" && id != "m2" {
			generated = append(generated, r)
		}
	}
	if len(generated) != 1 || !tg.GeneratedID.MatchString(generated[0].MessageID) || generated[0].N != 3 {
		t.Errorf("the message sent without an id was stored as %+v; want one row with an id that matches %s", generated, tg.GeneratedID)
	}
	leftIs(t, tg, 0, "every message acknowledged")
}

var errCrash = errors.New("a crash between the insert and the acknowledgement")

// afterFirstStore returns an AfterStore hook that returns result, and a
// channel that it closes when a first batch is stored.
func afterFirstStore(result error) (func() error, <-chan struct{}) {
	stored := make(chan struct{})
	var once sync.Once
	return func() error {
		once.Do(func() { close(stored) })
		return result
	}, stored
}

// await waits for ch to close, or fails the test.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(Wait):
		t.Fatalf("%s: not within %s", what, Wait)
	}
}

// crashAfterOneBatch starts a consumer that dies once it has stored its
// first batch, before acknowledging it, waits for that, and returns how
// many rows it stored.
func crashAfterOneBatch(t *testing.T, tg *Target) int {
	t.Helper()
	crash, crashed := afterFirstStore(errCrash)
	start(t, tg, Options{Observer: &inboxtest.Counter{}, AfterStore: crash})
	await(t, crashed, "the first consumer stores a batch")
	stored := len(inboxtest.Rows(t, tg.Inbox))
	if stored == 0 || stored > tg.MaxBatch {
		t.Fatalf("the first consumer stored %d rows before it died, want one batch (at most %d)", stored, tg.MaxBatch)
	}
	return stored
}

func crashBetweenInsertAndAck(t *testing.T, h Harness) {
	tg := h.Open(t, false)
	const n = 40
	tg.Send(t, series(n, 4)...)
	stored := crashAfterOneBatch(t, tg)
	obs := &inboxtest.Counter{}
	c := start(t, tg, Options{Observer: obs})
	// The batch comes again to the next consumer, which finds duplicates.
	rowsAre(t, tg, n, func() error { return counted(obs, n-stored, stored, 0) })
	stop(t, c)
	if got := len(inboxtest.Rows(t, tg.Inbox)); got != n {
		t.Fatalf("%d rows for %d messages", got, n)
	}
	if err := counted(obs, n-stored, stored, 0); err != nil {
		t.Fatalf("the next consumer %v", err)
	}
	leftIs(t, tg, 0, "every message acknowledged")
}

func refuses(t *testing.T, h Harness) {
	tg := h.Open(t, false)
	notJSON := Message{ID: "bad-1", Type: "paid", Aggregate: "inv-1", Body: []byte("not json")}
	noType := Message{ID: "bad-2", Aggregate: "inv-1", Body: Body(0)}
	// JSON that the database refuses (PostgreSQL's jsonb has no lone
	// surrogate), among good messages: it alone is refused.
	refused := Message{ID: "bad-3", Type: "paid", Aggregate: "inv-1", Body: []byte(`{"n":"\ud800"}`)}
	good := Message{ID: "ok-1", Type: "paid", Aggregate: "inv-1", Body: Body(1)}
	after := Message{ID: "ok-2", Type: "paid", Aggregate: "inv-1", Body: Body(2)}
	if h.Features.HeaderNUL {
		// A NUL in a header is dropped, not a reason to refuse.
		after.Headers = map[string]string{"X-Note": "a\x00b"}
	}
	tg.Send(t, notJSON, noType, good, refused, after)
	obs := &inboxtest.Counter{}
	c := start(t, tg, Options{Observer: obs})
	rows := rowsAre(t, tg, 2, func() error { return counted(obs, 2, 0, 3) })
	stop(t, c)
	if rows[0].MessageID != "ok-1" || rows[1].MessageID != "ok-2" {
		t.Fatalf("rows %+v; want ok-1 then ok-2", rows)
	}
	if h.Features.HeaderNUL && rows[1].Headers["X-Note"] != "ab" {
		t.Errorf("the header with a NUL was stored as %q, want %q", rows[1].Headers["X-Note"], "ab")
	}
	switch h.Features.Refusal {
	case Answered:
		if tg.Refusals == nil {
			t.Fatal("the harness declares Answered but the target gives no Refusals")
		}
		reasons := tg.Refusals()
		for id, want := range map[string]string{"bad-1": "not JSON", "bad-2": "needs the header", "bad-3": ""} {
			if r, ok := reasons[id]; !ok || !strings.Contains(r, want) {
				t.Errorf("%s was answered %q (refused: %v); want a refusal that says %q", id, r, ok, want)
			}
		}
		for _, id := range []string{"ok-1", "ok-2"} {
			if r, ok := reasons[id]; ok {
				t.Errorf("%s was refused: %s", id, r)
			}
		}
	case DeadLettered:
		if tg.SetAside == nil {
			t.Fatal("the harness declares DeadLettered but the target gives no SetAside")
		}
		eventually(t, "the refused messages dead-lettered", func() error {
			if n := tg.SetAside(t); n != 3 {
				return fmt.Errorf("%d dead-lettered, want 3", n)
			}
			return nil
		})
	}
	// Refused, terminated, committed past or answered: none comes again.
	leftIs(t, tg, 0, "nothing left for the source")
}

func stopDrains(t *testing.T, h Harness) {
	tg := h.Open(t, false)
	const n = 400
	tg.Send(t, series(n, 1)...)
	// Stop comes as soon as a first batch is stored, while the rest is on
	// its way.
	hook, first := afterFirstStore(nil)
	c := start(t, tg, Options{Observer: &inboxtest.Counter{}, AfterStore: hook})
	await(t, first, "a first batch stored")
	stop(t, c)
	stored := len(inboxtest.Rows(t, tg.Inbox))
	t.Logf("Stop came after %d of %d messages were stored", stored, n)
	// Every message is either stored and acknowledged, or left to the
	// broker, never both and never neither.
	leftIs(t, tg, n-stored, fmt.Sprintf("the %d messages not stored left for the next consumer", n-stored))
	obs := &inboxtest.Counter{}
	c = start(t, tg, Options{Observer: obs})
	rowsAre(t, tg, n, nil)
	stop(t, c)
	if err := counted(obs, n-stored, 0, 0); err != nil {
		t.Fatalf("after a clean drain the next consumer %v", err)
	}
	leftIs(t, tg, 0, "every message acknowledged")
}

// inOrder fails the test where an aggregate's rows (their n) were received
// out of the order they were sent in.
func inOrder(t *testing.T, rows []inboxtest.Row) {
	t.Helper()
	last := map[string]int{}
	for _, r := range rows {
		if r.AggregateID == nil {
			t.Fatalf("row %s has no aggregate id", r.MessageID)
		}
		if l, ok := last[*r.AggregateID]; ok && r.N < l {
			t.Errorf("aggregate %s: message %d received after %d", *r.AggregateID, r.N, l)
		}
		last[*r.AggregateID] = r.N
	}
}

func orderPerAggregate(t *testing.T, h Harness) {
	tg := h.Open(t, false)
	const n = 60
	tg.Send(t, series(n, 3)...)
	// What the dead consumer took comes again before what followed it.
	crashAfterOneBatch(t, tg)
	start(t, tg, Options{Observer: &inboxtest.Counter{}})
	inOrder(t, rowsAre(t, tg, n, nil))
}

func toDestination(t *testing.T, h Harness) {
	tg := h.Open(t, false)
	recv := testrecv.New(t, nil)
	inboxtest.Relay(t, tg.Inbox, recv.URL+"/{{ topic }}")
	obs := &inboxtest.Counter{}
	start(t, tg, Options{Observer: obs})

	once := Message{ID: "once", Type: "created", Aggregate: "o-1", Headers: map[string]string{"X-Note": "kept"}, Body: Body(0)}
	tg.Send(t, once, once)
	eventually(t, "both copies taken", func() error { return counted(obs, 1, 1, 0) })
	inboxtest.Settled(t, tg.Inbox, 1)
	rows := inboxtest.Rows(t, tg.Inbox)
	if len(rows) != 1 || rows[0].MessageID != "once" {
		t.Fatalf("inbox rows %+v; want the message once", rows)
	}
	reqs := recv.Requests()
	if len(reqs) != 1 || reqs[0].ID != rows[0].ID || reqs[0].Topic != "in.created" || reqs[0].Key != "o-1" ||
		reqs[0].Header.Get("X-Aggregate-Type") != "order" || reqs[0].Header.Get("X-Note") != "kept" {
		t.Fatalf("deliveries %+v; want the one message, once, with the inbox id %s, its topic, key and headers", reqs, rows[0].ID)
	}

	// The burst: two senders per aggregate, so that an aggregate's receive
	// order is the source's, and each sender's own messages keep theirs.
	const senders, each = 6, 20
	sent := map[string]bool{}
	var wg sync.WaitGroup
	for p := range senders {
		msgs := make([]Message, each)
		for i := range msgs {
			msgs[i] = Message{ID: fmt.Sprintf("p%d-%d", p, i), Type: "paid", Aggregate: fmt.Sprintf("agg-%d", p/2),
				Body: fmt.Appendf(nil, `{"client":%d,"n":%d}`, p, i)}
			sent[msgs[i].ID] = true
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tg.Send(t, msgs...)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	total := 1 + senders*each
	inboxtest.Settled(t, tg.Inbox, int64(total))
	if dups := recv.CheckOrder(t); dups != 0 {
		t.Errorf("%d duplicate deliveries", dups)
	}
	if got, reqs := recv.Delivered(), len(recv.Requests()); got != total || reqs != total {
		t.Fatalf("%d requests delivered %d distinct messages; want %d, each once", reqs, got, total)
	}
	if err := counted(obs, total, 1, 0); err != nil {
		t.Fatal(err)
	}

	// Per aggregate, the ids in the inbox's receive order and in the order
	// the destination got them; and each sender's messages in its order.
	// The deliveries carry the inbox ids: ids names them by message id.
	received, delivered := map[string][]string{}, map[string][]string{}
	aggregate, ids := map[string]string{}, map[string]string{}
	for _, r := range inboxtest.Rows(t, tg.Inbox) {
		ids[r.ID] = r.MessageID
		if sent[r.MessageID] {
			received[*r.AggregateID] = append(received[*r.AggregateID], r.MessageID)
			aggregate[r.MessageID] = *r.AggregateID
		}
	}
	last := map[int]int{}
	for _, q := range recv.Requests()[1:] {
		delivered[q.Key] = append(delivered[q.Key], ids[q.ID])
		p, n := testrecv.JSONField(q.Body, "client"), testrecv.JSONField(q.Body, "n")
		if l, ok := last[p]; ok && n <= l {
			t.Errorf("sender %d: message %d delivered after %d", p, n, l)
		}
		last[p] = n
	}
	if len(received) != senders/2 {
		t.Fatalf("%d aggregates received, want %d", len(received), senders/2)
	}
	for k, want := range received {
		if len(want) != 2*each {
			t.Errorf("%s: %d messages received, want %d", k, len(want), 2*each)
		}
		if got := delivered[k]; !slices.Equal(got, want) {
			t.Errorf("%s: delivered in order %v, received in order %v", k, got, want)
		}
	}
	if h.Features.BrokerOrder {
		if tg.BrokerOrder == nil {
			t.Fatal("the harness declares BrokerOrder but the target gives no BrokerOrder")
		}
		held := map[string][]string{}
		for _, id := range tg.BrokerOrder(t) {
			if sent[id] {
				held[aggregate[id]] = append(held[aggregate[id]], id)
			}
		}
		for k, want := range held {
			if !slices.Equal(received[k], want) {
				t.Errorf("%s: received in order %v, the broker holds them in order %v", k, received[k], want)
			}
		}
	}
}

// reconnects consumes a message, breaks the broker (closes the source's
// connections, or stops and starts it), and checks that a message sent
// afterwards is stored without anyone starting the source again.
func reconnects(t *testing.T, h Harness, restart bool) {
	tg := h.Open(t, true)
	if (restart && (tg.Stop == nil || tg.Start == nil)) || (!restart && tg.CloseConnections == nil) {
		t.Fatal("the harness declares this fault but the target gives no function for it")
	}
	c := start(t, tg, Options{Observer: &inboxtest.Counter{}})
	tg.Send(t, Message{ID: "before", Type: "created", Aggregate: "o", Body: Body(1)})
	rowsAre(t, tg, 1, nil)
	if restart {
		tg.Stop(t)
		tg.Start(t)
	} else {
		tg.CloseConnections(t)
	}
	tg.Send(t, Message{ID: "after", Type: "created", Aggregate: "o", Body: Body(2)})
	rowsAre(t, tg, 2, nil)
	stop(t, c)
	// An acknowledgement lost with the connection leaves its message to
	// come again, as a duplicate (to the next Kafka member: a commit that
	// failed is made good by the next one): the next consumer settles
	// what is left and stores nothing twice.
	c = start(t, tg, Options{Observer: &inboxtest.Counter{}})
	leftIs(t, tg, 0, "every message acknowledged by the next consumer")
	stop(t, c)
	leftIs(t, tg, 0, "every message acknowledged")
	if rows := inboxtest.Rows(t, tg.Inbox); len(rows) != 2 || rows[0].MessageID != "before" || rows[1].MessageID != "after" {
		t.Fatalf("rows %+v; want before, then after, each once", rows)
	}
}
