package actors_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/migrations"
	"github.com/queuebox/queuebox/sinks"
	nullsink "github.com/queuebox/queuebox/sinks/null"
)

// overlaps is the real database, with a count of the claim and completion
// statements that run at once. Each takes 20 ms longer, so that statements
// the engine allows to overlap do.
type overlaps struct {
	*postgres.Dialect
	claims, completes       atomic.Int64
	maxClaims, maxCompletes atomic.Int64
}

func raise(max *atomic.Int64, n int64) {
	for m := max.Load(); n > m && !max.CompareAndSwap(m, n); m = max.Load() {
	}
}

func (o *overlaps) OutboxClaim(ctx context.Context, p dialects.ClaimParams) (dialects.Claimed, error) {
	raise(&o.maxClaims, o.claims.Add(1))
	defer o.claims.Add(-1)
	o.slow(ctx)
	return o.Dialect.OutboxClaim(ctx, p)
}

func (o *overlaps) OutboxComplete(ctx context.Context, out []dialects.Outcome) ([]dialects.Claim, error) {
	raise(&o.maxCompletes, o.completes.Add(1))
	defer o.completes.Add(-1)
	o.slow(ctx)
	return o.Dialect.OutboxComplete(ctx, out)
}

// slow makes a statement 20 ms longer, in the database.
func (o *overlaps) slow(ctx context.Context) {
	_, _ = o.Pool().Exec(ctx, `SELECT pg_sleep(0.02)`)
}

// openNamed opens a dialect on schema whose sessions go by app.
func openNamed(t *testing.T, url, schema, app string) *postgres.Dialect {
	t.Helper()
	names := dialects.DefaultNames()
	names.Schema = schema
	d, err := postgres.Open(context.Background(), postgres.Options{URL: url, Names: names, MaxConnections: 10, ApplicationName: app})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// A relay alone on its database server overlaps two claims and two
// completions; once another relay's sessions are there (the same
// application name), it runs one of each, and two again when they are gone.
func TestRelaysThatShareTheServerRunOneClaimAndOneCompletionAtATime(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// A name of the test's own: the engines of the other tests of this
	// process are relays of the process's name.
	app := "qb-share-" + uuid.NewString()[:8]
	schema, url := testdb.Schema(t)
	h.d = openNamed(t, url, schema, app)
	if _, err := migrations.Up(context.Background(), h.d); err != nil {
		t.Fatal(err)
	}
	o := &overlaps{Dialect: h.d}
	h.opts.Dialect = o
	h.routeAllTo(func() (sinks.Sink, error) { return nullsink.New(), nil })
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		testkit.Eventually(t, what, 10*time.Second, testkit.True(ok))
	}

	// drain drains a backlog of its own and checks how many claims and
	// completions ran at once.
	const backlog = 3000
	drained := 0
	drain := func(when string, want int64) {
		t.Helper()
		o.maxClaims.Store(0)
		o.maxCompletes.Store(0)
		h.insert(rows(0, 0, backlog, func(int) int { return 0 })...)
		drained += backlog
		h.waitState(dialects.Delivered, int64(drained), 30*time.Second)
		if c, f := o.maxClaims.Load(), o.maxCompletes.Load(); c != want || f != want {
			t.Fatalf("%s, the relay ran up to %d claims and %d completions at once, want %d and %d", when, c, f, want, want)
		}
	}
	logged := func(what string) {
		t.Helper()
		if !strings.Contains(h.logs.String(), what) {
			t.Errorf("the relay did not log %q:\n%s", what, h.logs.String())
		}
	}

	e := h.start()
	drain("alone", 2)
	if n := e.Stats.OtherRelays.Load(); n != 0 {
		t.Fatalf("alone, the relay counted %d sessions of other relays", n)
	}

	other := openNamed(t, url, schema, app)
	if err := other.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor("the relay to see the other relay's session", func() bool { return e.Stats.OtherRelays.Load() > 0 })
	drain("beside another relay", 1)
	logged("other relays share the database server: one claim and one completion at a time")

	other.Close()
	waitFor("the relay to see the other relay go", func() bool { return e.Stats.OtherRelays.Load() == 0 })
	logged("no other relay on the database server: two claims and two completions at a time")
	drain("alone again", 2)
}
