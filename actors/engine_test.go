package actors_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testlog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testrecv"
	"github.com/queuebox/queuebox/migrations"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
	httpsink "github.com/queuebox/queuebox/sinks/http"
	nullsink "github.com/queuebox/queuebox/sinks/null"
)

func TestMain(m *testing.M) {
	// goleakMain fails a run whose tests passed when goroutines leaked:
	// exit with its code rather than testing.M.Run's.
	os.Exit(testdb.Main(goleakMain{m}))
}

// goleakMain checks that no goroutine outlives the tests.
type goleakMain struct{ m *testing.M }

func (g goleakMain) Run() int {
	code := g.m.Run()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait"),
			goleak.IgnoreAnyFunction("github.com/queuebox/queuebox/internal/pgcluster.(*Cluster).launch.func1"),
			// protoactor's dead-letter log throttle ends by itself a second later.
			goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1")); err != nil {
			fmt.Println("goroutines leaked:", err)
			return 1
		}
	}
	return code
}

// harness is one engine on a fresh schema.
type harness struct {
	t    testing.TB
	d    *postgres.Dialect
	opts actors.Options
	logs *testlog.Buffer
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	d := testdb.Migrated(t, 10)
	logs := &testlog.Buffer{}
	return &harness{t: t, d: d, logs: logs, opts: actors.Options{
		Dialect: d, BatchSize: 100, MaxInFlight: 1000, Lease: 10 * time.Second, PollInterval: 50 * time.Millisecond,
		ProbeInterval: 2 * time.Millisecond,
		Backoff:       actors.Backoff{Initial: 10 * time.Millisecond, Multiplier: 2, Max: 200 * time.Millisecond, Jitter: 0.2},
		Mailboxes:     actors.Mailboxes{Claimer: 256, Key: 64, Sink: 1024, Completer: 8192},
		KeyIdle:       200 * time.Millisecond, UnorderedConcurrency: 32, DrainTimeout: 10 * time.Second, MaxErrorBytes: 2048,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}}
}

// routeAllTo sends every topic to one destination.
func (h *harness) routeAllTo(f actors.SinkFactory) {
	h.opts.Router = routing.NewRouter([]routing.Route{route("#", "dest")})
	h.opts.Destinations = map[string]actors.SinkFactory{"dest": f}
}

// routeOrdersToHook sends order.# rows to the HTTP destination "hook" at
// url, and the rows that match others to the null destination "null".
func (h *harness) routeOrdersToHook(url, others string) {
	h.opts.Router = routing.NewRouter([]routing.Route{route("order.#", "hook"), route(others, "null")})
	h.opts.Destinations = map[string]actors.SinkFactory{
		"hook": httpDest(h.t, url, nil),
		"null": func() (sinks.Sink, error) { return nullsink.New(), nil },
	}
}

func route(pattern, dest string) routing.Route {
	p, err := routing.CompilePattern(pattern)
	if err != nil {
		panic(err)
	}
	return routing.Route{Name: pattern, Pattern: p, Destination: dest}
}

func httpDest(t testing.TB, url string, mod func(*httpsink.Config)) actors.SinkFactory {
	tpl, err := routing.ParseTemplate(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg := httpsink.Config{URL: tpl, Method: "POST", Timeout: 5 * time.Second, MaxConnections: 64, MaxErrorBody: 2048}
	if mod != nil {
		mod(&cfg)
	}
	return func() (sinks.Sink, error) { return httpsink.New(cfg) }
}

func (h *harness) start() *actors.Engine {
	h.t.Helper()
	e, err := actors.New(h.opts)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = e.Stop(context.Background()) })
	return e
}

func str(s string) *string { return &s }

// rows builds keys*perKey keyed rows, interleaved, plus unkeyed rows. The
// payload says how many times the receiver should fail the row first.
func rows(keys, perKey, unkeyed int, fail func(i int) int) []dialects.NewRow {
	var out []dialects.NewRow
	i := 0
	for n := range perKey {
		for k := range keys {
			out = append(out, testkit.Row("order.created", testkit.Key(fmt.Sprintf("key-%d", k)),
				testkit.Payload(fmt.Sprintf(`{"i":%d,"n":%d,"fail":%d}`, i, n, fail(i)))))
			i++
		}
	}
	for range unkeyed {
		out = append(out, testkit.Row("audit.logged", testkit.Payload(fmt.Sprintf(`{"i":%d,"fail":%d}`, i, fail(i)))))
		i++
	}
	return out
}

func (h *harness) insert(rs ...dialects.NewRow) {
	h.t.Helper()
	for len(rs) > 0 {
		n := min(len(rs), 1000)
		if err := h.d.OutboxInsert(context.Background(), rs[:n]); err != nil {
			h.t.Fatal(err)
		}
		rs = rs[n:]
	}
}

func (h *harness) waitState(state dialects.State, n int64, timeout time.Duration) dialects.Stats {
	h.t.Helper()
	var st dialects.Stats
	testkit.Eventually(h.t, fmt.Sprintf("%d %s rows", n, state), timeout, func() error {
		var err error
		if st, err = h.d.OutboxStats(context.Background()); err != nil {
			return err
		}
		if st.Rows[state] < n {
			return fmt.Errorf("have %v", st.Rows)
		}
		return nil
	})
	return st
}

// failPolicy fails a row with 503 until its attempt reaches the payload's
// "fail" count.
func failPolicy(r *testrecv.Request) (int, string, map[string]string) {
	if r.Attempt < testrecv.JSONField(r.Body, "fail") {
		return 503, "try again later", map[string]string{"Retry-After": "0"}
	}
	return 200, "", nil
}

// Thousands of rows over many keys plus unkeyed rows, some answered 503,
// arrive complete and every key in order; attempt and X-Attempt count the
// failures; every row ends delivered.
func TestDeliversEverythingInOrderThroughFailures(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recv := testrecv.New(t, failPolicy)
	h.routeAllTo(httpDest(t, recv.URL+"/{{ topic }}", nil))
	fail := func(i int) int {
		switch i % 10 {
		case 3:
			return 1
		case 7:
			return 2
		}
		return 0
	}
	all := rows(100, 25, 500, fail)
	h.insert(all...)
	e := h.start()
	h.waitState(dialects.Delivered, int64(len(all)), 2*time.Minute)

	dups := recv.CheckOrder(t)
	if dups != 0 {
		t.Errorf("%d duplicate deliveries without any replica dying", dups)
	}
	if got := recv.Delivered(); got != len(all) {
		t.Fatalf("the receiver accepted %d distinct rows, want %d", got, len(all))
	}
	// X-Attempt counts the failures before each request.
	failures := map[string]int{}
	for _, q := range recv.Requests() {
		if q.Attempt != failures[q.ID] {
			t.Fatalf("row %s: X-Attempt %d after %d failures", q.ID, q.Attempt, failures[q.ID])
		}
		if q.Status >= 300 {
			failures[q.ID]++
		}
		if want := testrecv.JSONField(q.Body, "fail"); q.Status < 300 && failures[q.ID] != want {
			t.Fatalf("row %s accepted after %d failures, want %d", q.ID, failures[q.ID], want)
		}
	}
	// The attempt column holds the failures too.
	tbl := pgx.Identifier{h.d.Names().Schema, "outbox"}.Sanitize()
	var mismatched int
	if err := h.d.Pool().QueryRow(context.Background(), `SELECT count(*) FROM `+tbl+` WHERE state <> 'delivered' OR attempt <> (payload->>'fail')::int OR claim_token IS NOT NULL`).Scan(&mismatched); err != nil {
		t.Fatal(err)
	}
	if mismatched != 0 {
		t.Fatalf("%d rows do not end delivered with attempt = their failures", mismatched)
	}
	if e.Stats.Retried.Load() == 0 {
		t.Fatal("no retry happened; the test proves nothing")
	}
	// Idle key actors stop (keyIdleMs is 200 ms here): memory follows the
	// active keys, not every key ever seen.
	testkit.Eventually(t, "no key actor alive long after the keys went idle", 30*time.Second,
		testkit.True(func() bool { return e.Stats.KeyActors.Load() == 0 }))
}

// Every mailbox of size 1: everything is delivered, in order, no deadlock.
func TestMailboxesOfOneDoNotDeadlock(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recv := testrecv.New(t, failPolicy)
	h.routeOrdersToHook(recv.URL+"/x", "#")
	h.opts.Mailboxes = actors.Mailboxes{Claimer: 1, Key: 1, Sink: 1, Completer: 1}
	h.opts.BatchSize, h.opts.MaxInFlight, h.opts.UnorderedConcurrency = 50, 200, 4
	all := rows(40, 30, 400, func(i int) int {
		if i%17 == 0 {
			return 1
		}
		return 0
	})
	h.insert(all...)
	h.start()
	h.waitState(dialects.Delivered, int64(len(all)), 2*time.Minute)
	recv.CheckOrder(t)
	if got := recv.Delivered(); got != 40*30 {
		t.Fatalf("the receiver accepted %d keyed rows, want %d", got, 40*30)
	}
}

// Each bad-row case goes dead at the first delivery with its own message,
// while other keys keep flowing (and the same key proceeds past it).
func TestBadRowsGoDeadWithTheirOwnMessage(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recv := testrecv.New(t, nil)
	h.opts.Router = routing.NewRouter([]routing.Route{
		route("typed.#", "by-type"), route("ghost.#", "nowhere"), route("order.#", "hook"), route("audit.#", "hook"),
	})
	h.opts.Destinations = map[string]actors.SinkFactory{
		"hook":    httpDest(t, recv.URL+"/{{ topic }}", nil),
		"by-type": httpDest(t, recv.URL+"/{{ aggregateType }}/{{ topic }}", nil),
	}
	bad := []struct {
		row  dialects.NewRow
		want string
	}{
		{testkit.Row("nobody.listens"), `no route matches topic "nobody.listens"`},
		{testkit.Row("order.created", testkit.Payload(`"{\"a\":1}"`)), "JSON string that holds JSON text"},
		{testkit.Row("order.created", testkit.Payload(`42`)), "the payload is a JSON number"},
		{testkit.Row("order.created", testkit.Headers(`{"X-Count": 3}`)), `"X-Count" is a number`},
		{testkit.Row("order.created", testkit.Headers(`["a"]`)), "headers must be a JSON object of string values, got an array"},
		{testkit.Row("typed.created"), "needs {{ aggregateType }}, but aggregate_type is null"},
		{testkit.Row("ghost.created"), `sends to destination "nowhere", which does not exist`},
	}
	var all []dialects.NewRow
	for _, b := range bad {
		r := b.row
		r.Key = str("shared") // bad rows first in one key: the good row behind them still goes
		r.MaxAttempts = new(int)
		*r.MaxAttempts = 5
		all = append(all, r)
	}
	all = append(all, testkit.Row("order.created", testkit.Key("shared"), testkit.Payload(`{"good":1}`)))
	all = append(all, rows(20, 5, 20, func(int) int { return 0 })...)
	h.insert(all...)
	h.start()
	h.waitState(dialects.Delivered, int64(len(all)-len(bad)), time.Minute)
	st := h.waitState(dialects.Dead, int64(len(bad)), time.Minute)
	if st.Rows[dialects.Pending] != 0 || st.Rows[dialects.Processing] != 0 {
		t.Fatalf("rows left behind: %v", st.Rows)
	}
	dead, _, err := dialects.List(context.Background(), h.d, dialects.Filter{}, nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		found := false
		for _, r := range dead {
			if r.LastError != nil && strings.Contains(*r.LastError, b.want) {
				found = true
				if r.Attempt != 0 {
					t.Errorf("%q went dead after %d attempts, want at the first", b.want, r.Attempt)
				}
			}
		}
		if !found {
			t.Errorf("no dead row says %q; dead rows: %v", b.want, lastErrors(dead))
		}
	}
}

func lastErrors(rs []dialects.ListedRow) []string {
	var out []string
	for _, r := range rs {
		if r.LastError != nil {
			out = append(out, *r.LastError)
		}
	}
	return out
}

// A secret used in a destination header never appears in last_error or the
// logs, even when the receiver echoes it; last_error is never longer than
// the limit.
func TestSecretsNeverLeakAndErrorsAreCut(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const secret = "s3cr3t-token-from-env"
	recv := testrecv.New(t, func(r *testrecv.Request) (int, string, map[string]string) {
		return 500, "you sent " + r.Header.Get("Authorization") + " " + strings.Repeat("é", 2000), nil
	})
	h.opts.Router = routing.NewRouter([]routing.Route{route("#", "hook")})
	h.opts.Destinations = map[string]actors.SinkFactory{"hook": httpDest(t, recv.URL+"/x", func(c *httpsink.Config) {
		c.Headers = map[string]string{"Authorization": "Bearer " + secret}
		c.MaxErrorBody = 5000
	})}
	h.opts.MaxErrorBytes = 301 // odd, so a cut could land inside a two-byte character
	h.opts.Redact = strings.NewReplacer("Bearer "+secret, "[REDACTED]", secret, "[REDACTED]").Replace
	h.opts.Logger = slog.New(redactingHandler{slog.NewTextHandler(h.logs, nil), h.opts.Redact})
	h.insert(testkit.Row("t", testkit.Key("k"), testkit.MaxAttempts(1)))
	h.start()
	h.waitState(dialects.Dead, 1, time.Minute)
	dead, _, _ := dialects.List(context.Background(), h.d, dialects.Filter{}, nil, 1)
	le := *dead[0].LastError
	if strings.Contains(le, secret) || !strings.Contains(le, "[REDACTED]") {
		t.Fatalf("last_error leaks or lacks the redaction: %q", le[:min(120, len(le))])
	}
	if len(le) > 301 || !strings.HasPrefix(le, "HTTP 500") {
		t.Fatalf("last_error is %d bytes: %q", len(le), le[:60])
	}
	if !strings.Contains(recv.Requests()[0].Header.Get("Authorization"), secret) {
		t.Fatal("the header did not reach the receiver; the test proves nothing")
	}
	if strings.Contains(h.logs.String(), secret) {
		t.Fatal("a log line holds the secret")
	}
}

type redactingHandler struct {
	slog.Handler
	redact func(string) string
}

func (h redactingHandler) Handle(ctx context.Context, r slog.Record) error {
	nr := slog.NewRecord(r.Time, r.Level, h.redact(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		nr.AddAttrs(slog.String(a.Key, h.redact(a.Value.String())))
		return true
	})
	return h.Handler.Handle(ctx, nr)
}

// Stop drains: in-flight deliveries finish, rows not started go back to
// pending at once, nothing stays processing.
func TestStopDrains(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recv := testrecv.New(t, nil)
	recv.SetDelay(300 * time.Millisecond)
	h.routeAllTo(httpDest(t, recv.URL+"/x", nil))
	h.opts.UnorderedConcurrency = 5
	rec := newRecorder()
	h.opts.Observer = rec
	h.insert(rows(10, 20, 100, func(int) int { return 0 })...)
	e := h.start()
	// Wait until deliveries are in flight.
	testkit.Eventually(t, "deliveries in flight", 30*time.Second, testkit.True(func() bool { return len(recv.Requests()) > 0 }))
	if err := e.Stop(context.Background()); err != nil {
		t.Fatalf("stop: %v", err)
	}
	st, err := h.d.OutboxStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows[dialects.Processing] != 0 {
		t.Fatalf("%d rows stay processing after the drain", st.Rows[dialects.Processing])
	}
	// Everything the receiver accepted is recorded delivered; the rest is pending.
	if int64(recv.Delivered()) != st.Rows[dialects.Delivered] || st.Rows[dialects.Pending] == 0 {
		t.Fatalf("receiver accepted %d; database %v", recv.Delivered(), st.Rows)
	}
	tbl := pgx.Identifier{h.d.Names().Schema, "outbox"}.Sanitize()
	var raised int
	_ = h.d.Pool().QueryRow(context.Background(), `SELECT count(*) FROM `+tbl+` WHERE attempt > 0`).Scan(&raised)
	if raised != 0 {
		t.Fatalf("the drain raised attempt on %d rows", raised)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if n := e.Stats.Released.Load(); n == 0 || int64(rec.released) != n {
		t.Fatalf("the observer heard %d rows released; the engine released %d (and must have released some)", rec.released, n)
	}
}

// probeOnly is a harness that delivers to a receiver and claims at the
// poll only every 10 s: a row delivered in time was found by a probe.
func probeOnly(t *testing.T) (*harness, *testrecv.Receiver) {
	h := newHarness(t)
	recv := testrecv.New(t, nil)
	h.routeAllTo(httpDest(t, recv.URL+"/x", nil))
	h.opts.PollInterval = 10 * time.Second
	return h, recv
}

// A replica that finds nothing to do at its start goes to its idle pace; a
// row that arrives is delivered within an idle probe, and the claim that
// found it leaves the idle pace.
func TestAnIdleReplicaProbesLessAndWakesForARow(t *testing.T) {
	t.Parallel()
	h, recv := probeOnly(t)
	// A table whose rows were all delivered before: the sequence has moved,
	// which the first claim sees and is no news to the probes after it.
	h.insert(rows(3, 1, 0, func(int) int { return 0 })...)
	n := h.d.Names()
	if _, err := h.d.Pool().Exec(context.Background(), "UPDATE "+pgx.Identifier{n.Schema, n.Outbox}.Sanitize()+" SET state = 'delivered'"); err != nil {
		t.Fatal(err)
	}
	e := h.start()
	testkit.Eventually(t, "a replica that found nothing to do at its start goes to the idle pace", 5*time.Second,
		testkit.True(e.Stats.Idle.Load))
	// How often it probes meanwhile, and how that backs off, is the pace's
	// (the planner's tests step through it on a clock of their own).
	h.insert(rows(1, 1, 0, func(int) int { return 0 })...)
	testkit.Eventually(t, "a row that arrived at an idle replica is delivered within a second (a probe every 250 ms at the longest)", time.Second,
		testkit.True(func() bool { return recv.Delivered() > 0 }))
	// The claim that found the row leaves the idle pace: the next rows are
	// probed for at the configured interval. Counting probes cannot tell
	// the two paces apart on a loaded machine, where a probe's round trip
	// is longer than either interval; the pace itself can.
	if e.Stats.Idle.Load() {
		t.Fatal("the replica stayed at the idle pace after it claimed a row")
	}
	p0 := e.Stats.Probes.Load()
	testkit.Eventually(t, "the replica probes after it delivered a row", 0, testkit.True(func() bool { return e.Stats.Probes.Load() > p0 }))
}

// failingClaims fails the next claim statement once armed, as a connection
// reset between the claim's probe and its statement would; everything else
// is the real database.
type failingClaims struct {
	dialects.Dialect
	armed atomic.Bool
}

func (f *failingClaims) OutboxClaim(ctx context.Context, p dialects.ClaimParams) (dialects.Claimed, error) {
	if f.armed.CompareAndSwap(true, false) {
		return dialects.Claimed{}, errors.New("connection reset by peer (injected)")
	}
	return f.Dialect.OutboxClaim(ctx, p)
}

// A claim that fails after its probe saw a new row takes nothing: the next
// probe still finds the row news and claims it, within the claim's backoff
// rather than at the next poll.
func TestARowSeenByAFailedClaimIsClaimedAtTheNextProbe(t *testing.T) {
	t.Parallel()
	h, recv := probeOnly(t)
	f := &failingClaims{Dialect: h.d}
	h.opts.Dialect = f
	e := h.start()
	testkit.Eventually(t, "the replica settles at the idle pace", 5*time.Second, testkit.True(e.Stats.Idle.Load))
	f.armed.Store(true)
	h.insert(rows(1, 1, 0, func(int) int { return 0 })...)
	testkit.Eventually(t, "the row is delivered within 3 s of a failed claim (the poll is 10 s away)", 3*time.Second,
		testkit.True(func() bool { return recv.Delivered() > 0 }))
	if f.armed.Load() {
		t.Fatal("no claim failed: the test injected nothing")
	}
}

// slowClaims holds the next claim statement, once armed, for hold before
// it runs, as a claim slowed by the server would be; everything else is the
// real database.
type slowClaims struct {
	dialects.Dialect
	armed   atomic.Bool
	hold    time.Duration
	entered chan struct{}
	done    atomic.Bool
}

func (s *slowClaims) OutboxClaim(ctx context.Context, p dialects.ClaimParams) (dialects.Claimed, error) {
	if s.armed.CompareAndSwap(true, false) {
		close(s.entered)
		select {
		case <-time.After(s.hold):
		case <-ctx.Done():
		}
		defer s.done.Store(true)
	}
	return s.Dialect.OutboxClaim(ctx, p)
}

// A claim that is slow does not hold back the rows that commit while it
// runs: the replica probes beside it, and a second claim takes them (and
// the rows the slow one was sent for) long before it returns.
func TestASlowClaimDoesNotHoldBackTheRowsBehindIt(t *testing.T) {
	t.Parallel()
	h, recv := probeOnly(t)
	// A second claim runs only while the replica may run two at once: alone
	// on the server. The engines of the other tests of this process are
	// relays of the process's name, so this one's sessions go by a name of
	// their own.
	schema, url := testdb.Schema(t)
	h.d = openNamed(t, url, schema, "qb-slow-"+uuid.NewString()[:8])
	if _, err := migrations.Up(context.Background(), h.d); err != nil {
		t.Fatal(err)
	}
	s := &slowClaims{Dialect: h.d, hold: 5 * time.Second, entered: make(chan struct{})}
	h.opts.Dialect = s
	e := h.start()
	testkit.Eventually(t, "the replica settles at the idle pace", 5*time.Second, testkit.True(e.Stats.Idle.Load))
	testkit.Eventually(t, "the replica counts no other relay (it may run two claims at once)", 10*time.Second,
		testkit.True(func() bool { return e.Stats.OtherRelays.Load() == 0 }))
	s.armed.Store(true)
	h.insert(testkit.Row("order.created", testkit.Key("a"), testkit.Payload(`{"fail":0}`)))
	select {
	case <-s.entered:
	case <-time.After(3 * time.Second):
		t.Fatal("no claim came for the first row")
	}
	h.insert(testkit.Row("order.created", testkit.Key("b"), testkit.Payload(`{"fail":0}`)))
	testkit.Eventually(t, "both rows delivered while the slow claim still runs", 2*time.Second,
		testkit.True(func() bool { return recv.Delivered() >= 2 }))
	if s.done.Load() {
		t.Fatal("the slow claim had returned: the test showed nothing")
	}
}
