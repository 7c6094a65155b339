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
	"github.com/queuebox/queuebox/migrations"
	"github.com/queuebox/queuebox/sinks"
	nullsink "github.com/queuebox/queuebox/sinks/null"
)

// overlaps is the real database, with a count of the claim and completion
// statements that run at once. Each takes 20 ms longer, so that statements
// the engine allows to overlap do.
type overlaps struct {
	dialects.Dialect
	claims, completes       atomic.Int64
	maxClaims, maxCompletes atomic.Int64
}

func raise(max *atomic.Int64, n int64) {
	for m := max.Load(); n > m && !max.CompareAndSwap(m, n); m = max.Load() {
	}
}

func (o *overlaps) OutboxClaim(ctx context.Context, p dialects.ClaimParams) ([]dialects.Row, error) {
	raise(&o.maxClaims, o.claims.Add(1))
	defer o.claims.Add(-1)
	time.Sleep(20 * time.Millisecond)
	return o.Dialect.OutboxClaim(ctx, p)
}

func (o *overlaps) OutboxComplete(ctx context.Context, out []dialects.Outcome) ([]dialects.Claim, error) {
	raise(&o.maxCompletes, o.completes.Add(1))
	defer o.completes.Add(-1)
	time.Sleep(20 * time.Millisecond)
	return o.Dialect.OutboxComplete(ctx, out)
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
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waited 10 s for %s", what)
			}
		}
	}

	const backlog = 3000
	h.insert(rows(0, 0, backlog, func(int) int { return 0 }))
	e := h.start()
	h.waitState(dialects.Delivered, backlog, 30*time.Second)
	if n := e.Stats.OtherRelays.Load(); n != 0 {
		t.Fatalf("alone, the relay counted %d sessions of other relays", n)
	}
	if c, f := o.maxClaims.Load(), o.maxCompletes.Load(); c != 2 || f != 2 {
		t.Fatalf("alone, the relay ran up to %d claims and %d completions at once, want 2 and 2", c, f)
	}

	other := openNamed(t, url, schema, app)
	if err := other.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor("the relay to see the other relay's session", func() bool { return e.Stats.OtherRelays.Load() > 0 })
	o.maxClaims.Store(0)
	o.maxCompletes.Store(0)
	h.insert(rows(0, 0, backlog, func(int) int { return 0 }))
	h.waitState(dialects.Delivered, 2*backlog, 30*time.Second)
	if c, f := o.maxClaims.Load(), o.maxCompletes.Load(); c != 1 || f != 1 {
		t.Fatalf("beside another relay, the relay ran up to %d claims and %d completions at once, want 1 and 1", c, f)
	}
	if !strings.Contains(h.logs.String(), "other relays share the database server") {
		t.Errorf("the relay did not log that it shares the server:\n%s", h.logs.String())
	}

	other.Close()
	waitFor("the relay to see the other relay go", func() bool { return e.Stats.OtherRelays.Load() == 0 })
	if !strings.Contains(h.logs.String(), "no other relay on the database server: two claims and two completions at a time") {
		t.Errorf("the relay did not log that it is alone again:\n%s", h.logs.String())
	}
	o.maxClaims.Store(0)
	o.maxCompletes.Store(0)
	h.insert(rows(0, 0, backlog, func(int) int { return 0 }))
	h.waitState(dialects.Delivered, 3*backlog, 30*time.Second)
	if c, f := o.maxClaims.Load(), o.maxCompletes.Load(); c != 2 || f != 2 {
		t.Fatalf("alone again, the relay ran up to %d claims and %d completions at once, want 2 and 2", c, f)
	}
}
