package actors_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrecv"
	"github.com/queuebox/queuebox/routing"
)

// status is the engine's view of one destination.
func status(t testing.TB, e *actors.Engine, name string) actors.DestinationStatus {
	t.Helper()
	for _, s := range e.Destinations() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("the engine has no destination %q", name)
	return actors.DestinationStatus{}
}

// explain logs, when the test fails, what the engines did: their claims
// and outcomes, their view of each destination, and the end of the log.
func (h *harness) explain(es ...*actors.Engine) {
	h.t.Cleanup(func() {
		if !h.t.Failed() {
			return
		}
		for i, e := range es {
			st := &e.Stats
			h.t.Logf("engine %d: claimed %d in %d statements (%s), delivered %d, retried %d, released %d, in flight %d; destinations %+v",
				i, st.Claimed.Load(), st.ClaimStatements.Load(), st.ClaimKinds(), st.Delivered.Load(), st.Retried.Load(), st.Released.Load(), st.InFlight.Load(), e.Destinations())
		}
		logs := h.logs.String()
		h.t.Logf("the log's end:\n%s", logs[max(0, len(logs)-4000):])
	})
}

// attempts reads the attempt column of every row of a topic pattern's
// rows, by state.
func (h *harness) attempts(topicLike string) (rows map[dialects.State]int, sum int) {
	h.t.Helper()
	tbl := pgx.Identifier{h.d.Names().Schema, "outbox"}.Sanitize()
	q, err := h.d.Pool().Query(context.Background(), `SELECT state, count(*), COALESCE(sum(attempt), 0) FROM `+tbl+` WHERE topic LIKE $1 GROUP BY state`, topicLike)
	if err != nil {
		h.t.Fatal(err)
	}
	defer q.Close()
	rows = map[dialects.State]int{}
	for q.Next() {
		var st string
		var n, s int
		if err := q.Scan(&st, &n, &s); err != nil {
			h.t.Fatal(err)
		}
		rows[dialects.State(st)], sum = n, sum+s
	}
	if err := q.Err(); err != nil {
		h.t.Fatal(err)
	}
	return rows, sum
}

// With rateLimit {perSecond: 50}, 300 rows over keys and without one take
// at least 5 s: the bucket holds a second's worth (50), and the other 250
// come at 50 a second, whichever key actor or the pool sends them. In no
// second do more than the burst and a second's rate arrive.
func TestRateLimitHoldsAcrossKeysAndThePool(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recv := testrecv.New(t, nil)
	h.routeAllTo(httpDest(t, recv.URL, nil))
	h.opts.Policies = map[string]actors.DestinationPolicy{"dest": {RatePerSecond: 50}}
	e := h.start()
	h.explain(e)
	all := rows(20, 10, 100, func(int) int { return 0 })
	began := time.Now()
	h.insert(all...)
	recv.WaitDelivered(t, len(all), time.Minute)
	took := time.Since(began)
	if took < 5*time.Second {
		t.Fatalf("300 rows at 50 a second arrived in %v, under 5 s", took)
	}
	reqs := recv.Requests()
	for i := range reqs {
		n := 0
		for j := i; j < len(reqs) && reqs[j].At.Sub(reqs[i].At) < time.Second; j++ {
			n++
		}
		// The receiver stamps a request when its handler ends, a few
		// milliseconds after the token was taken: a little slack.
		if n > 105 {
			t.Fatalf("%d requests arrived within a second of %v; the bucket (50) and a second's rate (50) allow 100", n, reqs[i].At)
		}
	}
	if dups := recv.CheckOrder(t); dups != 0 {
		t.Errorf("%d duplicates", dups)
	}
	if _, sum := h.attempts("%"); sum != 0 {
		t.Errorf("throttled rows counted %d attempts", sum)
	}
	t.Logf("300 rows at 50 a second: %v; %d deferred while the flow was full", took.Round(time.Millisecond), status(t, e, "dest").Deferred["throttled"])
}

// maxConcurrency bounds the requests in flight to a destination at once,
// across the key actors and the pool.
func TestMaxConcurrencyHoldsAcrossKeysAndThePool(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var inFlight, most, served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(20 * time.Millisecond) // a slow destination: requests overlap
		inFlight.Add(-1)
		served.Add(1)
	}))
	t.Cleanup(srv.Close)
	h.routeAllTo(httpDest(t, srv.URL, nil))
	h.opts.Policies = map[string]actors.DestinationPolicy{"dest": {MaxConcurrency: 3}}
	h.start()
	all := rows(20, 5, 50, func(int) int { return 0 })
	h.insert(all...)
	testkit.Eventually(t, "every row delivered", time.Minute, func() error {
		if n := served.Load(); n < int64(len(all)) {
			return fmt.Errorf("%d of %d served", n, len(all))
		}
		return nil
	})
	if m := most.Load(); m > 3 {
		t.Fatalf("%d requests were in flight at once; maxConcurrency is 3", m)
	}
}

// A throttled destination with a deep backlog holds no more of the
// replica's credit than its flow lets wait: the rows of another
// destination, inserted once the backlog has filled the flow, are
// delivered meanwhile.
func TestAThrottledDestinationDoesNotStarveTheOthers(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	slow, fast := testrecv.New(t, nil), testrecv.New(t, nil)
	h.opts.Router = routing.NewRouter([]routing.Route{route("slow.#", "slow"), route("fast.#", "fast")})
	h.opts.Destinations = map[string]actors.SinkFactory{"slow": httpDest(t, slow.URL, nil), "fast": httpDest(t, fast.URL, nil)}
	h.opts.Policies = map[string]actors.DestinationPolicy{"slow": {RatePerSecond: 5}}
	h.opts.MaxInFlight = 100
	var backlog []dialects.NewRow
	for i := range 2000 {
		opts := []testkit.RowOption{}
		if i%2 == 0 {
			opts = append(opts, testkit.Key(fmt.Sprintf("k%d", i%40)))
		}
		backlog = append(backlog, testkit.Row("slow.created", opts...))
	}
	h.insert(backlog...)
	e := h.start()
	h.explain(e)
	testkit.Eventually(t, "the backlog to fill the slow destination's flow", time.Minute, testkit.True(func() bool {
		return status(t, e, "slow").Deferred["throttled"] > 0
	}))
	h.insert(testkit.Rows(200, "fast.created", func(i int) []testkit.RowOption {
		return []testkit.RowOption{testkit.Key(fmt.Sprintf("f%d", i%10))}
	})...)
	fast.WaitDelivered(t, 200, time.Minute)
	if n := slow.Delivered(); n >= 1000 {
		t.Fatalf("the slow destination got %d rows before the fast one got its 200; its rate is 5 a second", n)
	}
	if _, sum := h.attempts("slow.%"); sum != 0 {
		t.Errorf("deferred rows counted %d attempts", sum)
	}
}

// A paused destination gets no request and no attempt on any replica for as
// long as it is paused, while the other destinations' rows flow; after the
// resume every row is delivered, in key order, with no attempt counted. A
// pause made while the replicas run holds within their next read.
func TestAPausedDestinationWaitsOnEveryReplica(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recv := testrecv.New(t, nil)
	h.routeOrdersToHook(recv.URL, "#")
	ctx := context.Background()
	if _, _, err := h.d.DestinationPause(ctx, "hook", "the receiver is being upgraded"); err != nil {
		t.Fatal(err)
	}
	e1, e2 := h.start(), h.start() // two replicas on one database
	h.explain(e1, e2)
	orders := append(rows(10, 10, 0, func(int) int { return 0 }), testkit.Rows(50, "order.placed", nil)...)
	h.insert(orders...)
	h.insert(testkit.Rows(100, "audit.logged", nil)...)

	// Both replicas hold the rows a while: each has deferred some, and
	// together many times as many as there are heads to claim.
	testkit.Eventually(t, "both replicas to hold the paused destination's rows", time.Minute, func() error {
		d1, d2 := status(t, e1, "hook").Deferred["paused"], status(t, e2, "hook").Deferred["paused"]
		if d1 == 0 || d2 == 0 || d1+d2 < 3*(10+50) {
			return fmt.Errorf("deferred %d and %d rows", d1, d2)
		}
		return nil
	})
	if n := len(recv.Requests()); n != 0 {
		t.Fatalf("the paused destination got %d requests", n)
	}
	if st, sum := h.attempts("order.%"); st[dialects.Pending]+st[dialects.Processing] != len(orders) || sum != 0 {
		t.Fatalf("the paused destination's rows: %v with %d attempts; want all pending (or claimed to be deferred), none attempted", st, sum)
	}
	if st, _ := h.attempts("audit.%"); st[dialects.Delivered] != 100 {
		t.Fatalf("the other destination's rows: %v; want all delivered meanwhile", st)
	}
	if s := status(t, e2, "hook"); !s.Paused || s.PauseReason != "the receiver is being upgraded" {
		t.Fatalf("the replica's view of the pause: %+v", s)
	}

	if _, changed, err := h.d.DestinationResume(ctx, "hook"); err != nil || !changed {
		t.Fatalf("resume: %v, %v", changed, err)
	}
	recv.WaitDelivered(t, len(orders), time.Minute)
	if dups := recv.CheckOrder(t); dups != 0 {
		t.Errorf("%d duplicates", dups)
	}
	testkit.Eventually(t, "every outcome written", 0, func() error {
		if st, sum := h.attempts("order.%"); st[dialects.Delivered] != len(orders) || sum != 0 {
			return fmt.Errorf("after the resume: %v with %d attempts; want all delivered with none counted", st, sum)
		}
		return nil
	})

	// Paused while they run: once both replicas have read it, nothing more
	// goes out, though rows arrive.
	if _, _, err := h.d.DestinationPause(ctx, "hook", ""); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "both replicas to read the pause", 0, testkit.True(func() bool {
		return status(t, e1, "hook").Paused && status(t, e2, "hook").Paused
	}))
	sent := len(recv.Requests())
	before := status(t, e1, "hook").Deferred["paused"] + status(t, e2, "hook").Deferred["paused"]
	more := append(rows(5, 4, 0, func(int) int { return 0 }), testkit.Rows(10, "order.placed", nil)...)
	h.insert(more...)
	testkit.Eventually(t, "the new rows to be held", time.Minute, func() error {
		if d := status(t, e1, "hook").Deferred["paused"] + status(t, e2, "hook").Deferred["paused"] - before; d < 3*(5+10) {
			return fmt.Errorf("%d deferrals since the pause", d)
		}
		return nil
	})
	if n := len(recv.Requests()); n != sent {
		t.Fatalf("%d requests went to the destination after both replicas read the pause", n-sent)
	}
	if _, _, err := h.d.DestinationResume(ctx, "hook"); err != nil {
		t.Fatal(err)
	}
	recv.WaitDelivered(t, len(orders)+len(more), time.Minute)
	testkit.Eventually(t, "every outcome written", 0, func() error {
		if st, sum := h.attempts("order.%"); st[dialects.Delivered] != len(orders)+len(more) || sum != 0 {
			return fmt.Errorf("%v with %d attempts; want all delivered with none counted", st, sum)
		}
		return nil
	})
}

// A destination that fails every delivery for the window opens its circuit;
// then exactly one probe goes out per probe interval, and the other rows
// wait without an attempt counted. When a probe succeeds, the circuit
// closes and every row is delivered; the attempts counted are the requests
// that failed before the circuit opened: a failed probe counts none.
func TestAnOpenCircuitSendsOneProbePerInterval(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var failing atomic.Bool
	failing.Store(true)
	recv := testrecv.New(t, func(*testrecv.Request) (int, string, map[string]string) {
		if failing.Load() {
			return 503, "down for maintenance", nil
		}
		return 200, "", nil
	})
	h.routeAllTo(httpDest(t, recv.URL, nil))
	const interval = 400 * time.Millisecond
	h.opts.Policies = map[string]actors.DestinationPolicy{"dest": {CircuitBreaker: actors.CircuitBreaker{
		Window: 300 * time.Millisecond, MinAttempts: 5, ProbeInterval: interval}}}
	// One Publish at a time: every request that arrives after the circuit
	// opened is a probe.
	h.opts.UnorderedConcurrency = 1
	e := h.start()
	h.explain(e)
	h.insert(testkit.Rows(50, "audit.logged", nil, testkit.MaxAttempts(1000))...)

	testkit.Eventually(t, "the circuit to open", time.Minute, testkit.True(func() bool { return status(t, e, "dest").CircuitOpen }))
	opened := status(t, e, "dest").CircuitOpenedAt
	var probes []testrecv.Request
	testkit.Eventually(t, "four probes", time.Minute, func() error {
		probes = probes[:0]
		for _, r := range recv.Requests() {
			if r.At.After(opened) {
				probes = append(probes, r)
			}
		}
		if len(probes) < 4 {
			return fmt.Errorf("%d probes", len(probes))
		}
		return nil
	})
	// Arrival times stray a little from send times.
	const slack = 30 * time.Millisecond
	last := opened
	for i, p := range probes {
		if gap := p.At.Sub(last); gap < interval-slack {
			t.Fatalf("probe %d came %v after the previous one (or the opening); the interval is %v", i, gap, interval)
		}
		last = p.At
	}
	if s := status(t, e, "dest"); s.Deferred["circuit"] == 0 || s.CircuitOpened != 1 || s.CircuitError == "" {
		t.Fatalf("while open: %+v", s)
	}

	failing.Store(false)
	recv.WaitDelivered(t, 50, time.Minute)
	testkit.Eventually(t, "the circuit to close", 0, testkit.True(func() bool { return !status(t, e, "dest").CircuitOpen }))
	failed, failedProbes := 0, 0
	for _, r := range recv.Requests() {
		switch {
		case r.Status != 503:
		case r.At.After(opened):
			failedProbes++
		default:
			failed++
		}
	}
	if failedProbes < 4 {
		t.Fatalf("%d failed probes; four were seen", failedProbes)
	}
	// The receiver has every row; the last outcomes may still be on their
	// way to the database.
	testkit.Eventually(t, "every outcome written", time.Minute, func() error {
		if st, sum := h.attempts("%"); st[dialects.Delivered] != 50 || sum != failed {
			return fmt.Errorf("rows %v with %d attempts counted; want 50 delivered and %d attempts (the requests that failed before the circuit opened; %d probes failed)", st, sum, failed, failedProbes)
		}
		return nil
	})
}

// The replicas report their open circuits for operators, and remove them
// when they close, or when the replica stops.
func TestOpenCircuitsAreReported(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recv := testrecv.New(t, func(*testrecv.Request) (int, string, map[string]string) { return 502, "bad gateway", nil })
	h.routeAllTo(httpDest(t, recv.URL, nil))
	h.opts.Policies = map[string]actors.DestinationPolicy{"dest": {CircuitBreaker: actors.CircuitBreaker{
		Window: 100 * time.Millisecond, MinAttempts: 3, ProbeInterval: time.Hour}}}
	h.opts.Replica = "replica-one"
	e, err := actors.New(h.opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	h.explain(e)
	h.insert(testkit.Rows(20, "audit.logged", nil, testkit.MaxAttempts(1000))...)
	var cs []dialects.OpenCircuit
	testkit.Eventually(t, "the circuit to be reported", time.Minute, func() error {
		var err error
		if cs, err = h.d.DestinationCircuits(context.Background(), time.Minute); err != nil || len(cs) == 0 {
			return fmt.Errorf("%v, %v", cs, err)
		}
		return nil
	})
	if c := cs[0]; c.Destination != "dest" || c.Replica != "replica-one" || !strings.HasPrefix(c.LastError, "HTTP 502") {
		t.Fatalf("reported %+v", c)
	}
	if err := e.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if cs, err := h.d.DestinationCircuits(context.Background(), time.Minute); err != nil || len(cs) != 0 {
		t.Fatalf("a stopped replica's circuits: %+v, %v", cs, err)
	}
}

// gaps returns the longest time between two requests a receiver got.
func longestGap(reqs []testrecv.Request) time.Duration {
	var gap time.Duration
	for i := 1; i < len(reqs); i++ {
		gap = max(gap, reqs[i].At.Sub(reqs[i-1].At))
	}
	return gap
}

// Rows that wait for a limit wait for it in memory, in turn, up to half
// the credit: unkeyed rows beyond the destination's share of the pool's
// Publish calls are parked in the pool, and the keys' heads wait behind
// each other, so the destination is never idle while rows wait and no row
// is deferred to come back later.
func TestThrottledRowsWaitForTheirTurn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		rows   []dialects.NewRow
		policy actors.DestinationPolicy
	}{
		// 4 Publish calls in the pool: the destination's share is 2, and
		// 60 rows wait for them.
		{"unkeyed", rows(0, 0, 60, func(int) int { return 0 }), actors.DestinationPolicy{RatePerSecond: 20, Burst: 1}},
		// Three keys of five rows, one request at a time.
		{"keyed", rows(3, 5, 0, func(int) int { return 0 }), actors.DestinationPolicy{RatePerSecond: 4, Burst: 1, MaxConcurrency: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			recv := testrecv.New(t, nil)
			h.routeAllTo(httpDest(t, recv.URL, nil))
			h.opts.Policies = map[string]actors.DestinationPolicy{"dest": c.policy}
			h.opts.UnorderedConcurrency = 4
			e := h.start()
			h.explain(e)
			h.insert(c.rows...)
			recv.WaitDelivered(t, len(c.rows), time.Minute)
			interval := time.Duration(float64(time.Second) / c.policy.RatePerSecond)
			// A loaded machine stretches an interval now and then; a
			// deferred row leaves the destination idle for a reschedule.
			if gap := longestGap(recv.Requests()); gap > interval+200*time.Millisecond {
				t.Errorf("no request for %v; the limit's interval is %v", gap, interval)
			}
			if n := status(t, e, "dest").Deferred["throttled"]; n != 0 {
				t.Errorf("%d rows deferred; want each waiting for its turn in memory", n)
			}
			if dups := recv.CheckOrder(t); dups != 0 {
				t.Errorf("%d duplicates", dups)
			}
		})
	}
}

// A replica that stops while rows are parked in its pool hands them back:
// none stays processing, and none has an attempt counted.
func TestParkedRowsAreReleasedAtStop(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recv := testrecv.New(t, nil)
	h.routeAllTo(httpDest(t, recv.URL, nil))
	h.opts.Policies = map[string]actors.DestinationPolicy{"dest": {RatePerSecond: 10, Burst: 1}}
	h.opts.UnorderedConcurrency = 2
	e := h.start()
	h.explain(e)
	h.insert(rows(0, 0, 50, func(int) int { return 0 })...)
	testkit.Eventually(t, "rows parked behind the pool's one Publish call for the destination", time.Minute, testkit.True(func() bool {
		return status(t, e, "dest").Waiting > 10 && len(recv.Requests()) > 0
	}))
	if err := e.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, sum := h.attempts("%")
	if st[dialects.Processing] != 0 || st[dialects.Delivered] != recv.Delivered() || st[dialects.Pending]+st[dialects.Delivered] != 50 || sum != 0 {
		t.Fatalf("after the stop: %v with %d attempts; the receiver accepted %d; want the rest pending, none attempted", st, sum, recv.Delivered())
	}
}

// With a breaker, rows survive an outage although their tries would run
// out before the circuit opens: once every request has failed, at least
// the breaker's minimum of them, a last try that fails is not counted, nor
// is a probe's failure; after the outage every row is delivered, none
// dead, none with more attempts than it has.
func TestAnOutageCostsTimeNotRows(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var until atomic.Int64
	recv := testrecv.New(t, func(*testrecv.Request) (int, string, map[string]string) {
		if time.Now().UnixNano() < until.Load() {
			return 503, "down", nil
		}
		return 200, "", nil
	})
	h.routeAllTo(httpDest(t, recv.URL, nil))
	// Tries at about 0, 10 and 30 ms: all spent long before the window.
	h.opts.Policies = map[string]actors.DestinationPolicy{"dest": {CircuitBreaker: actors.CircuitBreaker{
		Window: 500 * time.Millisecond, MinAttempts: 5, ProbeInterval: 200 * time.Millisecond}}}
	e := h.start()
	h.explain(e)
	all := append(rows(3, 4, 0, func(int) int { return 0 }), rows(0, 0, 18, func(int) int { return 0 })...)
	for i := range all {
		testkit.MaxAttempts(2)(&all[i])
	}
	until.Store(time.Now().Add(2 * time.Second).UnixNano())
	h.insert(all...)
	testkit.Eventually(t, "the circuit to open", time.Minute, testkit.True(func() bool { return status(t, e, "dest").CircuitOpen }))
	recv.WaitDelivered(t, len(all), time.Minute)
	testkit.Eventually(t, "every outcome written", 0, func() error {
		if st, _ := h.attempts("%"); st[dialects.Delivered] != len(all) {
			return fmt.Errorf("%v", st)
		}
		return nil
	})
	tbl := pgx.Identifier{h.d.Names().Schema, "outbox"}.Sanitize()
	var over int
	if err := h.d.Pool().QueryRow(context.Background(), `SELECT count(*) FROM `+tbl+` WHERE attempt > max_attempts`).Scan(&over); err != nil || over != 0 {
		t.Fatalf("%d rows counted more attempts than max_attempts (%v)", over, err)
	}
	if dups := recv.CheckOrder(t); dups != 0 {
		t.Errorf("%d duplicates", dups)
	}
	if s := status(t, e, "dest"); s.Probes == 0 {
		t.Errorf("no probe: %+v", s)
	}
}
