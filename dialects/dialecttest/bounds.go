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

// The claim's bounds (dialects.Bounds, ClaimParams.Continue and Walk): what
// the relay knows narrows what one claim looks at, and never lets a row be
// claimed out of order. A dialect may honour the bounds (PostgreSQL) or
// ignore them (SQL Server): every case here holds either way, and the
// checks that PostgreSQL's walks do narrow are its own tests. What a claim
// with bounds leaves out, a claim without them takes, and a look for
// stragglers finds; after a rewind, bounds made before are set aside.
func boundsTests() []subtest {
	return []subtest{
		{"ClaimContinuesAKeyAfterItsRun", testContinue},
		{"ClaimWithStaleBoundsAfterAReplayKeepsOrder", testBoundsAfterReplay},
		{"ClaimWalkNoneTakesOnlyTheContinuedKeys", testWalkNone},
		{"ClaimWalkKeysGoesOnAfterItsCursor", testWalkKeys},
		{"ClaimLookbackLeavesNothingBehind", testLookback},
		{"ClaimFloorsKeepTheHeadRule", testFloors},
		{"FloorsReadFromEarlierFloors", testFloorsFromEarlierFloors},
		{"ClaimAfterARewindSetsBoundsAside", testRewinds},
		{"StragglersAreWhatABoundedClaimLeaves", testStragglers},
		{"ReleaseFromABoundKeepsLiveLeases", testReleaseFrom},
	}
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

// readFloors reads the floors from prev (none: from the start), and checks
// what a read gives: none, or a floor for every group, at the counter that
// the probe reads.
func readFloors(t *testing.T, d dialects.Dialect, prev dialects.Floors) dialects.Floors {
	t.Helper()
	p := probe(t, d)
	f, err := d.OutboxFloors(ctx(t), p.Last, prev)
	if err != nil {
		t.Fatalf("floors: %v", err)
	}
	if f.Groups != nil && len(f.Groups) != dialects.FloorGroups || f.Rewinds != p.Rewinds {
		t.Fatalf("floors: %d groups at counter %d, want none or %d, at %d", len(f.Groups), f.Rewinds, dialects.FloorGroups, p.Rewinds)
	}
	return f
}

// lowestLive is the smallest sequence of a keyed row that is pending or
// processing (false: there is none).
func lowestLive(t *testing.T, d dialects.Dialect) (int64, bool) {
	t.Helper()
	rows := list(t, d, dialects.Filter{States: []dialects.State{dialects.Pending, dialects.Processing}}, 10000)
	lowest, ok := int64(0), false
	for _, r := range rows {
		if r.Key != nil && *r.Key != "" && (!ok || r.Sequence < lowest) {
			lowest, ok = r.Sequence, true
		}
	}
	return lowest, ok
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
	floors := readFloors(t, d, dialects.Floors{})
	insert(t, d, keyed("k", 1)...)
	if n, err := d.OutboxReplayIDs(ctx(t), []uuid.UUID{first[0].ID}, []dialects.State{dialects.Dead}, ""); err != nil || n != 1 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	at := []dialects.KeyPosition{{Key: "k", After: first[0].Sequence}}
	got := h.claimWith(t, d, dialects.ClaimParams{Limit: 1, MaxHeads: 1, Continue: at,
		Bounds: &dialects.Bounds{Rewinds: before, Lookback: time.Millisecond, Floors: floors.Groups, Positions: at}})
	if len(got) != 1 || got[0].ID != first[0].ID {
		t.Fatalf("with bounds made before a replay, claimed %v, want the replayed row %d first", seqs(got), first[0].Sequence)
	}
}

// A claim that walks nothing (WalkNone) takes the heads of the keys it
// continues and the rows right behind them, and nothing else: not another
// key's head, not an unkeyed row. With no key to continue, it takes
// nothing.
func testWalkNone(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, keyed("a", 1)...)
	run := h.claim(t, d, 100)
	insert(t, d, keyed("a", 2)...)
	insert(t, d, keyed("b", 1)...)
	insert(t, d, testkit.Row(anyTopic))
	deliverAll(t, d, run)
	if got := h.claimWith(t, d, dialects.ClaimParams{Walk: dialects.WalkNone}); len(got) != 0 {
		t.Fatalf("a claim that walks nothing and continues no key took %+v", got)
	}
	got := h.claimWith(t, d, dialects.ClaimParams{Walk: dialects.WalkNone,
		Continue: []dialects.KeyPosition{{Key: "a", After: run[0].Sequence}}, Bounds: &dialects.Bounds{Rewinds: probe(t, d).Rewinds}})
	if len(got) != 2 || got[0].Key != "a" || got[1].Key != "a" || got[0].Sequence > got[1].Sequence {
		t.Fatalf("a claim that only continues a took %+v, want a's next two rows in order", got)
	}
	if rest := h.claim(t, d, 100); len(rest) != 2 {
		t.Fatalf("a claim that walks took %d rows, want b's and the unkeyed one", len(rest))
	}
}

// A walk by key goes on after the key it is given (After), wrapping around
// to the first key, and says where the next one goes on (Claimed.Cursor):
// the keys take turns. Rows without a key come after the keys. A claim
// that took no key's head on a walk by key, and a claim in schedule order,
// learn no cursor.
func testWalkKeys(t *testing.T, h Harness) {
	d := h.New(t, 0)
	for _, k := range []string{"a", "b", "c"} {
		insert(t, d, keyed(k, 2)...)
	}
	claim := func(walk dialects.ClaimWalk, after string) ([]dialects.Row, string) {
		t.Helper()
		c, err := d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: 1, MaxHeads: 1, Lease: lease, Token: uuid.New(), Walk: walk, After: after})
		if err != nil {
			t.Fatalf("claim after %q: %v", after, err)
		}
		return c.Rows, c.Cursor
	}
	var order []string
	cursor := "b"
	for range 3 {
		rows, next := claim(dialects.WalkKeys, cursor)
		if len(rows) != 1 || next != rows[0].Key {
			t.Fatalf("a walk by key after %q took %+v with the cursor %q; want one key's head, and that key as the cursor", cursor, rows, next)
		}
		order, cursor = append(order, rows[0].Key), next
		deliverAll(t, d, rows)
	}
	if got := strings.Join(order, " "); got != "c a b" {
		t.Fatalf("walks by key from after b took the keys %s, want c a b (after b, then around)", got)
	}
	// From the start, the first key's head; then each key's in turn,
	// kept processing, until every key is busy.
	for _, want := range []string{"a", "b", "c"} {
		after := cursor
		if want == "a" {
			after = ""
		}
		rows, next := claim(dialects.WalkKeys, after)
		if len(rows) != 1 || rows[0].Key != want || next != want {
			t.Fatalf("a walk by key after %q took %+v with the cursor %q, want %s's head and the cursor %s", after, rows, next, want, want)
		}
		cursor = next
	}
	insert(t, d, testkit.Row(anyTopic), testkit.Row(anyTopic))
	if rows, next := claim(dialects.WalkKeys, cursor); len(rows) != 1 || rows[0].Key != "" || next != "" {
		t.Fatalf("with every key busy, a walk by key took %+v with the cursor %q, want the unkeyed row and no cursor", rows, next)
	}
	if rows, next := claim(dialects.WalkSchedule, "b"); len(rows) != 1 || next != "" {
		t.Fatalf("a claim in schedule order took %+v with the cursor %q, want the unkeyed row and no cursor", rows, next)
	}
}

// A claim whose walk in schedule order looks back a minute may leave an
// older due row out (a dialect that ignores the bounds takes it): never
// the recent one, and what it leaves, a claim without bounds takes.
func testLookback(t *testing.T, h Harness) {
	h.byKey = false
	d := h.New(t, 0)
	old := time.Now().Add(-time.Hour)
	insert(t, d, testkit.Row("old", testkit.ScheduledAt(old)), testkit.Row("recent"))
	b := &dialects.Bounds{Rewinds: probe(t, d).Rewinds, Lookback: time.Minute}
	got := h.claimWith(t, d, dialects.ClaimParams{Bounds: b})
	if len(got) == 0 || !slices.ContainsFunc(got, func(r dialects.Row) bool { return r.Topic == "recent" }) {
		t.Fatalf("a claim that looks back a minute took %+v, want the recent row", got)
	}
	rest := h.claim(t, d, 100)
	if len(got)+len(rest) != 2 || len(rest) == 1 && rest[0].Topic != "old" {
		t.Fatalf("the bounded claim took %d rows, a claim without bounds then %+v: want the hour-old row taken by one of them", len(got), rest)
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
	f := readFloors(t, d, dialects.Floors{})
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
// aside. Floors a dialect reads never lie above a live row of their keys,
// and rise once the lowest run is delivered; a dialect whose claims ignore
// floors reads none.
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
		f := readFloors(t, d, prev)
		if lowest, ok := f.Lowest(); ok {
			if live, found := lowestLive(t, d); found && lowest > live {
				t.Fatalf("the lowest floor is %d, above the live row %d", lowest, live)
			}
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
	if now, known := mid.Lowest(); known && now <= lowest {
		t.Fatalf("nothing is live below the new rows, yet the lowest floor is %d (was %d)", now, lowest)
	}
	// A replay puts one of the first rows back to pending, below every
	// floor read since: a read from those floors must find it.
	if n, err := d.OutboxReplayIDs(ctx(t), []uuid.UUID{dead[0].ID}, []dialects.State{dialects.Dead}, ""); err != nil || n != 1 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	after := read(mid)
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

// Rows that go back to pending behind what the relays looked at set aside
// the bounds made before: a lease that expired and was released, and a
// stopping replica's release followed by OutboxRewind. A claim with a
// lookback made before either takes the row at once, as a claim without
// bounds would. (A replay: see testBoundsAfterReplay.)
func testRewinds(t *testing.T, h Harness) {
	h.byKey = false // the lookback bounds the walk in schedule order
	d := h.New(t, 0)
	insert(t, d, testkit.Row("expired", testkit.ScheduledAt(time.Now().Add(-2*time.Hour))),
		testkit.Row("released", testkit.ScheduledAt(time.Now().Add(-time.Hour))))
	expired, err := rowsOf(d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: 1, Lease: time.Millisecond, Token: uuid.New()}))
	if err != nil || len(expired) != 1 || expired[0].Topic != "expired" {
		t.Fatalf("claim: %+v %v", expired, err)
	}
	released := h.claim(t, d, 1)
	if len(released) != 1 || released[0].Topic != "released" {
		t.Fatalf("claim: %+v", released)
	}
	taken := func(what, topic string, b *dialects.Bounds) {
		t.Helper()
		got := h.claimWith(t, d, dialects.ClaimParams{Bounds: b})
		if len(got) != 1 || got[0].Topic != topic {
			t.Fatalf("after %s, a claim with a lookback made before took %+v, want the row %q", what, got, topic)
		}
	}
	b := &dialects.Bounds{Rewinds: probe(t, d).Rewinds, Lookback: time.Minute}
	testkit.Eventually(t, "the lease of one millisecond passes and the row is released", 0, func() error {
		n, err := releaseExpired(t, d, 10, nil)
		if err == nil && n != 1 {
			err = fmt.Errorf("released %d rows", n)
		}
		return err
	})
	taken("the release of an expired lease", "expired", b)
	b = &dialects.Bounds{Rewinds: probe(t, d).Rewinds, Lookback: time.Minute}
	complete(t, d, outcome(released[0], dialects.OutcomeRelease))
	if err := d.OutboxRewind(ctx(t)); err != nil {
		t.Fatalf("rewind: %v", err)
	}
	taken("a release and a rewind", "released", b)
}

// The look for stragglers finds the oldest due head that a walk looking
// back b.Lookback leaves out, and only a head: not a row behind a busy
// one, nor a recent row. A dialect whose claims ignore the bounds leaves
// none, and finds none. What a claim with those bounds leaves out, the look
// finds, and a claim without bounds takes.
func testStragglers(t *testing.T, h Harness) {
	h.byKey = false // the lookback bounds the walk in schedule order
	d := h.New(t, 0)
	b := dialects.Bounds{Rewinds: probe(t, d).Rewinds, Lookback: time.Minute}
	stragglers := func(b dialects.Bounds) (time.Duration, bool) {
		t.Helper()
		ago, found, err := d.OutboxStragglers(ctx(t), nil, b)
		if err != nil {
			t.Fatalf("stragglers: %v", err)
		}
		return ago, found
	}
	if _, found := stragglers(b); found {
		t.Fatal("an empty table has a straggler")
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
	insert(t, d, testkit.Row("recent"))
	if _, found := stragglers(b); found {
		t.Fatal("a row behind a busy head, or a recent one, counts as a straggler")
	}
	insert(t, d, testkit.Row("hour", testkit.ScheduledAt(hour)))
	ago, leaves := stragglers(b)
	if leaves && (ago < 59*time.Minute || ago > 61*time.Minute) {
		t.Fatalf("a straggler an hour old, found %s ago", ago)
	}
	// A look within a span sees the stragglers in it only.
	within := b
	within.Within = 30 * time.Minute
	if ago, found := stragglers(within); found {
		t.Fatalf("a look over the last 30 minutes found a straggler %s old", ago)
	}
	insert(t, d, testkit.Row("ten", testkit.ScheduledAt(time.Now().Add(-10*time.Minute))))
	if ago, found := stragglers(within); found != leaves || found && (ago < 9*time.Minute || ago > 11*time.Minute) {
		t.Fatalf("a look over the last 30 minutes, a straggler 10 minutes old: %s, %v (the look from the start found one: %v)", ago, found, leaves)
	}
	if ago, _ := stragglers(b); leaves && ago < 59*time.Minute {
		t.Fatalf("a look from the start found a straggler %s old first, want the hour-old one", ago)
	}
	// The claim with those bounds, then the look, then a claim without.
	got := h.claimWith(t, d, dialects.ClaimParams{Bounds: &b})
	if !slices.ContainsFunc(got, func(r dialects.Row) bool { return r.Topic == "recent" }) {
		t.Fatalf("a claim that looks back a minute took %+v, want the recent row", got)
	}
	left := 3 - len(got)
	ago, found := stragglers(b)
	if found != (left > 0) || found != leaves {
		t.Fatalf("a claim with the bounds left %d of the 3 due heads, and the look found a straggler: %v (it did before the claim: %v)", left, found, leaves)
	}
	rest := h.claim(t, d, 100)
	if len(rest) != left || slices.ContainsFunc(rest, func(r dialects.Row) bool { return r.Key == "busy" }) {
		t.Fatalf("a claim without bounds took %+v, want the %d heads the bounded claim left, and not the row behind the busy head", rest, left)
	}
	if found && (rest[0].Topic != "hour" || ago < 59*time.Minute) {
		t.Fatalf("the look found a straggler %s old, the oldest row left is %q", ago, rest[0].Topic)
	}
}

// releaseExpired releases expired leases with no bound, and says how many.
func releaseExpired(t *testing.T, d dialects.Dialect, limit int, keep []uuid.UUID) (int, error) {
	t.Helper()
	r, err := d.OutboxReleaseExpired(ctx(t), limit, keep, time.Time{})
	return r.Rows, err
}

// A look for expired leases from a bound releases only the expired leases
// that its caller does not keep, whether the dialect honours the bound or
// ignores it; what it leaves, a look from the start releases. What it
// reports holds: the oldest claim it saw was made before its clock.
func testReleaseFrom(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, testkit.Row(anyTopic), testkit.Row(anyTopic))
	expired, err := rowsOf(d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: 1, Lease: time.Millisecond, Token: uuid.New()}))
	if err != nil || len(expired) != 1 {
		t.Fatalf("claim: %v %v", expired, err)
	}
	if live, err := rowsOf(d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: 1, Lease: time.Hour, Token: uuid.New()})); err != nil || len(live) != 1 {
		t.Fatalf("claim: %v %v", live, err)
	}
	time.Sleep(5 * time.Millisecond) // the lease of one millisecond passes
	kept, err := d.OutboxReleaseExpired(ctx(t), 10, []uuid.UUID{expired[0].Token}, time.Now().Add(-time.Hour))
	if err != nil || kept.Rows != 0 || !kept.Oldest.IsZero() && kept.At.Before(kept.Oldest) {
		t.Fatalf("a look from an hour ago, its caller keeping the expired claim: %+v, %v; want nothing released", kept, err)
	}
	ahead, err := d.OutboxReleaseExpired(ctx(t), 10, nil, time.Now().Add(time.Hour))
	if err != nil || ahead.Rows > 1 {
		t.Fatalf("a look from an hour ahead: %+v, %v; want at most the expired row released", ahead, err)
	}
	if n, err := releaseExpired(t, d, 10, nil); err != nil || ahead.Rows+n != 1 {
		t.Fatalf("a look from the start after one from an hour ahead (%d released) released %d (%v), want the expired row released once", ahead.Rows, n, err)
	}
	if n, err := releaseExpired(t, d, 10, nil); err != nil || n != 0 {
		t.Fatalf("released %d rows with a live lease (%v)", n, err)
	}
}
