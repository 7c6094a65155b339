// Package sinktest is the conformance suite of sinks: the same cases run
// against every destination (HTTP, null, RabbitMQ, Kafka, NATS), each through
// a Harness that knows how to build the sink, observe what reached the
// destination as a consumer sees it, and break the destination's server.
//
// What a sink promises and the suite checks:
//
//   - the body and headers arrive intact (QueueBox's headers win over the
//     row's), and the message id is carried the destination's own way;
//   - the rows of one key arrive in order while many goroutines publish runs
//     of different keys at once;
//   - a failure belongs to one message, not to the whole call: the messages
//     before it are delivered, it gets its own error (permanent when its
//     address cannot be rendered), and the messages after it in the same call
//     get errors and are not delivered after it;
//   - a redelivery carries the same id;
//   - a cancelled context fails every message with an error that wraps
//     context.Canceled (the engine tells a drain from a failing destination
//     that way), and a destination that is down fails the call instead of
//     hanging;
//   - after its server restarts, or closes the sink's connections, the sink
//     delivers again by itself.
//
// Features switch cases off for destinations that cannot take part (the null
// sink observes nothing), never to let a sink off a promise it makes: a
// harness that declares a feature must supply what the case needs, or the
// case fails.
//
// Addresses: the harness builds its sink with an address that holds the
// placeholder {{ headers.Route }} (a URL path, a routing key, a topic or a
// subject). Good messages carry Route = Target.Route; a message without the
// header cannot be rendered; Target.Unroutable renders but names a place the
// destination refuses.
package sinktest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
)

// Harness adapts one destination to the suite.
type Harness struct {
	// Features says which cases apply.
	Features Features
	// Open prepares a fresh destination for one case (a new queue, topic,
	// stream or path, so that cases may run in parallel) and returns the
	// sink and the means to observe and break it. The harness closes the sink
	// in t.Cleanup. faults is true for the cases that restart the server or
	// close its connections: a harness may give those a private server.
	Open func(t *testing.T, faults bool) *Target
}

// Features are the suite's capability flags.
type Features struct {
	// Observable: Target.Received sees what reached the destination.
	Observable bool
	// Templated: the sink's address holds {{ headers.Route }}.
	Templated bool
	// Unroutable: Target.Unroutable names a place the destination refuses.
	Unroutable bool
	// Refuses: Target.Refused names a place that exists but refuses to
	// store what it is sent (the broker says no after taking the message).
	Refuses bool
	// Dedupes: the destination drops a second message with the same id
	// (JetStream's duplicate window).
	Dedupes bool
	// Restart: Target.Stop and Target.Start stop the destination's server
	// and start it again.
	Restart bool
	// CloseConnections: Target.CloseConnections closes the sink's
	// connections from the server side.
	CloseConnections bool
	// Down: Target.Down builds a sink whose server does not answer.
	Down bool
}

// Target is one prepared destination.
type Target struct {
	Sink sinks.Sink
	// Received returns what the destination's consumer has seen so far, in
	// the order it saw it.
	Received func() []Delivery
	// Route is the Route header value that the address accepts.
	Route string
	// Unroutable is a Route value the destination refuses (a mandatory
	// publish with no binding, a topic or stream that does not exist).
	Unroutable string
	// Refused is a Route value whose place exists but refuses every
	// message: a RabbitMQ queue at its length limit that rejects publishes
	// (the broker nacks them), a JetStream stream at its message limit
	// that discards new messages.
	Refused string
	// Stop stops the server; Start starts it again at the same address,
	// keeping what it stored, and returns once it is up.
	Stop, Start func(t *testing.T)
	// CloseConnections makes the server close every connection of the sink.
	CloseConnections func(t *testing.T)
	// Down builds a sink whose server refuses connections, and returns the
	// address that the error should name.
	Down func(t *testing.T) (sinks.Sink, string)
}

// Delivery is one message as the destination's consumer saw it.
type Delivery struct {
	// ID is the message id the destination's own way (AMQP message_id,
	// Nats-Msg-Id), or X-Message-Id where the protocol has no such field.
	ID string
	// Key is the Kafka record key, or X-Key elsewhere.
	Key string
	// Headers are the message's headers, names as the protocol gives them.
	Headers map[string]string
	Body    []byte
}

// Header reads a header, ignoring the case of its name (HTTP canonicalises
// names, brokers do not).
func (d *Delivery) Header(name string) (string, bool) {
	if v, ok := d.Headers[name]; ok {
		return v, true
	}
	c := textproto.CanonicalMIMEHeaderKey(name)
	for k, v := range d.Headers {
		if textproto.CanonicalMIMEHeaderKey(k) == c {
			return v, true
		}
	}
	return "", false
}

// Wait is how long the suite waits for an eventual condition.
var Wait = 60 * time.Second

// Run runs every case that applies to h.
func Run(t *testing.T, h Harness) {
	f := h.Features
	t.Run("OneResultPerMessage", func(t *testing.T) { t.Parallel(); oneResultPerMessage(t, h) })
	t.Run("CancelledContext", func(t *testing.T) { t.Parallel(); cancelledContext(t, h) })
	if f.Observable {
		t.Run("BodyAndHeadersArriveIntact", func(t *testing.T) { t.Parallel(); bodyAndHeaders(t, h) })
		t.Run("KeyOrderUnderConcurrency", func(t *testing.T) { t.Parallel(); keyOrder(t, h) })
		t.Run("RedeliveryKeepsTheID", func(t *testing.T) { t.Parallel(); redelivery(t, h) })
	}
	if f.Observable && f.Templated {
		t.Run("RenderFailureIsPerMessage", func(t *testing.T) { t.Parallel(); renderFailure(t, h) })
	}
	if f.Observable && f.Unroutable {
		t.Run("UnroutableIsPerMessage", func(t *testing.T) { t.Parallel(); unroutable(t, h) })
	}
	if f.Observable && f.Refuses {
		t.Run("RefusalIsPerMessage", func(t *testing.T) { t.Parallel(); refused(t, h) })
	}
	if f.Down {
		t.Run("DownFailsInsteadOfHanging", func(t *testing.T) { t.Parallel(); down(t, h) })
	}
	// The fault cases may share a private server of the harness: they run
	// one at a time (before the parallel cases above, as Go orders them).
	if f.Observable && f.CloseConnections {
		t.Run("RecoversAfterConnectionsClosed", func(t *testing.T) { recovers(t, h, false) })
	}
	if f.Observable && f.Restart {
		t.Run("RecoversAfterRestart", func(t *testing.T) { recovers(t, h, true) })
	}
}

// Message builds a good message for the suite: Route set, a JSON body that
// names its key and sequence.
func Message(tg *Target, key string, seq int64) sinks.Message {
	agg := "order"
	return sinks.Message{
		ID: fmt.Sprintf("0b7e3f4e-%04x-4000-8000-%012x", len(key), uniq()), Topic: "order.created", Key: key,
		AggregateType: &agg, Sequence: seq, CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Headers: map[string]string{"Route": tg.Route},
		Body:    fmt.Appendf(nil, `{"key":%q,"seq":%d}`, key, seq),
	}
}

var (
	uniqMu sync.Mutex
	uniqN  int64 = time.Now().UnixNano() & 0xffffffffff
)

func uniq() int64 {
	uniqMu.Lock()
	defer uniqMu.Unlock()
	uniqN++
	return uniqN
}

// MaxBatch is how many messages of one key the engine would hand the sink
// in one call.
func MaxBatch(s sinks.Sink) int {
	if b, ok := s.(sinks.OrderedBatcher); ok {
		return max(1, b.MaxOrderedBatch())
	}
	return 1
}

func publish(t *testing.T, s sinks.Sink, msgs ...sinks.Message) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	errs := s.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		// Errorf, not Fatalf: publish runs in the suite's goroutines too.
		t.Errorf("Publish of %d messages returned %d results", len(msgs), len(errs))
		errs = append(errs, sinks.Errors(max(0, len(msgs)-len(errs)), errors.New("no result"))...)[:len(msgs)]
	}
	return errs
}

// eventually polls cond until it holds, or fails the test with what the
// last poll said.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	testkit.Eventually(t, what, Wait, cond)
}

// byID finds the deliveries of a message id.
func byID(ds []Delivery, id string) []Delivery {
	var out []Delivery
	for _, d := range ds {
		if d.ID == id {
			out = append(out, d)
		}
	}
	return out
}

func waitFor(t *testing.T, tg *Target, ids ...string) []Delivery {
	t.Helper()
	var got []Delivery
	eventually(t, "messages arrive", func() error {
		got = tg.Received()
		for _, id := range ids {
			if len(byID(got, id)) == 0 {
				return fmt.Errorf("%s has not arrived (%d deliveries so far)", id, len(got))
			}
		}
		return nil
	})
	return got
}

func oneResultPerMessage(t *testing.T, h Harness) {
	tg := h.Open(t, false)
	n := min(MaxBatch(tg.Sink), 5)
	msgs := make([]sinks.Message, n)
	for i := range msgs {
		msgs[i] = Message(tg, "one-result", int64(i))
	}
	for i, err := range publish(t, tg.Sink, msgs...) {
		if err != nil {
			t.Errorf("message %d: %v", i, err)
		}
	}
	if errs := publish(t, tg.Sink); len(errs) != 0 {
		t.Errorf("an empty call returned %d results", len(errs))
	}
}

func cancelledContext(t *testing.T, h Harness) {
	tg := h.Open(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	msgs := []sinks.Message{Message(tg, "cancelled", 0), Message(tg, "cancelled", 1)}
	errs := tg.Sink.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("%d results for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("message %d under a cancelled context: %v, want an error that wraps context.Canceled", i, err)
		}
		if sinks.IsPermanent(err) {
			t.Errorf("message %d: a cancelled delivery is not permanent: %v", i, err)
		}
	}
}

func bodyAndHeaders(t *testing.T, h Harness) {
	tg := h.Open(t, false)
	keyed := Message(tg, "cust-42", 7)
	keyed.Attempt = 2
	keyed.Body = []byte(`{"text":"héllo, wörld","n":[1,2,3],"nested":{"a":null}}`)
	keyed.Headers = map[string]string{"Route": tg.Route, "X-Tenant": "acme", "X-Topic": "spoofed", "X-Message-Id": "spoofed"}
	unkeyed := Message(tg, "", 0)
	unkeyed.AggregateType = nil
	for _, m := range []sinks.Message{keyed, unkeyed} {
		if err := publish(t, tg.Sink, m)[0]; err != nil {
			t.Fatalf("publish %s: %v", m.ID, err)
		}
	}
	got := waitFor(t, tg, keyed.ID, unkeyed.ID)

	d := byID(got, keyed.ID)[0]
	if string(d.Body) != string(keyed.Body) {
		t.Errorf("body %q, want %q", d.Body, keyed.Body)
	}
	if d.Key != "cust-42" {
		t.Errorf("key %q, want cust-42", d.Key)
	}
	want := map[string]string{"X-Tenant": "acme", "Route": tg.Route}
	keyed.StandardHeaders(func(name, value string) { want[name] = value })
	for name, v := range want {
		if g, ok := d.Header(name); !ok || g != v {
			t.Errorf("header %s = %q (present %v), want %q", name, g, ok, v)
		}
	}

	u := byID(got, unkeyed.ID)[0]
	if u.Key != "" {
		t.Errorf("an unkeyed message arrived with key %q", u.Key)
	}
	if v, ok := u.Header("X-Key"); ok {
		t.Errorf("an unkeyed message carries X-Key %q", v)
	}
	if v, ok := u.Header("X-Aggregate-Type"); ok {
		t.Errorf("a message without aggregate type carries X-Aggregate-Type %q", v)
	}
	if string(u.Body) != string(unkeyed.Body) {
		t.Errorf("body %q, want %q", u.Body, unkeyed.Body)
	}
}

func keyOrder(t *testing.T, h Harness) {
	tg := h.Open(t, false)
	const keys, perKey = 24, 40
	maxRun := min(MaxBatch(tg.Sink), 7)
	prefix := fmt.Sprintf("order-%x-", uniq())
	var wg sync.WaitGroup
	ids := make(chan string, keys*perKey)
	for k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("%s%d", prefix, k)
			seq := int64(0)
			for run := 1; seq < perKey; run++ {
				n := min(1+(run+k)%maxRun, perKey-int(seq))
				msgs := make([]sinks.Message, n)
				for i := range msgs {
					msgs[i] = Message(tg, key, seq+int64(i))
					ids <- msgs[i].ID
				}
				for i, err := range publish(t, tg.Sink, msgs...) {
					if err != nil {
						t.Errorf("key %s, sequence %d: %v", key, msgs[i].Sequence, err)
						return
					}
				}
				seq += int64(n)
			}
		}()
	}
	wg.Wait()
	close(ids)
	if t.Failed() {
		return
	}
	var all []string
	for id := range ids {
		all = append(all, id)
	}
	got := waitFor(t, tg, all...)
	seen := map[string][]int64{}
	for _, d := range got {
		if !strings.HasPrefix(d.Key, prefix) {
			continue
		}
		s, _ := d.Header("X-Sequence")
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("delivery %s has X-Sequence %q", d.ID, s)
		}
		seen[d.Key] = append(seen[d.Key], n)
	}
	if len(seen) != keys {
		t.Errorf("%d keys arrived, want %d", len(seen), keys)
	}
	for key, seqs := range seen {
		want := make([]int64, perKey)
		for i := range want {
			want[i] = int64(i)
		}
		if !slices.Equal(seqs, want) {
			t.Errorf("key %s arrived as %v, want 0..%d in order, each once", key, seqs, perKey-1)
		}
	}
}

// failureInTheMiddle publishes [good, bad, after] in one call, then a later
// message of the same key, and checks that only the failure's own message
// and those after it failed, and that "after" never reached the
// destination: the later message arriving proves it, since a key's messages
// arrive in order.
func failureInTheMiddle(t *testing.T, tg *Target, bad sinks.Message, check func(error)) {
	key := bad.Key
	good := Message(tg, key, 0)
	after := Message(tg, key, 2)
	// Another call, concurrently, with a good message of another key.
	other := Message(tg, key+"-other", 0)
	var otherErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		otherErr = publish(t, tg.Sink, other)[0]
	}()
	errs := publish(t, tg.Sink, good, bad, after)
	<-done
	if errs[0] != nil {
		t.Errorf("the message before the failure: %v", errs[0])
	}
	check(errs[1])
	if errs[2] == nil {
		t.Errorf("the message after the failure succeeded; it must get an error so that it is retried after the failed one")
	} else if sinks.IsPermanent(errs[2]) {
		t.Errorf("the message after the failure got a permanent error (%v); it did nothing wrong and must be retried", errs[2])
	}
	if otherErr != nil {
		t.Errorf("a concurrent call with a good message: %v", otherErr)
	}
	later := Message(tg, key, 3)
	if err := publish(t, tg.Sink, later)[0]; err != nil {
		t.Fatalf("a later message of the key: %v", err)
	}
	got := waitFor(t, tg, good.ID, other.ID, later.ID)
	if n := len(byID(got, bad.ID)); n != 0 {
		t.Errorf("the failed message arrived %d times", n)
	}
	if n := len(byID(got, after.ID)); n != 0 {
		t.Errorf("the message after the failure arrived %d times; it was published after a failed one", n)
	}
}

func renderFailure(t *testing.T, h Harness) {
	tg := h.Open(t, false)
	bad := Message(tg, fmt.Sprintf("render-%x", uniq()), 1)
	delete(bad.Headers, "Route")
	failureInTheMiddle(t, tg, bad, func(err error) {
		if !sinks.IsPermanent(err) {
			t.Errorf("a message whose address cannot be rendered: %v, want a permanent error", err)
		}
		if err == nil || !strings.Contains(err.Error(), "headers.Route") {
			t.Errorf("the error should name the placeholder headers.Route: %v", err)
		}
	})
}

func unroutable(t *testing.T, h Harness) {
	failsAlone(t, h, "Unroutable", func(tg *Target) string { return tg.Unroutable }, "an unroutable message is retried (a binding may appear)")
}

// refused is unroutable's twin for a place that takes the message and then
// says no (a nack): the messages after it in the call must not be
// published, so that none of them reaches the destination before it.
func refused(t *testing.T, h Harness) {
	failsAlone(t, h, "Refused", func(tg *Target) string { return tg.Refused }, "a refused message is retried (the place may make room)")
}

// failsAlone sends a message to a place the destination refuses in the
// middle of a call (failureInTheMiddle): it fails with an error that is
// retried, and so do the messages after it.
func failsAlone(t *testing.T, h Harness, field string, place func(*Target) string, retried string) {
	tg := h.Open(t, false)
	route := place(tg)
	if route == "" {
		t.Fatalf("the harness declares %s but gives no Target.%s", field, field)
	}
	bad := Message(tg, fmt.Sprintf("%s-%x", strings.ToLower(field), uniq()), 1)
	bad.Headers["Route"] = route
	failureInTheMiddle(t, tg, bad, func(err error) {
		if err == nil {
			t.Errorf("a message the destination refuses succeeded")
		} else if sinks.IsPermanent(err) {
			t.Errorf("%s: %v", retried, err)
		}
	})
}

func redelivery(t *testing.T, h Harness) {
	tg := h.Open(t, false)
	key := fmt.Sprintf("redelivery-%x", uniq())
	m := Message(tg, key, 0)
	if err := publish(t, tg.Sink, m)[0]; err != nil {
		t.Fatal(err)
	}
	again := m
	again.Attempt = 1
	if err := publish(t, tg.Sink, again)[0]; err != nil {
		t.Fatalf("the redelivery: %v", err)
	}
	if h.Features.Dedupes {
		// A later message of the key arrives after the duplicate would have.
		later := Message(tg, key, 1)
		if err := publish(t, tg.Sink, later)[0]; err != nil {
			t.Fatal(err)
		}
		got := waitFor(t, tg, m.ID, later.ID)
		if n := len(byID(got, m.ID)); n != 1 {
			t.Errorf("the destination dedupes by id, but the message arrived %d times", n)
		}
		return
	}
	var ds []Delivery
	eventually(t, "both deliveries arrive", func() error {
		ds = byID(tg.Received(), m.ID)
		if len(ds) < 2 {
			return fmt.Errorf("%d of 2 arrived", len(ds))
		}
		return nil
	})
	for i, d := range ds {
		if id, _ := d.Header("X-Message-Id"); id != m.ID {
			t.Errorf("delivery %d: X-Message-Id %q, want %q", i, id, m.ID)
		}
		if a, _ := d.Header("X-Attempt"); a != strconv.Itoa(i) {
			t.Errorf("delivery %d: X-Attempt %q, want %d", i, a, i)
		}
	}
}

func down(t *testing.T, h Harness) {
	tg := h.Open(t, false)
	if tg.Down == nil {
		t.Fatal("the harness declares Down but gives no Target.Down")
	}
	s, addr := tg.Down(t)
	// The caller's deadline is far away: the sink must give up by itself.
	ctx, cancel := context.WithTimeout(context.Background(), 5*Wait)
	defer cancel()
	errs := s.Publish(ctx, []sinks.Message{Message(tg, "down", 0), Message(tg, "down", 1)})
	if ctx.Err() != nil {
		t.Errorf("Publish waited for the caller's deadline instead of failing by itself")
	}
	if len(errs) != 2 {
		t.Fatalf("%d results for 2 messages", len(errs))
	}
	for i, err := range errs {
		switch {
		case err == nil:
			t.Errorf("message %d succeeded with the server down", i)
		case sinks.IsPermanent(err):
			t.Errorf("message %d: a server that is down is retried, not permanent: %v", i, err)
		}
	}
	if errs[0] != nil && !strings.Contains(errs[0].Error(), addr) {
		t.Errorf("the error should name the server %s: %v", addr, errs[0])
	}
}

// recovers delivers, breaks the server (closes the sink's connections, or
// stops the server, checks that a Publish meanwhile fails by itself with an
// error that is retried, and starts it again), and checks that the sink
// delivers again by itself.
func recovers(t *testing.T, h Harness, restart bool) {
	tg := h.Open(t, true)
	if (restart && (tg.Stop == nil || tg.Start == nil)) || (!restart && tg.CloseConnections == nil) {
		t.Fatal("the harness declares this fault but the target gives no function for it")
	}
	key := fmt.Sprintf("recover-%x", uniq())
	first := Message(tg, key, 0)
	if err := publish(t, tg.Sink, first)[0]; err != nil {
		t.Fatal(err)
	}
	waitFor(t, tg, first.ID)
	seq := int64(1)
	if restart {
		tg.Stop(t)
		// The caller's deadline is far away: the sink must give up by itself.
		ctx, cancel := context.WithTimeout(context.Background(), 5*Wait)
		err := tg.Sink.Publish(ctx, []sinks.Message{Message(tg, key, seq)})[0]
		if ctx.Err() != nil {
			t.Errorf("with the server stopped, Publish waited for the caller's deadline")
		}
		cancel()
		if err == nil || sinks.IsPermanent(err) {
			t.Errorf("with the server stopped, Publish returned %v; want an error that is retried", err)
		}
		seq++
		tg.Start(t)
	} else {
		tg.CloseConnections(t)
	}
	var delivered []string
	var failures int
	eventually(t, "the sink delivers again", func() error {
		m := Message(tg, key, seq)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		err := tg.Sink.Publish(ctx, []sinks.Message{m})[0]
		if err != nil {
			if sinks.IsPermanent(err) {
				t.Fatalf("a failure while the server was away is permanent: %v", err)
			}
			failures++
			return err
		}
		seq++
		delivered = append(delivered, m.ID)
		return nil
	})
	waitFor(t, tg, delivered...)
	t.Logf("%d calls failed before the sink delivered again", failures)
}

// Throughput publishes keys*perKey messages through s, one goroutine per key
// publishing runs of up to run messages (as key actors do), and reports the
// rate as the benchmark's rows/s. The destination's address must accept
// Message's messages (Route = tg.Route). With topics, a key's messages take
// them in turns (for an address that follows the topic, it changes from one
// message of a key to the next); without, every message has Message's. It
// also reports the CPU time the test process spent per row (cpu-µs/row):
// on a machine that the relay shares with its database and broker, a
// sink's CPU is throughput taken from them. A broker that runs in the test
// process counts too.
func Throughput(b *testing.B, tg *Target, keys, perKey, run int, topics ...string) {
	run = max(1, min(run, MaxBatch(tg.Sink)))
	for range b.N {
		start, cpu := time.Now(), processCPU()
		var wg sync.WaitGroup
		var failed sync.Once
		for k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("bench-%d", k)
				for i := 0; i < perKey; i += run {
					msgs := make([]sinks.Message, min(run, perKey-i))
					for j := range msgs {
						msgs[j] = Message(tg, key, int64(i+j))
						if len(topics) > 0 {
							msgs[j].Topic = topics[(i+j)%len(topics)]
						}
					}
					for _, err := range tg.Sink.Publish(context.Background(), msgs) {
						if err != nil {
							failed.Do(func() { b.Error(err) })
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		b.ReportMetric(float64(keys*perKey)/time.Since(start).Seconds(), "rows/s")
		b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(keys*perKey), "cpu-µs/row")
	}
}

// processCPU is the CPU time, user and system, of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Template parses an address template, failing the test on an error.
func Template(t testing.TB, s string) *routing.Template {
	t.Helper()
	p, err := routing.ParseTemplate(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Open builds a sink, failing the test on an error, and closes it when the
// test ends.
func Open[S sinks.Sink, C any](t testing.TB, build func(C) (S, error), cfg C) S {
	t.Helper()
	s, err := build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// ClosedAddress is a loopback address (host:port) where nothing listens: a
// destination that is down.
func ClosedAddress(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
