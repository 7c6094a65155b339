package actors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrecv"
	"github.com/queuebox/queuebox/routing"
)

// fanOut sends every topic to each of the receivers, named a, b, c....
func (h *harness) fanOut(recvs ...*testrecv.Receiver) {
	names := make([]string, len(recvs))
	for i := range recvs {
		names[i] = string(rune('a' + i))
	}
	h.fanOutNamed(names, recvs...)
}

// fanOutNamed sends every topic to each of the receivers, with their names.
func (h *harness) fanOutNamed(names []string, recvs ...*testrecv.Receiver) {
	h.opts.Destinations = map[string]actors.SinkFactory{}
	for i, r := range recvs {
		h.opts.Destinations[names[i]] = httpDest(h.t, r.URL+"/x", nil)
	}
	rt := route("#", names[0])
	rt.Destinations = names
	h.opts.Router = routing.NewRouter([]routing.Route{rt})
}

// downUntil is a receiver that answers status with text until up is
// closed, and 200 from then on.
func downUntil(t *testing.T, up <-chan struct{}, status int, text string) *testrecv.Receiver {
	return testrecv.New(t, func(*testrecv.Request) (int, string, map[string]string) {
		select {
		case <-up:
			return 200, "", nil
		default:
			return status, text, nil
		}
	})
}

// startWatched starts an engine, and fails the test if one of its actors
// crashed by the time the test ends.
func (h *harness) startWatched() *actors.Engine {
	h.t.Helper()
	e := h.start()
	h.t.Cleanup(func() {
		select {
		case err := <-e.Fatal():
			h.t.Errorf("the engine crashed: %v", err)
		default:
		}
	})
	return e
}

// copyCounts counts the copies per destination and state.
func (h *harness) copyCounts() map[string]map[dialects.State]int64 {
	h.t.Helper()
	cs, err := h.d.CopyCounts(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]map[dialects.State]int64{}
	for _, c := range cs {
		if out[c.Destination] == nil {
			out[c.Destination] = map[dialects.State]int64{}
		}
		out[c.Destination][c.State] += c.Rows
	}
	return out
}

// waitCopiesWaiting waits until dest has n copies pending or processing.
func (h *harness) waitCopiesWaiting(dest string, n int) {
	h.t.Helper()
	testkit.Eventually(h.t, fmt.Sprintf("%d copies waiting for %s", n, dest), time.Minute, func() error {
		if cs := h.copyCounts()[dest]; cs[dialects.Pending]+cs[dialects.Processing] != int64(n) {
			return fmt.Errorf("copies of %s: %v", dest, cs)
		}
		return nil
	})
}

// fanRows are keyed rows over keys, and unkeyed ones, that may be tried
// often.
func fanRows(keys, perKey, unkeyed int) []dialects.NewRow {
	all := rows(keys, perKey, unkeyed, func(int) int { return 0 })
	for i := range all {
		m := 1000
		all[i].MaxAttempts = &m
	}
	return all
}

// checkInOrder checks that recv accepted every row, each key in order.
func checkInOrder(t *testing.T, name string, recv *testrecv.Receiver, n int) {
	t.Helper()
	if got := recv.Delivered(); got != n {
		t.Errorf("%s accepted %d distinct rows, want %d", name, got, n)
	}
	if problems, _ := recv.OrderReport(); len(problems) > 0 {
		t.Errorf("%s: %d order problems, first: %s", name, len(problems), problems[0])
	}
}

// A row routed to three destinations reaches each, every key in order, in
// its own pass: no copy is written when all of them answer.
func TestFanOutToThreeDestinations(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a, b, c := testrecv.New(t, nil), testrecv.New(t, nil), testrecv.New(t, nil)
	h.fanOut(a, b, c)
	all := fanRows(10, 10, 20)
	h.insert(all...)
	e := h.startWatched()
	h.waitState(dialects.Delivered, int64(len(all)), time.Minute)
	for name, r := range map[string]*testrecv.Receiver{"a": a, "b": b, "c": c} {
		checkInOrder(t, name, r, len(all))
		if _, dups := r.OrderReport(); dups != 0 {
			t.Errorf("%s got %d duplicates", name, dups)
		}
	}
	if cs := h.copyCounts(); len(cs) != 0 {
		t.Errorf("copies were written though every destination answered: %v", cs)
	}
	if got := e.Stats.Delivered.Load(); got != int64(3*len(all)) {
		t.Errorf("%d deliveries counted, want %d (one per destination)", got, 3*len(all))
	}
}

// One destination fails for a while: the others receive every row, each
// key in order, during the outage, and the rows are delivered; once it
// answers again it receives every row, each key in order, from the
// copies. Nothing goes dead.
func TestFanOutOutageOfOneDestinationHoldsBackNoOther(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	up := make(chan struct{})
	down := downUntil(t, up, 502, "bad gateway")
	a, c := testrecv.New(t, nil), testrecv.New(t, nil)
	h.fanOut(a, down, c)
	h.opts.Backoff = actors.Backoff{Initial: 20 * time.Millisecond, Multiplier: 2, Max: 200 * time.Millisecond, Jitter: 0.1}
	all := fanRows(10, 10, 20)
	h.insert(all...)
	h.startWatched()
	a.WaitDelivered(t, len(all), time.Minute)
	c.WaitDelivered(t, len(all), time.Minute)
	h.waitState(dialects.Delivered, int64(len(all)), time.Minute)
	if got := down.Delivered(); got != 0 {
		t.Fatalf("the failing destination accepted %d rows", got)
	}
	if cs := h.copyCounts(); cs["b"][dialects.Pending]+cs["b"][dialects.Processing] != int64(len(all)) {
		t.Fatalf("want a copy waiting for b for each row, got %v", cs)
	}
	close(up)
	down.WaitDelivered(t, len(all), time.Minute)
	testkit.Eventually(t, "every copy delivered", time.Minute, func() error {
		cs := h.copyCounts()["b"]
		if cs[dialects.Delivered] != int64(len(all)) {
			return fmt.Errorf("copies of b: %v", cs)
		}
		return nil
	})
	for name, r := range map[string]*testrecv.Receiver{"a": a, "b": down, "c": c} {
		checkInOrder(t, name, r, len(all))
	}
	if st := h.waitState(dialects.Delivered, int64(len(all)), 0); st.Rows[dialects.Dead] != 0 {
		t.Errorf("%d rows dead", st.Rows[dialects.Dead])
	}
	for dest, cs := range h.copyCounts() {
		if cs[dialects.Dead] != 0 {
			t.Errorf("%d copies of %s dead", cs[dialects.Dead], dest)
		}
	}
}

// A paused destination holds back none of the others: they receive every
// row while it is paused; it receives every row, each key in order, once
// resumed.
func TestFanOutPausedDestinationHoldsBackNoOther(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a, b, c := testrecv.New(t, nil), testrecv.New(t, nil), testrecv.New(t, nil)
	h.fanOut(a, b, c)
	ctx := context.Background()
	if _, _, err := h.d.DestinationPause(ctx, "b", "upgrading"); err != nil {
		t.Fatal(err)
	}
	all := fanRows(5, 8, 10)
	h.insert(all...)
	e := h.startWatched()
	a.WaitDelivered(t, len(all), time.Minute)
	c.WaitDelivered(t, len(all), time.Minute)
	h.waitState(dialects.Delivered, int64(len(all)), time.Minute)
	if n := len(b.Requests()); n != 0 {
		t.Fatalf("the paused destination got %d requests", n)
	}
	if s := status(t, e, "b"); s.Deferred["paused"] == 0 {
		t.Errorf("no delivery to b counted as deferred by the pause: %+v", s.Deferred)
	}
	if _, _, err := h.d.DestinationResume(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	b.WaitDelivered(t, len(all), time.Minute)
	for name, r := range map[string]*testrecv.Receiver{"a": a, "b": b, "c": c} {
		checkInOrder(t, name, r, len(all))
	}
}

// A filter splits a topic's rows between two routes: each row reaches
// exactly the destination of the first route that takes it.
func TestAFilterSplitsRowsBetweenTwoRoutes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	big, small := testrecv.New(t, nil), testrecv.New(t, nil)
	f, err := routing.CompileFilter(`.amount >= 100`)
	if err != nil {
		t.Fatal(err)
	}
	bigRoute := route("payment.#", "big")
	bigRoute.Name, bigRoute.Filter = "big payments", f
	h.opts.Router = routing.NewRouter([]routing.Route{bigRoute, route("payment.#", "small")})
	h.opts.Destinations = map[string]actors.SinkFactory{"big": httpDest(t, big.URL+"/x", nil), "small": httpDest(t, small.URL+"/x", nil)}
	want := map[string]string{}
	var all []dialects.NewRow
	for i := range 60 {
		amount := i * 7 % 200
		r := testkit.Row("payment.made", testkit.Payload(fmt.Sprintf(`{"amount":%d}`, amount)))
		if i%2 == 0 {
			r.Key = str(fmt.Sprintf("acct-%d", i%5))
		}
		all = append(all, r)
		want[fmt.Sprint(amount)] = map[bool]string{true: "big", false: "small"}[amount >= 100]
	}
	h.insert(all...)
	h.startWatched()
	h.waitState(dialects.Delivered, int64(len(all)), time.Minute)
	got := map[string]int{}
	for name, r := range map[string]*testrecv.Receiver{"big": big, "small": small} {
		for _, q := range r.Requests() {
			amount := fmt.Sprint(testrecv.JSONField(q.Body, "amount"))
			if want[amount] != name {
				t.Errorf("amount %s went to %s, want %s", amount, name, want[amount])
			}
			got[name]++
		}
		checkInOrder(t, name, r, r.Delivered())
	}
	if got["big"]+got["small"] != len(all) || got["big"] == 0 || got["small"] == 0 {
		t.Errorf("deliveries: %v; want %d rows split between both", got, len(all))
	}
}

// A filter that fails on a row sends the row dead with the filter's error;
// the rows it accepts or refuses go on.
func TestAFilterThatFailsSendsTheRowDead(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recv := testrecv.New(t, nil)
	f, err := routing.CompileFilter(`(.amount + "x") == "1x"`)
	if err != nil {
		t.Fatal(err)
	}
	strict := route("payment.#", "dest")
	strict.Name, strict.Filter = "strict", f
	h.opts.Router = routing.NewRouter([]routing.Route{strict})
	h.opts.Destinations = map[string]actors.SinkFactory{"dest": httpDest(t, recv.URL+"/x", nil)}
	h.insert(testkit.Row("payment.made", testkit.Key("k"), testkit.Payload(`{"amount":"1"}`)),
		testkit.Row("payment.made", testkit.Key("k"), testkit.Payload(`{"amount":1}`)),
		testkit.Row("payment.made", testkit.Key("k"), testkit.Payload(`{"amount":"1"}`)))
	h.startWatched()
	st := h.waitState(dialects.Dead, 1, time.Minute)
	h.waitState(dialects.Delivered, 2, time.Minute)
	dead, err := h.d.OutboxList(context.Background(), dialects.ListParams{Filter: dialects.Filter{States: []dialects.State{dialects.Dead}}, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].LastError == nil || !strings.Contains(*dead[0].LastError, `route "strict"`) || !strings.Contains(*dead[0].LastError, "cannot add") {
		t.Fatalf("want the row dead with the filter's error, got %v (%v)", lastErrors(dead), st.Rows)
	}
	if recv.Delivered() != 2 {
		t.Errorf("the receiver accepted %d rows, want the 2 the filter took", recv.Delivered())
	}
}

// A fan-out row's claim is lost mid-delivery (another replica took it once
// its lease passed, and died): the units of the lost claim write nothing,
// and every destination still receives every row once the Janitor hands
// the rows back.
func TestALostFanOutClaimLosesNoDelivery(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	started, hold := make(chan struct{}), make(chan struct{})
	var first, unhold sync.Once
	defer unhold.Do(func() { close(hold) })
	slow := testrecv.New(t, func(r *testrecv.Request) (int, string, map[string]string) {
		first.Do(func() {
			close(started)
			<-hold // the first request waits until its claim is lost
		})
		return 200, "", nil
	})
	b := testrecv.New(t, nil)
	h.fanOut(slow, b)
	h.opts.Lease = 1500 * time.Millisecond // renewals every 500 ms
	all := fanRows(2, 5, 4)
	h.insert(all...)
	e := h.startWatched()
	<-started
	tbl := pgx.Identifier{h.d.Names().Schema, "outbox"}.Sanitize()
	ctx := context.Background()
	// Another replica took the rows, and died: its lease has passed, and
	// the Janitor hands them back.
	if _, err := h.d.Pool().Exec(ctx, `UPDATE `+tbl+` SET claim_token = gen_random_uuid(), lease_expires_at = now() - interval '1 second' WHERE state = 'processing'`); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "lost claims counted", 30*time.Second, testkit.True(func() bool { return e.Stats.LostClaims.Load() > 0 }))
	unhold.Do(func() { close(hold) })
	h.waitState(dialects.Delivered, int64(len(all)), time.Minute)
	slow.WaitDelivered(t, len(all), time.Minute)
	b.WaitDelivered(t, len(all), time.Minute)
	testkit.Eventually(t, "no copy left to deliver", time.Minute, func() error {
		for dest, cs := range h.copyCounts() {
			if cs[dialects.Pending]+cs[dialects.Processing]+cs[dialects.Dead] > 0 {
				return fmt.Errorf("copies of %s: %v", dest, cs)
			}
		}
		return nil
	})
}

// A copy waits for a destination that a new configuration no longer has:
// it goes dead, saying so, and the other destinations are not held back.
func TestACopyWhoseDestinationIsGoneGoesDead(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := testrecv.New(t, nil)
	down := testrecv.New(t, func(*testrecv.Request) (int, string, map[string]string) { return 502, "bad gateway", nil })
	h.fanOut(a, down)
	all := fanRows(1, 3, 0)
	h.insert(all...)
	e := h.startWatched()
	h.waitState(dialects.Delivered, int64(len(all)), time.Minute)
	h.waitCopiesWaiting("b", len(all))
	if err := e.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The next configuration sends the topic to a and c.
	c := testrecv.New(t, nil)
	h.fanOutNamed([]string{"a", "c"}, a, c)
	h.startWatched()
	testkit.Eventually(t, "the copies of b dead", time.Minute, func() error {
		if cs := h.copyCounts()["b"]; cs[dialects.Dead] != int64(len(all)) {
			return fmt.Errorf("copies of b: %v", cs)
		}
		return nil
	})
	dead, err := h.d.CopyList(context.Background(), dialects.CopyListParams{Filter: dialects.CopyFilter{Destination: "b",
		Filter: dialects.Filter{States: []dialects.State{dialects.Dead}}}, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range dead {
		if cp.LastError == nil || !strings.Contains(*cp.LastError, "no longer exists in the configuration") {
			t.Errorf("copy of row %s dead with %v", cp.RowID, cp.LastError)
		}
	}
}

// Every mailbox of size 1, with fan-out rows whose units fail at times:
// everything is delivered to every destination, in order, no deadlock.
func TestFanOutMailboxesOfOneDoNotDeadlock(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a, b := testrecv.New(t, failPolicy), testrecv.New(t, nil)
	h.fanOut(a, b)
	h.opts.Mailboxes = actors.Mailboxes{Claimer: 1, Key: 1, Sink: 1, Completer: 1}
	h.opts.BatchSize, h.opts.MaxInFlight, h.opts.UnorderedConcurrency = 50, 200, 4
	all := rows(20, 15, 100, func(i int) int {
		if i%17 == 0 {
			return 1
		}
		return 0
	})
	h.insert(all...)
	h.startWatched()
	h.waitState(dialects.Delivered, int64(len(all)), 2*time.Minute)
	a.WaitDelivered(t, len(all), 2*time.Minute)
	b.WaitDelivered(t, len(all), 2*time.Minute)
	checkInOrder(t, "a", a, len(all))
	checkInOrder(t, "b", b, len(all))
}

// A key whose rows go to one destination and to several keeps its order
// at each: the rows to a alone travel in a's lane with the key's fan-out
// rows while b, failing for a while, holds back neither.
func TestAKeyRoutedToOneAndToSeveralKeepsItsOrderAtEach(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	up := make(chan struct{})
	a := testrecv.New(t, failPolicy)
	b := downUntil(t, up, 503, "unavailable")
	both := route("order.created", "a")
	both.Destinations = []string{"a", "b"}
	h.opts.Router = routing.NewRouter([]routing.Route{both, route("order.#", "a")})
	h.opts.Destinations = map[string]actors.SinkFactory{"a": httpDest(t, a.URL+"/x", nil), "b": httpDest(t, b.URL+"/x", nil)}
	var all []dialects.NewRow
	fanned := 0
	for i := range 60 {
		topic := "order.noted"
		if i%3 != 1 {
			topic, fanned = "order.created", fanned+1
		}
		fail := 0
		if i%7 == 0 {
			fail = 1
		}
		all = append(all, testkit.Row(topic, testkit.Key(fmt.Sprintf("k%d", i%4)), testkit.MaxAttempts(1000),
			testkit.Payload(fmt.Sprintf(`{"i":%d,"fail":%d}`, i, fail))))
	}
	h.insert(all...)
	h.startWatched()
	a.WaitDelivered(t, len(all), time.Minute)
	h.waitState(dialects.Delivered, int64(len(all)), time.Minute)
	close(up)
	b.WaitDelivered(t, fanned, time.Minute)
	checkInOrder(t, "a", a, len(all))
	checkInOrder(t, "b", b, fanned)
}

// Copies written while a route fanned out are delivered after the
// configuration stops fanning out: an engine that finds copies waiting
// runs the copies path all the same, and the destination receives the
// key's rows in order.
func TestCopiesLeftByAnEarlierConfigurationAreDelivered(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := testrecv.New(t, nil)
	var up sync.Once
	upNow := make(chan struct{})
	b := testrecv.New(t, func(*testrecv.Request) (int, string, map[string]string) {
		select {
		case <-upNow:
			return 204, "", nil
		default:
			return 503, "down", nil
		}
	})
	h.fanOut(a, b)
	all := fanRows(2, 4, 0)
	h.insert(all...)
	e := h.startWatched()
	h.waitState(dialects.Delivered, int64(len(all)), time.Minute)
	h.waitCopiesWaiting("b", len(all))
	if err := e.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The next configuration sends the topic to b alone; b is back.
	h.opts.Destinations = map[string]actors.SinkFactory{"b": httpDest(t, b.URL+"/x", nil)}
	h.opts.Router = routing.NewRouter([]routing.Route{route("#", "b")})
	up.Do(func() { close(upNow) })
	h.startWatched()
	testkit.Eventually(t, "the copies of b delivered", time.Minute, func() error {
		if cs := h.copyCounts()["b"]; cs[dialects.Delivered] != int64(len(all)) {
			return fmt.Errorf("copies of b: %v", cs)
		}
		return nil
	})
	b.WaitDelivered(t, len(all), time.Minute)
	b.CheckOrder(t)
}

// Two filtered routes of one pattern fan out to a shared destination, each
// with its own transform; the shared one is down, so each row leaves a
// copy for it. Once it is back, every copy goes through the transform of
// the route that made it, not the pattern's first route's.
func TestACopyKeepsTheTransformOfTheRouteThatMadeIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	up := make(chan struct{})
	audit := downUntil(t, up, 503, "down")
	eu, rest := testrecv.New(t, nil), testrecv.New(t, nil)
	compile := func(filter, transform string) (*routing.Filter, *routing.Transform) {
		var f *routing.Filter
		if filter != "" {
			var err error
			if f, err = routing.CompileFilter(filter); err != nil {
				t.Fatal(err)
			}
		}
		tr, err := routing.CompileTransform(transform)
		if err != nil {
			t.Fatal(err)
		}
		return f, tr
	}
	euRoute := route("order.#", "eu")
	euRoute.Name, euRoute.Destinations = "eu orders", []string{"eu", "audit"}
	euRoute.Filter, euRoute.Transform = compile(`.region == "eu"`, `{via: "eu", n: .n}`)
	restRoute := route("order.#", "rest")
	restRoute.Name, restRoute.Destinations = "other orders", []string{"rest", "audit"}
	_, restRoute.Transform = compile("", `{via: "rest", n: .n}`)
	h.opts.Router = routing.NewRouter([]routing.Route{euRoute, restRoute})
	h.opts.Destinations = map[string]actors.SinkFactory{"eu": httpDest(t, eu.URL+"/x", nil), "rest": httpDest(t, rest.URL+"/x", nil),
		"audit": httpDest(t, audit.URL+"/x", nil)}
	h.opts.Backoff = actors.Backoff{Initial: 20 * time.Millisecond, Multiplier: 2, Max: 200 * time.Millisecond, Jitter: 0.1}
	want := map[int]string{}
	var all []dialects.NewRow
	for i := range 40 {
		region := map[bool]string{true: "eu", false: "us"}[i%3 == 0]
		r := testkit.Row("order.created", testkit.Key(fmt.Sprintf("c%d", i%4)), testkit.Payload(fmt.Sprintf(`{"n":%d,"region":%q}`, i, region)))
		m := 1000
		r.MaxAttempts = &m
		all = append(all, r)
		want[i] = map[bool]string{true: "eu", false: "rest"}[region == "eu"]
	}
	h.insert(all...)
	h.startWatched()
	h.waitState(dialects.Delivered, int64(len(all)), time.Minute)
	close(up)
	audit.WaitDelivered(t, len(all), time.Minute)
	for _, q := range audit.Requests() {
		if q.Status != 200 {
			continue
		}
		var body struct {
			Via string `json:"via"`
			N   int    `json:"n"`
		}
		if err := json.Unmarshal(q.Body, &body); err != nil {
			t.Fatalf("audit received %s: %v", q.Body, err)
		}
		if body.Via != want[body.N] {
			t.Errorf("row %d reached audit through the transform of %q, want %q's", body.N, body.Via, want[body.N])
		}
	}
	checkInOrder(t, "audit", audit, len(all))
}
