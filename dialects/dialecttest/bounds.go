package dialecttest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testkit"
)

// The claim's bounds (dialects.Bounds, ClaimParams.Continue): what the relay
// knows narrows what one claim looks at, and never lets a row be claimed out
// of order. Dialects that keep no bounds (Harness.Bounded false) ignore
// them, and only the cases that hold either way run.
func boundsTests(h Harness) []subtest {
	tests := []subtest{
		{"ClaimContinuesAKeyAfterItsRun", testContinue},
		{"ClaimWithStaleBoundsAfterAReplayKeepsOrder", testBoundsAfterReplay},
	}
	if h.Bounded {
		tests = append(tests,
			subtest{"ClaimByKeyContinueOnlyTakesOnlyThoseKeys", testContinueOnly},
			subtest{"ClaimLookbackLeavesOlderRowsForLater", testLookback},
			subtest{"ClaimFloorsKeepTheHeadRule", testFloors},
			subtest{"FloorsReadFromEarlierFloors", testFloorsFromEarlierFloors},
			subtest{"ReplayMovesTheCounter", testReplayCounter},
			subtest{"ExpiredLeasesAndRewindMoveTheCounter", testRewinds},
			subtest{"StragglersAreHeadsBehindTheLookback", testStragglers},
			subtest{"ReleaseLooksFromItsBound", testReleaseFrom})
	}
	return tests
}

func (h Harness) claimWith(t *testing.T, d dialects.Dialect, p dialects.ClaimParams) []dialects.Row {
	t.Helper()
	p.Lease, p.Token = lease, uuid.New()
	if p.Walk == dialects.WalkSchedule {
		p.Walk = h.walk()
	}
	if p.Limit == 0 {
		p.Limit = 100
	}
	rows, err := rowsOf(d.OutboxClaim(ctx(t), p))
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return rows
}

func deliverAll(t *testing.T, d dialects.Dialect, rows []dialects.Row) {
	t.Helper()
	var out []dialects.Outcome
	for _, r := range rows {
		out = append(out, outcome(r, dialects.OutcomeDelivered))
	}
	complete(t, d, out...)
}

func probe(t *testing.T, d dialects.Dialect) dialects.Probe {
	t.Helper()
	p, err := d.OutboxProbe(ctx(t))
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	return p
}

func seqs(rows []dialects.Row) []int64 {
	var out []int64
	for _, r := range rows {
		out = append(out, r.Sequence)
	}
	return out
}

// A key's first run is delivered; its next rows arrived meanwhile. A claim
// that continues the key from the run's last row takes them, in order.
func testContinue(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, keyed("k", 2)...)
	run := h.claim(t, d, 100)
	if len(run) != 2 {
		t.Fatalf("first run: %d rows, want 2", len(run))
	}
	insert(t, d, keyed("k", 3)...)
	deliverAll(t, d, run)
	got := h.claimWith(t, d, dialects.ClaimParams{Continue: []dialects.KeyPosition{{Key: "k", After: run[1].Sequence}},
		Bounds: &dialects.Bounds{Rewinds: probe(t, d).Rewinds}})
	if len(got) != 3 || got[0].Sequence <= run[1].Sequence || got[0].Sequence > got[1].Sequence || got[1].Sequence > got[2].Sequence {
		t.Fatalf("continued claim took %v, want the three rows after %d in order", seqs(got), run[1].Sequence)
	}
}

// Positions and floors made before a replay do not hold after it: the
// replayed row, below them, is its key's head again, and a claim with the
// old bounds takes it first, never the rows behind it alone.
func testBoundsAfterReplay(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, keyed("k", 1)...)
	first := h.claim(t, d, 100)
	if len(first) != 1 {
		t.Fatalf("claimed %d rows, want 1", len(first))
	}
	complete(t, d, dialects.Outcome{Claim: first[0].Claim, Kind: dialects.OutcomeDead, Error: "gone"})
	before := probe(t, d).Rewinds
	var floors []int64
	if h.Bounded {
		f, err := d.OutboxFloors(ctx(t), probe(t, d).Last, dialects.Floors{})
		if err != nil {
			t.Fatal(err)
		}
		floors = f.Groups
	}
	insert(t, d, keyed("k", 1)...)
	if n, err := d.OutboxReplayIDs(ctx(t), []uuid.UUID{first[0].ID}, []dialects.State{dialects.Dead}); err != nil || n != 1 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	if h.Bounded && probe(t, d).Rewinds == before {
		t.Fatalf("the replay counter did not move (%d)", before)
	}
	got := h.claimWith(t, d, dialects.ClaimParams{Limit: 1, MaxHeads: 1,
		Continue: []dialects.KeyPosition{{Key: "k", After: first[0].Sequence}},
		Bounds:   &dialects.Bounds{Rewinds: before, Lookback: time.Millisecond, Floors: floors}})
	if len(got) != 1 || got[0].ID != first[0].ID {
		t.Fatalf("with bounds made before a replay, claimed %v, want the replayed row %d first", seqs(got), first[0].Sequence)
	}
}

// A claim by key that only continues takes the continued keys' heads and
// nothing else: not other keys, not unkeyed rows.
func testContinueOnly(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, keyed("a", 1)...)
	run := h.claim(t, d, 100)
	insert(t, d, keyed("a", 1)...)
	insert(t, d, keyed("b", 1)...)
	insert(t, d, testkit.Row(anyTopic))
	deliverAll(t, d, run)
	got := h.claimWith(t, d, dialects.ClaimParams{Walk: dialects.WalkNone,
		Continue: []dialects.KeyPosition{{Key: "a", After: run[0].Sequence}}, Bounds: &dialects.Bounds{Rewinds: probe(t, d).Rewinds}})
	if len(got) != 1 || got[0].Key != "a" {
		t.Fatalf("a claim that only continues a took %+v, want a's next row only", got)
	}
	if rest := h.claim(t, d, 100); len(rest) != 2 {
		t.Fatalf("a claim that walks took %d rows, want b's and the unkeyed one", len(rest))
	}
}

// The walk in schedule order looks back only as far as told: an older due
// row is left for a claim without bounds (the relay's full look). A claim
// by key walks the keys, not the schedule, and has no lookback.
func testLookback(t *testing.T, h Harness) {
	h.byKey = false
	d := h.New(t, 0)
	old := time.Now().Add(-time.Hour)
	insert(t, d, testkit.Row(anyTopic, testkit.ScheduledAt(old)), testkit.Row(anyTopic))
	b := &dialects.Bounds{Rewinds: probe(t, d).Rewinds, Lookback: time.Minute}
	got := h.claimWith(t, d, dialects.ClaimParams{Bounds: b})
	if len(got) != 1 {
		t.Fatalf("a claim that looks back a minute took %d rows, want the recent one", len(got))
	}
	if got = h.claim(t, d, 100); len(got) != 1 {
		t.Fatalf("a claim without bounds took %d rows, want the hour-old one", len(got))
	}
}

// Floors are exact: with a key's head processing, a claim bounded by floors
// made meanwhile does not take the row behind it; once the head is
// delivered, a claim continuing the key takes it.
func testFloors(t *testing.T, h Harness) {
	d := h.New(t, 0)
	for i := range 50 {
		insert(t, d, keyed(string(rune('a'+i%26))+"-key", 2)...)
	}
	heads := h.claimWith(t, d, dialects.ClaimParams{Limit: 1000, MaxHeads: 1000})
	if len(heads) != 100 {
		t.Fatalf("claimed %d rows, want all 100", len(heads))
	}
	// Every key now has rows processing: new rows of those keys are not
	// heads, whatever the floors say.
	insert(t, d, keyed("a-key", 1)...)
	p := probe(t, d)
	f, err := d.OutboxFloors(ctx(t), p.Last, dialects.Floors{})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Groups) != dialects.FloorGroups || f.Rewinds != p.Rewinds {
		t.Fatalf("floors: %d groups at counter %d, want %d at %d", len(f.Groups), f.Rewinds, dialects.FloorGroups, p.Rewinds)
	}
	b := &dialects.Bounds{Rewinds: f.Rewinds, Floors: f.Groups}
	if got := h.claimWith(t, d, dialects.ClaimParams{Bounds: b}); len(got) != 0 {
		t.Fatalf("with every key busy, a claim bounded by floors took %v", seqs(got))
	}
	deliverAll(t, d, heads)
	if got := h.claimWith(t, d, dialects.ClaimParams{Bounds: b}); len(got) != 1 || got[0].Key != "a-key" {
		t.Fatalf("once the runs were delivered, a claim bounded by the same floors took %+v, want the row behind a-key's run", got)
	}
}

// A read of the floors that starts from the floors read before finds what
// a read from the start finds; one whose earlier floors were read at
// another rewind counter (a row went back to pending below them) sets them
// aside.
func testFloorsFromEarlierFloors(t *testing.T, h Harness) {
	d := h.New(t, 0)
	for i := range 40 {
		insert(t, d, keyed(fmt.Sprintf("key-%d", i), 3)...)
	}
	first := h.claimWith(t, d, dialects.ClaimParams{Limit: 1000, MaxHeads: 1000})
	if len(first) != 120 {
		t.Fatalf("claimed %d rows, want all 120", len(first))
	}
	read := func(prev dialects.Floors) dialects.Floors {
		t.Helper()
		f, err := d.OutboxFloors(ctx(t), probe(t, d).Last, prev)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	before := read(dialects.Floors{})
	// key-0's run stays processing (its head is the lowest floor); of the
	// other keys, half the runs are delivered and half the heads dead; new
	// rows arrive for a few keys.
	var kept, delivered, dead []dialects.Row
	for _, r := range first {
		switch {
		case r.Key == "key-0":
			kept = append(kept, r)
		case r.Key[len(r.Key)-1]%2 == 0:
			delivered = append(delivered, r)
		default:
			dead = append(dead, r)
		}
	}
	deliverAll(t, d, delivered)
	for _, r := range dead {
		complete(t, d, dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeDead, Error: "gone"})
	}
	insert(t, d, keyed("key-3", 2)...)
	insert(t, d, keyed("key-8", 1)...)
	same := func(what string, from, fresh dialects.Floors) {
		t.Helper()
		if !slices.Equal(fresh.Groups, from.Groups) || fresh.Rewinds != from.Rewinds {
			t.Fatalf("%s: floors read from the earlier ones differ from a read from the start:\n%s", what, floorsDiff(fresh, from))
		}
	}
	from := read(before)
	same("key-0 still processing", from, read(dialects.Floors{}))
	lowest, _ := before.Lowest()
	if now, _ := from.Lowest(); now != lowest {
		t.Fatalf("key-0's head (%d) is still processing, yet the lowest floor is %d", lowest, now)
	}
	// Once key-0's run is delivered, the floors rise past it.
	deliverAll(t, d, kept)
	mid := read(from)
	same("key-0 delivered", mid, read(dialects.Floors{}))
	if now, _ := mid.Lowest(); now <= lowest {
		t.Fatalf("nothing is live below the new rows, yet the lowest floor is %d (was %d)", now, lowest)
	}
	// A replay puts one of the first rows back to pending, below every
	// floor read since: a read from those floors must find it.
	if n, err := d.OutboxReplayIDs(ctx(t), []uuid.UUID{dead[0].ID}, []dialects.State{dialects.Dead}); err != nil || n != 1 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	after := read(mid)
	if after.Rewinds == mid.Rewinds {
		t.Fatalf("the replay did not move the counter (%d)", after.Rewinds)
	}
	if now, _ := after.Lowest(); now > dead[0].Sequence {
		t.Fatalf("after a replay of sequence %d, floors read from earlier ones start at %d: the replayed row is below them", dead[0].Sequence, now)
	}
	same("after a replay", after, read(dialects.Floors{}))
}

// floorsDiff lists the groups where two reads of the floors differ.
func floorsDiff(a, b dialects.Floors) string {
	var out []string
	for i := range max(len(a.Groups), len(b.Groups)) {
		var x, y int64 = -1, -1
		if i < len(a.Groups) {
			x = a.Groups[i]
		}
		if i < len(b.Groups) {
			y = b.Groups[i]
		}
		if x != y {
			out = append(out, fmt.Sprintf("group %d: %d and %d", i, x, y))
		}
	}
	return fmt.Sprintf("counters %d and %d; %s", a.Rewinds, b.Rewinds, strings.Join(out, "; "))
}

// Every replay moves the counter that bounds are made at; a replay that
// puts nothing back does not.
func testReplayCounter(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, testkit.Row(anyTopic))
	r := h.claim(t, d, 1)
	complete(t, d, dialects.Outcome{Claim: r[0].Claim, Kind: dialects.OutcomeDead, Error: "x"})
	at := probe(t, d).Rewinds
	if n, _ := d.OutboxReplayIDs(ctx(t), []uuid.UUID{uuid.New()}, []dialects.State{dialects.Dead}); n != 0 || probe(t, d).Rewinds != at {
		t.Fatalf("a replay of nothing moved the counter from %d", at)
	}
	if n, _ := d.OutboxReplayIDs(ctx(t), []uuid.UUID{r[0].ID}, []dialects.State{dialects.Dead}); n != 1 || probe(t, d).Rewinds <= at {
		t.Fatalf("a replay of one row left the counter at %d", at)
	}
}

// Rows that go back to pending behind what the relays looked at move the
// counter: leases that expired, and a stopping replica's releases
// (OutboxRewind).
func testRewinds(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, testkit.Row(anyTopic))
	rows, err := rowsOf(d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: 1, Lease: time.Millisecond, Token: uuid.New()}))
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim: %v %v", rows, err)
	}
	at := probe(t, d).Rewinds
	testkit.Eventually(t, "the lease of one millisecond passes and the row is released", 0, func() error {
		n, err := releaseExpired(t, d, 10, nil)
		if err == nil && n != 1 {
			err = fmt.Errorf("released %d rows", n)
		}
		return err
	})
	released := probe(t, d).Rewinds
	if released <= at {
		t.Fatalf("releasing an expired lease left the counter at %d", at)
	}
	if n, _ := releaseExpired(t, d, 10, nil); n != 0 || probe(t, d).Rewinds != released {
		t.Fatal("a release of nothing moved the counter")
	}
	if err := d.OutboxRewind(ctx(t)); err != nil || probe(t, d).Rewinds <= released {
		t.Fatalf("a rewind left the counter at %d (%v)", released, err)
	}
}

// The look for stragglers finds the oldest due head that a lookback leaves
// out, and only a head: not a row behind a busy one, nor a recent row.
func testStragglers(t *testing.T, h Harness) {
	d := h.New(t, 0)
	b := dialects.Bounds{Rewinds: probe(t, d).Rewinds, Lookback: time.Minute}
	if _, found, err := d.OutboxStragglers(ctx(t), nil, b); err != nil || found {
		t.Fatalf("an empty table has a straggler: %v, %v", found, err)
	}
	hour, twoHours := time.Now().Add(-time.Hour), time.Now().Add(-2*time.Hour)
	head := keyed("busy", 1)
	head[0].ScheduledAt = &twoHours
	insert(t, d, head...)
	busy := h.claim(t, d, 10)
	if len(busy) != 1 {
		t.Fatalf("claimed %d rows, want the busy key's head", len(busy))
	}
	behind := keyed("busy", 1)
	behind[0].ScheduledAt = &twoHours
	insert(t, d, behind...)
	insert(t, d, testkit.Row(anyTopic)) // recent
	if _, found, _ := d.OutboxStragglers(ctx(t), nil, b); found {
		t.Fatal("a row behind a busy head, or a recent one, counts as a straggler")
	}
	insert(t, d, testkit.Row(anyTopic, testkit.ScheduledAt(hour)))
	ago, found, err := d.OutboxStragglers(ctx(t), nil, b)
	if err != nil || !found || ago < 59*time.Minute || ago > 61*time.Minute {
		t.Fatalf("straggler an hour old: %s, %v, %v", ago, found, err)
	}
	// A look within a span sees the stragglers in it only.
	within := b
	within.Within = 30 * time.Minute
	if ago, found, err := d.OutboxStragglers(ctx(t), nil, within); err != nil || found {
		t.Fatalf("a look over the last 30 minutes found a straggler an hour old: %s, %v, %v", ago, found, err)
	}
	recent := time.Now().Add(-10 * time.Minute)
	insert(t, d, testkit.Row(anyTopic, testkit.ScheduledAt(recent)))
	ago, found, err = d.OutboxStragglers(ctx(t), nil, within)
	if err != nil || !found || ago < 9*time.Minute || ago > 11*time.Minute {
		t.Fatalf("a look over the last 30 minutes, a straggler 10 minutes old: %s, %v, %v", ago, found, err)
	}
	if ago, _, _ := d.OutboxStragglers(ctx(t), nil, b); ago < 59*time.Minute {
		t.Fatalf("a look from the start found a straggler %s old first, want the hour-old one", ago)
	}
}

// releaseExpired releases expired leases with no bound, and says how many.
func releaseExpired(t *testing.T, d dialects.Dialect, limit int, keep []uuid.UUID) (int, error) {
	t.Helper()
	r, err := d.OutboxReleaseExpired(ctx(t), limit, keep, time.Time{})
	return r.Rows, err
}

// A look for expired leases from a bound leaves rows claimed before it
// alone, and reports when the oldest processing row it saw was claimed and
// the database's clock, from which the next look may start.
func testReleaseFrom(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, testkit.Row(anyTopic), testkit.Row(anyTopic))
	expired, err := rowsOf(d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: 1, Lease: time.Millisecond, Token: uuid.New()}))
	if err != nil || len(expired) != 1 {
		t.Fatalf("claim: %v %v", expired, err)
	}
	time.Sleep(20 * time.Millisecond) // the second claim comes later on the database's clock
	if live, err := rowsOf(d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: 1, Lease: time.Hour, Token: uuid.New()})); err != nil || len(live) != 1 {
		t.Fatalf("claim: %v %v", live, err)
	}
	// Kept by its caller, the expired row is not released, but seen.
	kept, err := d.OutboxReleaseExpired(ctx(t), 10, []uuid.UUID{expired[0].Token}, time.Now().Add(-time.Hour))
	if err != nil || kept.Rows != 0 || kept.Oldest.IsZero() || kept.At.Before(kept.Oldest) {
		t.Fatalf("a look from an hour ago: %+v, %v; want nothing released, the oldest claim seen before the clock", kept, err)
	}
	// From just after its claim: not looked at; the live row is the oldest.
	after, err := d.OutboxReleaseExpired(ctx(t), 10, nil, kept.Oldest.Add(time.Millisecond))
	if err != nil || after.Rows != 0 || !after.Oldest.After(kept.Oldest) {
		t.Fatalf("a look from after the expired claim: %+v, %v; want nothing released, the live claim the oldest", after, err)
	}
	if ahead, err := d.OutboxReleaseExpired(ctx(t), 10, nil, after.At.Add(time.Hour)); err != nil || ahead.Rows != 0 || !ahead.Oldest.IsZero() {
		t.Fatalf("a look from an hour ahead: %+v, %v; want nothing seen", ahead, err)
	}
	// From its claim on: released.
	if found, err := d.OutboxReleaseExpired(ctx(t), 10, nil, kept.Oldest); err != nil || found.Rows != 1 || !found.Oldest.Equal(kept.Oldest) {
		t.Fatalf("a look from the expired claim on: %+v, %v; want it released", found, err)
	}
}
