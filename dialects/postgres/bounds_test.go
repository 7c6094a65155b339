package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testkit"
)

// The conformance suite's cases about bounds hold for a dialect that
// honours them and for one that ignores them. These check that PostgreSQL
// honours them: its walks do narrow, its floors are read, its rewind
// counter moves, and its look for expired leases starts at its bound.

// claimN claims up to limit rows in schedule order with bounds b (nil:
// none), with a lease of a minute.
func claimN(t *testing.T, d *postgres.Dialect, limit int, b *dialects.Bounds) []dialects.Row {
	t.Helper()
	rows, err := rowsOf(d.OutboxClaim(context.Background(), dialects.ClaimParams{Limit: limit, Lease: time.Minute, Token: uuid.New(), Bounds: b}))
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return rows
}

func insertRows(t *testing.T, d *postgres.Dialect, rows ...dialects.NewRow) {
	t.Helper()
	if err := d.OutboxInsert(context.Background(), rows); err != nil {
		t.Fatalf("insert: %v", err)
	}
}

func completeAs(t *testing.T, d *postgres.Dialect, kind dialects.OutcomeKind, rows ...dialects.Row) {
	t.Helper()
	out := make([]dialects.Outcome, len(rows))
	for i, r := range rows {
		out[i] = dialects.Outcome{Claim: r.Claim, Kind: kind, Error: "x"}
	}
	if _, err := d.OutboxComplete(context.Background(), out); err != nil {
		t.Fatalf("complete: %v", err)
	}
}

// A walk in schedule order that looks back a minute leaves an hour-old due
// row out; the look for stragglers finds it (within a span only when it is
// in the span), and a claim without bounds takes it.
func TestABoundedWalkLeavesOlderRowsToTheLookForStragglers(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	ctx := context.Background()
	insertRows(t, d, testkit.Row("old", testkit.ScheduledAt(time.Now().Add(-time.Hour))), testkit.Row("recent"))
	b := dialects.Bounds{Rewinds: probe(t, d).Rewinds, Lookback: time.Minute}
	if got := claimN(t, d, 100, &b); len(got) != 1 || got[0].Topic != "recent" {
		t.Fatalf("a claim that looks back a minute took %+v, want the recent row only", got)
	}
	ago, found, err := d.OutboxStragglers(ctx, nil, b)
	if err != nil || !found || ago < 59*time.Minute || ago > 61*time.Minute {
		t.Fatalf("stragglers: %s, %v, %v; want the hour-old row", ago, found, err)
	}
	within := b
	within.Within = 30 * time.Minute
	if ago, found, err := d.OutboxStragglers(ctx, nil, within); err != nil || found {
		t.Fatalf("a look over the last 30 minutes found a straggler %s old (%v)", ago, err)
	}
	if got := claimN(t, d, 100, nil); len(got) != 1 || got[0].Topic != "old" {
		t.Fatalf("a claim without bounds took %+v, want the hour-old row", got)
	}
}

// Every rewind moves the counter that bounds are made at, in the same
// transaction as the rows it put back: a replay, the release of expired
// leases, OutboxRewind. One that puts nothing back does not.
func TestTheRewindCounterMovesWithEveryRewind(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	ctx := context.Background()
	insertRows(t, d, testkit.Row("t"))
	r := claimN(t, d, 1, nil)
	completeAs(t, d, dialects.OutcomeDead, r...)
	at := probe(t, d).Rewinds
	if n, _ := d.OutboxReplayIDs(ctx, []uuid.UUID{uuid.New()}, []dialects.State{dialects.Dead}, ""); n != 0 || probe(t, d).Rewinds != at {
		t.Fatalf("a replay of nothing moved the counter from %d", at)
	}
	if n, _ := d.OutboxReplayIDs(ctx, []uuid.UUID{r[0].ID}, []dialects.State{dialects.Dead}, ""); n != 1 || probe(t, d).Rewinds <= at {
		t.Fatalf("a replay of one row left the counter at %d", at)
	}
	rows, err := rowsOf(d.OutboxClaim(ctx, dialects.ClaimParams{Limit: 1, Lease: time.Millisecond, Token: uuid.New()}))
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim: %v %v", rows, err)
	}
	at = probe(t, d).Rewinds
	testkit.Eventually(t, "the lease of one millisecond passes and the row is released", 0, func() error {
		r, err := d.OutboxReleaseExpired(ctx, 10, nil, time.Time{})
		if err == nil && r.Rows != 1 {
			err = fmt.Errorf("released %d rows", r.Rows)
		}
		return err
	})
	released := probe(t, d).Rewinds
	if released <= at {
		t.Fatalf("releasing an expired lease left the counter at %d", at)
	}
	if r, _ := d.OutboxReleaseExpired(ctx, 10, nil, time.Time{}); r.Rows != 0 || probe(t, d).Rewinds != released {
		t.Fatal("a release of nothing moved the counter")
	}
	if err := d.OutboxRewind(ctx); err != nil || probe(t, d).Rewinds <= released {
		t.Fatalf("a rewind left the counter at %d (%v)", released, err)
	}
}

// The floors are read, one for every group of keys, at the counter; they
// rise once the lowest run is delivered.
func TestFloorsAreReadAndRise(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	insertRows(t, d, testkit.Row("t", testkit.Key("a"), testkit.ScheduledAt(time.Now().Add(-time.Minute))), testkit.Row("t", testkit.Key("b")))
	a := claimN(t, d, 1, nil)
	before := readFloors(t, d)
	lowest, ok := before.Lowest()
	if len(before.Groups) != dialects.FloorGroups || !ok || lowest != a[0].Sequence || before.Rewinds != probe(t, d).Rewinds {
		t.Fatalf("floors: %d groups, lowest %d, at counter %d; want %d groups, the lowest at a's head %d", len(before.Groups), lowest, before.Rewinds, dialects.FloorGroups, a[0].Sequence)
	}
	completeAs(t, d, dialects.OutcomeDelivered, a...)
	if now, _ := readFloors(t, d).Lowest(); now <= lowest {
		t.Fatalf("a's head is delivered and b's is the lowest live row, yet the lowest floor is %d (was %d)", now, lowest)
	}
}

// A look for expired leases from a bound leaves rows claimed before it
// alone, and reports when the oldest processing row it saw was claimed and
// the database's clock, from which the next look may start.
func TestAReleaseLooksFromItsBound(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	ctx := context.Background()
	insertRows(t, d, testkit.Row("t"), testkit.Row("t"))
	expired, err := rowsOf(d.OutboxClaim(ctx, dialects.ClaimParams{Limit: 1, Lease: time.Millisecond, Token: uuid.New()}))
	if err != nil || len(expired) != 1 {
		t.Fatalf("claim: %v %v", expired, err)
	}
	time.Sleep(20 * time.Millisecond) // the second claim comes later on the database's clock
	if live := claimN(t, d, 1, nil); len(live) != 1 {
		t.Fatalf("claim: %v", live)
	}
	// Kept by its caller, the expired row is not released, but seen.
	kept, err := d.OutboxReleaseExpired(ctx, 10, []uuid.UUID{expired[0].Token}, time.Now().Add(-time.Hour))
	if err != nil || kept.Rows != 0 || kept.Oldest.IsZero() || kept.At.Before(kept.Oldest) {
		t.Fatalf("a look from an hour ago: %+v, %v; want nothing released, the oldest claim seen before the clock", kept, err)
	}
	// From just after its claim: not looked at; the live row is the oldest.
	after, err := d.OutboxReleaseExpired(ctx, 10, nil, kept.Oldest.Add(time.Millisecond))
	if err != nil || after.Rows != 0 || !after.Oldest.After(kept.Oldest) {
		t.Fatalf("a look from after the expired claim: %+v, %v; want nothing released, the live claim the oldest", after, err)
	}
	if ahead, err := d.OutboxReleaseExpired(ctx, 10, nil, after.At.Add(time.Hour)); err != nil || ahead.Rows != 0 || !ahead.Oldest.IsZero() {
		t.Fatalf("a look from an hour ahead: %+v, %v; want nothing seen", ahead, err)
	}
	// From its claim on: released.
	if found, err := d.OutboxReleaseExpired(ctx, 10, nil, kept.Oldest); err != nil || found.Rows != 1 || !found.Oldest.Equal(kept.Oldest) {
		t.Fatalf("a look from the expired claim on: %+v, %v; want it released", found, err)
	}
}
