package actors_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/pgcluster"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrecv"
	"github.com/queuebox/queuebox/migrations"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
	httpsink "github.com/queuebox/queuebox/sinks/http"
	nullsink "github.com/queuebox/queuebox/sinks/null"
)

// The database is killed (as by a crash) mid-run and restarted: the replica
// keeps running, resumes, and at the receiver nothing is lost and every key
// stays in order.
func TestDatabaseRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of its own")
	}
	t.Parallel()
	ctx := context.Background()
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{TestSettings: true, Prefix: "queuebox-test-restart-"})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Stop()
	d, err := postgres.Open(ctx, postgres.Options{URL: cluster.URL(), Names: dialects.DefaultNames(), MaxConnections: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := migrations.Up(ctx, d); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.d = d
	h.opts.Dialect = d
	h.opts.Lease = 3 * time.Second
	recv := testrecv.New(t, nil)
	recv.SetDelay(time.Millisecond)
	h.routeAllTo(httpDest(t, recv.URL+"/x", nil))
	h.opts.BatchSize, h.opts.UnorderedConcurrency = 20, 4
	all := rows(20, 40, 200, func(int) int { return 0 })
	h.insert(all...)
	e := h.start()
	recv.WaitDelivered(t, len(all)/5, time.Minute)
	cluster.Kill()
	testkit.Eventually(t, "the engine sees the database gone", time.Minute, testkit.True(func() bool { return !e.Ready() }))
	if err := cluster.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	recv.WaitDelivered(t, len(all), 2*time.Minute)
	h.waitState(dialects.Delivered, int64(len(all)), 2*time.Minute)
	dups := recv.CheckOrder(t)
	t.Logf("%d duplicates after the restart (rows whose outcome was in flight)", dups)
	// The outage is told once when claims start failing and once when they
	// work again; readiness follows the claims.
	if logs := h.logs.String(); !strings.Contains(logs, "database unreachable; claims paused") {
		t.Errorf("no log line says the database went away:\n%s", logs)
	}
	if err := testkit.Poll(30*time.Second, testkit.True(func() bool { return strings.Contains(h.logs.String(), "database reachable again") })); err != nil {
		t.Errorf("no log line says the database came back:\n%s", h.logs.String())
	}
	if !e.Ready() {
		t.Error("the engine does not report ready after the database came back")
	}
}

// A destination goes away and comes back: its rows are retried and arrive in
// order; rows for another destination keep flowing during the outage.
func TestDestinationOutage(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	down := make(chan struct{})
	recv := testrecv.New(t, func(r *testrecv.Request) (int, string, map[string]string) {
		select {
		case <-down:
			return 200, "", nil
		default:
			return 502, "bad gateway", nil
		}
	})
	h.routeOrdersToHook(recv.URL+"/x", "#")
	h.opts.Backoff = actors.Backoff{Initial: 20 * time.Millisecond, Multiplier: 2, Max: 100 * time.Millisecond, Jitter: 0.1}
	keyed := rows(10, 5, 0, func(int) int { return 0 })
	for i := range keyed {
		m := 1000
		keyed[i].MaxAttempts = &m
	}
	other := rows(0, 0, 300, func(int) int { return 0 }) // audit.logged -> null
	h.insert(keyed...)
	h.insert(other...)
	h.start()
	// The other destination drains while this one is down.
	h.waitState(dialects.Delivered, int64(len(other)), time.Minute)
	if recv.Delivered() != 0 {
		t.Fatal("the receiver accepted rows while it was down")
	}
	close(down)
	h.waitState(dialects.Delivered, int64(len(other)+len(keyed)), time.Minute)
	logs := h.logs.String()
	if strings.Count(logs, "destination failing") != 1 || strings.Count(logs, "destination delivering again") != 1 {
		t.Errorf("want one line for the outage and one for the recovery:\n%s", logs)
	}
	recv.CheckOrder(t)
}

// A claim that the database no longer holds (another replica took the row
// after the lease passed) is reported lost: the delivery is cancelled and
// the row is never written by this replica.
func TestLostClaimIsCancelledAndNotWritten(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	recv := testrecv.New(t, func(r *testrecv.Request) (int, string, map[string]string) {
		started <- struct{}{}
		<-release
		return 200, "", nil
	})
	defer close(release)
	h.routeAllTo(httpDest(t, recv.URL+"/x", nil))
	h.opts.Lease = 1500 * time.Millisecond // renewals every 500 ms
	rec := newRecorder()
	h.opts.Observer = rec
	h.insert(testkit.Rows(2, "t", nil, testkit.Key("k"))...)
	e := h.start()
	<-started
	// Another replica "takes" both rows: a new token.
	other := uuid.New()
	tbl := pgx.Identifier{h.d.Names().Schema, "outbox"}.Sanitize()
	if _, err := h.d.Pool().Exec(context.Background(), `UPDATE `+tbl+` SET claim_token = $1`, other); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "two lost claims counted", 30*time.Second, testkit.True(func() bool { return e.Stats.LostClaims.Load() >= 2 }))
	rec.mu.Lock()
	heard := rec.lost
	rec.mu.Unlock()
	if int64(heard) != e.Stats.LostClaims.Load() {
		t.Fatalf("the observer heard %d lost claims; the engine counted %d", heard, e.Stats.LostClaims.Load())
	}
	var changed int
	if err := h.d.Pool().QueryRow(context.Background(), `SELECT count(*) FROM `+tbl+` WHERE state <> 'processing' OR claim_token <> $1`, other).Scan(&changed); err != nil {
		t.Fatal(err)
	}
	if changed != 0 {
		t.Fatalf("%d rows were written after their claim was lost", changed)
	}
	if len(recv.Requests()) > 1 {
		t.Fatalf("the second row of the key was delivered after its claim was lost")
	}
}

// The probe wakes an idle claimer: new rows, keyed and unkeyed, are
// delivered long before the next poll, without any trigger or notification.
func TestProbeWakesTheClaimer(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recv := testrecv.New(t, nil)
	h.routeAllTo(httpDest(t, recv.URL+"/x", nil))
	h.opts.PollInterval = time.Hour
	e := h.start()
	// The first (empty) claim is done: ClaimStatements counts a claim when
	// it is sent, ClaimTime when it returns. A row inserted after that
	// reaches the claimer only through a probe.
	testkit.Eventually(t, "the first claim returned", 0, testkit.True(func() bool { return e.Stats.ClaimTime.Load() > 0 }))
	for i := range 4 {
		row := testkit.Row("t", testkit.Payload(fmt.Sprintf(`{"i":%d}`, i)))
		if i%2 == 1 {
			row.Key = str("k")
		}
		h.insert(row)
		recv.WaitDelivered(t, i+1, 30*time.Second) // a poll would take an hour
	}
}

// Retention deletes old delivered and dead rows in batches, and keeps
// everything else.
func TestRetentionDeletesOldRows(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.opts.Router = routing.NewRouter([]routing.Route{route("keep.#", "null")})
	h.opts.Destinations = map[string]actors.SinkFactory{"null": func() (sinks.Sink, error) { return nullsink.New(), nil }}
	var rs []dialects.NewRow
	for i := range 30 {
		topic := "keep.x"
		if i%3 == 0 {
			topic = "nowhere" // dead
		}
		rs = append(rs, testkit.Row(topic))
	}
	h.insert(rs...)
	// Deliver everything first, with retention off.
	e := h.start()
	h.waitState(dialects.Delivered, 20, time.Minute)
	h.waitState(dialects.Dead, 10, time.Minute)
	_ = e.Stop(context.Background())
	tbl := pgx.Identifier{h.d.Names().Schema, "outbox"}.Sanitize()
	if _, err := h.d.Pool().Exec(context.Background(), `UPDATE `+tbl+` SET updated_at = now() - interval '2 days' WHERE topic = 'keep.x' AND sequence % 2 = 0`); err != nil {
		t.Fatal(err)
	}
	if _, err := h.d.Pool().Exec(context.Background(), `UPDATE `+tbl+` SET updated_at = now() - interval '2 days' WHERE state = 'dead'`); err != nil {
		t.Fatal(err)
	}
	var oldDelivered int64
	_ = h.d.Pool().QueryRow(context.Background(), `SELECT count(*) FROM `+tbl+` WHERE state = 'delivered' AND updated_at < now() - interval '1 day'`).Scan(&oldDelivered)
	h.opts.Retention = actors.Retention{Delivered: 24 * time.Hour, Dead: 0, Interval: 100 * time.Millisecond, BatchSize: 3}
	h.start()
	var st dialects.Stats
	testkit.Eventually(t, "retention deletes the old delivered rows", 30*time.Second, func() error {
		st, _ = h.d.OutboxStats(context.Background())
		if st.Rows[dialects.Delivered] != 20-oldDelivered {
			return fmt.Errorf("retention left %v, want %d delivered", st.Rows, 20-oldDelivered)
		}
		return nil
	})
	if st.Rows[dialects.Dead] != 10 {
		t.Fatalf("dead rows were deleted with their age set to 0 (keep forever): %v", st.Rows)
	}
}

// countingPurges is the real dialect with its retention deletes counted.
type countingPurges struct {
	dialects.Dialect
	purges, waits *atomic.Int64
}

func (c countingPurges) OutboxPurge(ctx context.Context, p dialects.PurgeParams) (int, error) {
	c.purges.Add(1)
	return c.Dialect.OutboxPurge(ctx, p)
}

func (c countingPurges) OutboxPurgeWait(ctx context.Context, s dialects.State, age time.Duration) (time.Duration, error) {
	c.waits.Add(1)
	return c.Dialect.OutboxPurgeWait(ctx, s, age)
}

// Once retention has deleted every row old enough, it learns when the
// oldest row left comes of age and does not delete again before then: a
// delete that finds nothing reads the whole table on PostgreSQL.
func TestRetentionWaitsUntilTheOldestRowComesOfAge(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.routeAllTo(func() (sinks.Sink, error) { return nullsink.New(), nil })
	h.insert(rows(2, 5, 0, func(int) int { return 0 })...)
	var purges, waits atomic.Int64
	h.opts.Dialect = countingPurges{Dialect: h.d, purges: &purges, waits: &waits}
	h.opts.Retention = actors.Retention{Delivered: time.Hour, Interval: 20 * time.Millisecond, BatchSize: 100}
	h.start()
	h.waitState(dialects.Delivered, 10, time.Minute)
	testkit.Eventually(t, "retention to learn when the oldest row comes of age", 30*time.Second, testkit.True(func() bool { return waits.Load() > 0 }))
	before := purges.Load()
	time.Sleep(300 * time.Millisecond) // 15 intervals
	if n := purges.Load() - before; n > 1 {
		t.Fatalf("%d retention deletes in 15 intervals after learning that no row is an hour old before an hour from now", n)
	}
}

// failingRenewals is the real dialect whose lease renewals always fail, as
// when the replica's path to the database is cut for renewals only.
type failingRenewals struct{ dialects.Dialect }

func (failingRenewals) OutboxRenewLeases(context.Context, []dialects.Claim, time.Duration) ([]dialects.Claim, error) {
	return nil, fmt.Errorf("renewal refused (injected)")
}

// When leases cannot be renewed, a replica stops starting deliveries at the
// end of the trust window and hands the rest of the key back; the rows are
// claimed again with a fresh lease and still arrive complete and in order.
func TestTrustWindowStopsDeliveriesWithoutRenewal(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recv := testrecv.New(t, nil)
	recv.SetDelay(250 * time.Millisecond)
	h.opts.Dialect = failingRenewals{h.d}
	h.opts.Lease = time.Second // trusted for 800 ms after each claim
	h.routeAllTo(httpDest(t, recv.URL+"/x", nil))
	h.insert(rows(1, 10, 0, func(int) int { return 0 })...)
	e := h.start()
	h.waitState(dialects.Delivered, 10, time.Minute)
	if e.Stats.Released.Load() == 0 {
		t.Fatal("ten deliveries of 250 ms each fit no 800 ms trust window, yet no row was handed back")
	}
	if e.Stats.Claimed.Load() <= 10 {
		t.Fatalf("claimed %d times for 10 rows: the handed-back rows were not claimed again", e.Stats.Claimed.Load())
	}
	dups := recv.CheckOrder(t)
	if dups != 0 {
		t.Errorf("%d duplicates: a row was delivered after its trust window", dups)
	}
}

// noProbe is the real dialect as a user without the right to see other
// transactions sees it (SQL Server without VIEW SERVER STATE).
type noProbe struct{ dialects.Dialect }

func (noProbe) OutboxProbe(context.Context) (dialects.Probe, error) {
	return dialects.Probe{}, fmt.Errorf("%w (VIEW SERVER STATE permission was denied)", dialects.ErrNotPermitted)
}

// Without the probe, the claimer says so once and claims without the gate:
// keyed rows are still delivered, in order.
func TestWithoutTheProbeClaimsGoOnUngated(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recv := testrecv.New(t, nil)
	h.opts.Dialect = noProbe{h.d}
	h.routeAllTo(httpDest(t, recv.URL+"/x", nil))
	h.insert(rows(5, 4, 3, func(int) int { return 0 })...)
	h.start()
	h.waitState(dialects.Delivered, 23, time.Minute)
	recv.CheckOrder(t)
	if n := strings.Count(h.logs.String(), "cannot see other transactions"); n != 1 {
		t.Fatalf("the claimer said %d times that it cannot see other transactions, want once:\n%s", n, h.logs.String())
	}
}

// A delivery that lasts several leases keeps its claim: the renewals, which
// look back exactly to the claim's time on the database clock, find its
// rows each time (a bound one microsecond late would report them lost), and
// the rows behind it in its key stay claimed meanwhile too.
func TestRenewalsKeepALongDeliverysClaim(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	release := make(chan struct{})
	var first atomic.Bool
	recv := testrecv.New(t, func(r *testrecv.Request) (int, string, map[string]string) {
		if first.CompareAndSwap(false, true) {
			<-release
		}
		return 200, "", nil
	})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	defer letGo()
	// The destination's timeout outlasts the hang: the delivery is one
	// attempt, under way the whole time.
	h.routeAllTo(httpDest(t, recv.URL+"/x", func(c *httpsink.Config) { c.Timeout = 2 * time.Minute }))
	h.opts.Lease = 1500 * time.Millisecond // renewals every 500 ms
	h.insert(testkit.Rows(2, "t", nil, testkit.Key("k"))...)
	e := h.start()
	testkit.Eventually(t, "the first delivery started", 30*time.Second, testkit.True(first.Load))
	// Renewed until four leases past the claim: the lease end moved on,
	// renewal after renewal, while the delivery hung.
	tbl := pgx.Identifier{h.d.Names().Schema, "outbox"}.Sanitize()
	testkit.Eventually(t, "the first row's lease renewed to four leases past its claim", time.Minute, testkit.True(func() bool {
		var renewed bool
		err := h.d.Pool().QueryRow(context.Background(), `SELECT coalesce(bool_or(lease_expires_at > claimed_at + interval '6 seconds'), false)
			FROM `+tbl+` WHERE state = 'processing'`).Scan(&renewed)
		return err == nil && renewed
	}))
	letGo()
	recv.WaitDelivered(t, 2, 30*time.Second)
	h.waitState(dialects.Delivered, 2, 30*time.Second)
	if n := e.Stats.LostClaims.Load(); n != 0 {
		t.Fatalf("%d claims were lost while their delivery was under way and renewed", n)
	}
	if dups := recv.CheckOrder(t); dups != 0 {
		t.Fatalf("%d rows delivered twice", dups)
	}
}
