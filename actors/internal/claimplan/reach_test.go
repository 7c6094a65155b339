package claimplan

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/clock"
)

var tune = Default()

func newManualClock() *clock.Fake {
	return clock.NewFake(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
}

// Until a probe has told the replay counter, claims walk from the start
// and carry no bounds; afterwards a walk in schedule order looks back only
// to where the last one looked, less the margin.
func TestReachLooksBackOnlyToTheLastLook(t *testing.T) {
	clk := newManualClock()
	r := newReach(tune)
	p := r.plan(clk.Now(), scheduleClaim, 10)
	if !p.full || p.bounds != nil {
		t.Fatalf("before any probe: %+v, want a full look without bounds", p)
	}
	r.observe(dialects.Probe{Rewinds: 3})
	p = r.plan(clk.Now(), scheduleClaim, 10)
	if !p.full || p.bounds == nil || p.bounds.Rewinds != 3 || p.bounds.Lookback != 0 {
		t.Fatalf("first claim after the probe: %+v, want a full look at counter 3", p)
	}
	clk.Advance(5 * time.Millisecond)
	r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{Now: clk.Now()}, 5*time.Millisecond, time.Time{})
	clk.Advance(100 * time.Millisecond)
	p = r.plan(clk.Now(), scheduleClaim, 10)
	if p.full || p.bounds.Lookback != 105*time.Millisecond+tune.LookbackMargin {
		t.Fatalf("105 ms after the last claim was planned: %+v, want a lookback of 105 ms plus the margin", p.bounds)
	}
	// A walk cut at its limit reached rows due 30 ms before the claim: the
	// next one looks back to there.
	r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{Now: clk.Now(), Cut: true, Reach: clk.Now().Add(-30 * time.Millisecond)}, time.Millisecond, time.Time{})
	clk.Advance(10 * time.Millisecond)
	if p = r.plan(clk.Now(), scheduleClaim, 10); p.bounds.Lookback != 40*time.Millisecond+tune.LookbackMargin {
		t.Fatalf("after a cut walk: lookback %s, want 40 ms plus the margin", p.bounds.Lookback)
	}
	// Keyed rows waiting for a writer since 5 ms ago hold the look back
	// there, however long they wait.
	waiting := clk.Now().Add(-5 * time.Millisecond)
	r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{Now: clk.Now()}, time.Millisecond, waiting)
	clk.Advance(200 * time.Millisecond)
	p = r.plan(clk.Now(), scheduleClaim, 10)
	r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{Now: clk.Now()}, time.Millisecond, waiting)
	if p = r.plan(clk.Now(), scheduleClaim, 10); p.bounds.Lookback != 205*time.Millisecond+tune.LookbackMargin {
		t.Fatalf("while rows wait for a writer: lookback %s, want 205 ms plus the margin", p.bounds.Lookback)
	}
}

// While a long transaction holds the horizon back, a walk looks back with
// the whole tune.LookbackMargin at least every tune.WideEvery; the walks in between,
// with twice the lateness seen lately plus tune.MinMargin: how long before the
// previous walk looked the rows that a walk took became due. A window
// without late rows narrows it again. Without such a transaction every
// walk has the whole margin.
func TestReachsMarginFollowsTheRowsLateness(t *testing.T) {
	clk := newManualClock()
	r := newReach(tune)
	r.held = true
	r.observe(dialects.Probe{Rewinds: 1})
	var last time.Time // when the last walk was planned: the anchor
	walk := func(earliest time.Duration) time.Duration {
		t.Helper()
		p := r.plan(clk.Now(), scheduleClaim, 10)
		rep := dialects.ClaimReport{Now: clk.Now()}
		if earliest != 0 {
			rep.Earliest = clk.Now().Add(-earliest)
		}
		r.claimed(clk.Now(), scheduleClaim, p, rep, time.Millisecond, time.Time{})
		since := p.sentAt.Sub(last)
		last = p.sentAt
		clk.Advance(5 * time.Millisecond)
		if p.full {
			return -1
		}
		return p.bounds.Lookback - since // the margin
	}
	if m := walk(0); m != -1 {
		t.Fatalf("the first walk after the probe: %s, want a full look", m)
	}
	if m := walk(0); m != tune.LookbackMargin {
		t.Fatalf("the first bounded walk: margin %s, want the whole %s", m, tune.LookbackMargin)
	}
	if m := walk(0); m != tune.MinMargin {
		t.Fatalf("5 ms later, no row late: margin %s, want %s", m, tune.MinMargin)
	}
	// A row that became due 12 ms before this walk, 7 ms before the last.
	walk(12 * time.Millisecond)
	if m := walk(0); m != 14*time.Millisecond+tune.MinMargin {
		t.Fatalf("after a row 7 ms late: margin %s, want 14 ms plus %s", m, tune.MinMargin)
	}
	clk.Advance(tune.WideEvery)
	if m := walk(0); m != tune.LookbackMargin {
		t.Fatalf("%s after the last wide walk: margin %s, want %s", tune.WideEvery, m, tune.LookbackMargin)
	}
	// A row 300 ms late: the margin is at most the whole one.
	walk(305 * time.Millisecond)
	if m := walk(0); m != tune.LookbackMargin {
		t.Fatalf("after a row 300 ms late: margin %s, want %s", m, tune.LookbackMargin)
	}
	// Two windows without late rows forget them.
	clk.Advance(2 * tune.LateWindow)
	walk(0) // wide
	if m := walk(0); m != tune.MinMargin {
		t.Fatalf("%s later: margin %s, want %s", 2*tune.LateWindow, m, tune.MinMargin)
	}
	// A walk cut at its limit: the next walk's rows are not late.
	p := r.plan(clk.Now(), scheduleClaim, 10)
	r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{Now: clk.Now(), Cut: true, Reach: clk.Now()}, time.Millisecond, time.Time{})
	last = p.sentAt
	clk.Advance(5 * time.Millisecond)
	walk(100 * time.Millisecond)
	if m := walk(0); m != tune.MinMargin {
		t.Fatalf("after a walk that followed a cut one: margin %s, want %s", m, tune.MinMargin)
	}
	r.held = false
	if m := walk(0); m != tune.LookbackMargin {
		t.Fatalf("with the horizon no longer held: margin %s, want %s", m, tune.LookbackMargin)
	}
}

// A replay sets every bound aside: the continuations and floors made before
// it, and the lookback (the next walk looks from the start). A claim
// planned before a lowering cannot undo it.
func TestReachForgetsEverythingAtAReplay(t *testing.T) {
	clk := newManualClock()
	r := newReach(tune)
	r.observe(dialects.Probe{Rewinds: 1})
	p := r.plan(clk.Now(), scheduleClaim, 10)
	r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{Now: clk.Now()}, time.Millisecond, time.Time{})
	r.floorsRead(clk.Now(), dialects.Floors{Rewinds: 1, Groups: make([]int64, dialects.FloorGroups)}, time.Millisecond, nil)
	r.continued([]Continuation{{Pos: dialects.KeyPosition{Key: "a", After: 7}, Rewinds: 1}, {Pos: dialects.KeyPosition{Key: "b", After: 9}, Rewinds: 0}})
	if len(r.continuing) != 1 || r.continuing[0].Key != "a" {
		t.Fatalf("continuing %+v, want only a (b's position was made at another counter)", r.continuing)
	}
	clk.Advance(10 * time.Millisecond) // the next full look is 20 ms after the first
	before := r.plan(clk.Now(), scheduleClaim, 10)
	if before.full || before.bounds.Floors == nil || len(before.continued) != 1 {
		t.Fatalf("before the replay: %+v, want a bounded claim with floors that continues a", before)
	}
	r.observe(dialects.Probe{Rewinds: 2})
	r.continued([]Continuation{{Pos: dialects.KeyPosition{Key: "c", After: 1}, Rewinds: 1}})
	// The claim planned before the replay returns afterwards.
	r.claimed(clk.Now(), scheduleClaim, before, dialects.ClaimReport{Now: clk.Now()}, time.Millisecond, time.Time{})
	p = r.plan(clk.Now(), scheduleClaim, 10)
	if !p.full || p.bounds.Rewinds != 2 || p.bounds.Floors != nil || len(p.continued) != 0 {
		t.Fatalf("after a replay: %+v, want a full look at counter 2, no floors, no continuations", p)
	}
	// A read of the floors that began before the replay returns after it:
	// it is dropped, and the next read is due at once, however long it took.
	if !r.floorsDue(clk.Now()) {
		t.Fatal("after a replay, no read of the floors is due")
	}
	r.floorsRead(clk.Now(), dialects.Floors{Rewinds: 1, Groups: make([]int64, dialects.FloorGroups)}, time.Minute, nil)
	if !r.floorsDue(clk.Now()) || r.plan(clk.Now(), scheduleClaim, 10).bounds.Floors != nil {
		t.Fatal("floors made before the replay were kept, or the next read waits for them")
	}
}

// A look for stragglers comes no more often than its cost allows, and a
// straggler it finds makes the next walk look back to it.
func TestReachLooksForStragglersAsItsCostAllows(t *testing.T) {
	clk := newManualClock()
	r := newReach(tune)
	if _, due := r.stragglersDue(clk.Now()); due {
		t.Fatal("a look for stragglers before any probe")
	}
	r.observe(dialects.Probe{Rewinds: 4})
	p := r.plan(clk.Now(), scheduleClaim, 10)
	r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{Now: clk.Now()}, time.Millisecond, time.Time{})
	b, due := r.stragglersDue(clk.Now())
	if !due || b.Rewinds != 4 || b.Lookback != tune.LookbackMargin {
		t.Fatalf("first look: %+v %v", b, due)
	}
	if _, again := r.stragglersDue(clk.Now()); again {
		t.Fatal("a second look while one runs")
	}
	sent := clk.Now()
	clk.Advance(200 * time.Millisecond)
	// The next from the start in 10 s; in between, a look over the last
	// tune.StragglerSpan every second.
	r.stragglersFound(clk.Now(), 0, false, sent, 200*time.Millisecond, nil)
	r.took(p, tune.LookAfterRows, false) // busy: the looks come as their cost allows
	clk.Advance(900 * time.Millisecond)
	if _, due = r.stragglersDue(clk.Now()); due {
		t.Fatal("a look 0.9 s after one from the start")
	}
	clk.Advance(200 * time.Millisecond)
	if b, due = r.stragglersDue(clk.Now()); !due || b.Within != tune.StragglerSpan {
		t.Fatalf("1.1 s after a look from the start that took 200 ms: %+v %v, want a look over the last %s", b, due, tune.StragglerSpan)
	}
	r.stragglersFound(clk.Now(), 0, false, clk.Now(), time.Millisecond, nil)
	r.took(p, tune.LookAfterRows, false)
	clk.Advance(9 * time.Second)
	if b, due = r.stragglersDue(clk.Now()); !due || b.Within != 0 {
		t.Fatalf("10.1 s after a look from the start that took 200 ms: %+v %v, want one from the start", b, due)
	}
	sent = clk.Now()
	r.stragglersFound(clk.Now(), time.Minute, true, sent, time.Millisecond, nil)
	if p = r.plan(clk.Now(), scheduleClaim, 10); p.bounds.Lookback != time.Minute+tune.LookbackMargin {
		t.Fatalf("after a straggler a minute old: lookback %s, want a minute plus the margin", p.bounds.Lookback)
	}
}

// At a trickle (fewer than LookAfterRows rows claimed since the last look),
// with the horizon clear, the looks off the claims' path come at most every
// QuietLookEvery, however cheap: each is a transaction.
func TestReachLooksRarelyAtATrickle(t *testing.T) {
	clk := newManualClock()
	r := newReach(tune)
	r.observe(dialects.Probe{Rewinds: 1})
	p := r.plan(clk.Now(), scheduleClaim, 10)
	r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{Now: clk.Now()}, time.Millisecond, time.Time{})
	r.floorsRead(clk.Now(), dialects.Floors{Rewinds: 1, Groups: make([]int64, dialects.FloorGroups)}, time.Millisecond, nil)
	if _, due := r.stragglersDue(clk.Now()); !due {
		t.Fatal("no first look")
	}
	r.stragglersFound(clk.Now(), 0, false, clk.Now(), time.Millisecond, nil)
	looks, reads := 0, 0
	for range 100 { // a row a second
		clk.Advance(time.Second)
		p := r.plan(clk.Now(), scheduleClaim, 10)
		r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{Now: clk.Now()}, time.Millisecond, time.Time{})
		r.took(p, 1, false)
		if _, due := r.stragglersDue(clk.Now()); due {
			looks++
			r.stragglersFound(clk.Now(), 0, false, clk.Now(), time.Millisecond, nil)
		}
		if r.floorsDue(clk.Now()) {
			reads++
			r.floorsRead(clk.Now(), dialects.Floors{Rewinds: 1, Groups: make([]int64, dialects.FloorGroups)}, time.Millisecond, nil)
		}
	}
	if want := int(100 * time.Second / tune.QuietLookEvery); looks != want || reads > want {
		t.Fatalf("100 s at a row a second: %d looks for stragglers and %d reads of the floors, want %d and at most %d", looks, reads, want, want)
	}
	// Held, they come as their cost allows.
	r.held = true
	clk.Advance(tune.MinStragglerLook)
	if _, due := r.stragglersDue(clk.Now()); !due {
		t.Fatal("held: no look a second after the last")
	}
}

// While held, a look for stragglers from the start comes as rarely as its
// cost asks, and between two of them a look over the last tune.StragglerSpan
// comes every second: a row whose commit came late is found in a second
// however long the looks from the start take.
func TestReachLooksNarrowlyBetweenWholeLooksWhileHeld(t *testing.T) {
	clk := newManualClock()
	r := newReach(tune)
	r.observe(dialects.Probe{Rewinds: 1})
	r.held = true
	p := r.plan(clk.Now(), scheduleClaim, 10)
	r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{Now: clk.Now()}, time.Millisecond, time.Time{})
	b, due := r.stragglersDue(clk.Now())
	if !due || b.Within != 0 {
		t.Fatalf("the first look while held: %+v %v, want one from the start", b, due)
	}
	r.stragglersFound(clk.Now(), 0, false, clk.Now(), 1200*time.Millisecond, nil) // whole: next in a minute
	for i := range 50 {
		clk.Advance(tune.MinStragglerLook)
		b, due = r.stragglersDue(clk.Now())
		if !due || b.Within != tune.StragglerSpan {
			t.Fatalf("look %d after a whole one: %+v %v, want one over the last %s", i, b, due, tune.StragglerSpan)
		}
		r.stragglersFound(clk.Now(), 0, false, clk.Now(), 15*time.Millisecond, nil)
	}
	clk.Advance(10 * time.Second)
	if b, due = r.stragglersDue(clk.Now()); !due || b.Within != 0 {
		t.Fatalf("a minute after the whole look: %+v %v, want one from the start again", b, due)
	}
	r.stragglersFound(clk.Now(), 0, false, clk.Now(), time.Second, nil)
	r.held = false
	clk.Advance(tune.MaxFullLook)
	if b, due = r.stragglersDue(clk.Now()); !due || b.Within != 0 {
		t.Fatalf("once the hold ended: %+v %v, want every look from the start", b, due)
	}
}

// By key, a claim walks the keys only when its continuations leave room
// for heads, and then not more often than the walk's cost allows; between
// walks, it takes only its continuations when they fill it, else it goes in
// schedule order, bounded, however many rows arrive.
func TestReachWalksTheKeysAsOftenAsTheirCostAllowsWhileHeld(t *testing.T) {
	clk := newManualClock()
	r := newReach(tune)
	r.held = true
	r.observe(dialects.Probe{})
	p := r.plan(clk.Now(), byKeyClaim, 2)
	if !p.full || p.continueOnly || p.kind != byKeyClaim {
		t.Fatalf("first claim by key: %+v, want a walk over the keys", p)
	}
	r.claimed(clk.Now(), byKeyClaim, p, dialects.ClaimReport{}, 50*time.Millisecond, time.Time{})
	r.continued([]Continuation{{Pos: dialects.KeyPosition{Key: "a"}}, {Pos: dialects.KeyPosition{Key: "b"}}, {Pos: dialects.KeyPosition{Key: "c"}}})
	if p = r.plan(clk.Now(), byKeyClaim, 2); p.full || !p.continueOnly || len(p.continued) != 2 || p.kind != byKeyClaim {
		t.Fatalf("with three keys to continue and room for two: %+v, want a and b only", p)
	}
	r.anchor = clk.Now().Add(-time.Second)
	if p = r.plan(clk.Now(), byKeyClaim, 2); p.full || p.continueOnly || len(p.continued) != 1 || p.kind != scheduleClaim ||
		p.bounds.Lookback != time.Second+tune.LookbackMargin {
		t.Fatalf("with c left and the walk not due: %+v, want c and a walk in schedule order, bounded", p)
	}
	clk.Advance(500 * time.Millisecond)
	if p = r.plan(clk.Now(), byKeyClaim, 2); p.full || p.kind != scheduleClaim || !p.fallback {
		t.Fatalf("500 ms after a walk of 50 ms: %+v, want no walk over the keys", p)
	}
	r.took(p, 0, false)
	if p = r.plan(clk.Now(), byKeyClaim, 2); p.kind != byKeyClaim || !p.continueOnly {
		t.Fatalf("after a claim in schedule order that found nothing: %+v, want the continuations only until the next walk", p)
	}
	clk.Advance(500 * time.Millisecond)
	if p = r.plan(clk.Now(), byKeyClaim, 2); !p.full || p.continueOnly || p.kind != byKeyClaim {
		t.Fatalf("a second after a walk of 50 ms: %+v, want a walk", p)
	}
	if r.fruitless {
		t.Fatal("a walk over the keys did not let claims in schedule order be tried again")
	}
	r.claimed(clk.Now(), byKeyClaim, p, dialects.ClaimReport{}, 10*time.Second, time.Time{})
	clk.Advance(30 * time.Second)
	if p = r.plan(clk.Now(), byKeyClaim, 2); p.kind != scheduleClaim {
		t.Fatalf("30 s after a walk of 10 s: %+v, want a claim in schedule order", p)
	}
	clk.Advance(30 * time.Second)
	if p = r.plan(clk.Now(), byKeyClaim, 2); p.kind != byKeyClaim || !p.full {
		t.Fatalf("a minute after a walk of 10 s: %+v, want a walk over the keys (once a minute at least)", p)
	}
	r.failed(claimPlan{continued: []dialects.KeyPosition{{Key: "z"}}})
	if len(r.continuing) != 1 || r.continuing[0].Key != "z" {
		t.Fatalf("a failed claim's continuations were not kept: %+v", r.continuing)
	}
	// Rows that arrive, or a walk that took every head it could, do not
	// make a walk while held: it would pass over every version the
	// transaction keeps, at every claim.
	r.claimed(clk.Now(), byKeyClaim, p, dialects.ClaimReport{}, 10*time.Millisecond, time.Time{})
	r.took(p, 500, true)
	r.seen = mark{last: r.walked.last + 100}
	if p = r.plan(clk.Now(), byKeyClaim, 2); p.full {
		t.Fatalf("held, right after a full walk, rows arrived: %+v, want no walk", p)
	}
}

// While no transaction holds the horizon back, vacuum keeps up and a walk
// over the keys is cheap: a claim by key walks when rows arrived since the
// last walk, or when that walk took every head it could (more keys wait).
// Otherwise it takes its continuations only, and never goes in schedule
// order: in a deep backlog of few keys, whose rows all wait behind busy
// heads, that walk would pass over every one of them (a second a claim,
// seen, and half the pace of a drain of ten keys).
func TestReachWalksTheKeysWhenRowsArriveOrKeysWait(t *testing.T) {
	clk, r, p := afterAFullWalk()
	if !p.full || p.kind != byKeyClaim || p.seen != (mark{last: 1000, settled: 900}) {
		t.Fatalf("first claim: %+v, want a walk that saw 1000", p)
	}
	clk.Advance(time.Millisecond)
	if p = r.plan(clk.Now(), byKeyClaim, 4); !p.full || p.kind != byKeyClaim {
		t.Fatalf("after a walk that took every head it could: %+v, want another walk at once", p)
	}
	// A second claim while that walk runs walks as well: the keys still
	// wait as far as the claimer knows, and two walks keep the database
	// busy while the outcomes of the last come back.
	if q := r.plan(clk.Now(), byKeyClaim, 4); !q.full || q.kind != byKeyClaim {
		t.Fatalf("a second claim beside a running walk, keys waiting: %+v, want a walk too", q)
	}
	r.claimed(clk.Now(), byKeyClaim, p, dialects.ClaimReport{}, 5*time.Millisecond, time.Time{})
	r.took(p, 30, false)
	r.continued([]Continuation{{Pos: dialects.KeyPosition{Key: "a", After: 7}}})
	clk.Advance(time.Millisecond)
	p = r.plan(clk.Now(), byKeyClaim, 4)
	if p.full || !p.continueOnly || p.kind != byKeyClaim || p.fallback || len(p.continued) != 1 {
		t.Fatalf("after a walk that found the other keys busy, nothing arrived: %+v, want key a only", p)
	}
	if p = r.plan(clk.Now(), byKeyClaim, 4); !p.continueOnly || len(p.continued) != 0 {
		t.Fatalf("with nothing to continue: %+v, want no walk (the claimer then claims nothing)", p)
	}
	r.seen.settled = 1000
	if p = r.plan(clk.Now(), byKeyClaim, 4); !p.full || p.kind != byKeyClaim {
		t.Fatalf("rows settled since the last walk: %+v, want a walk", p)
	}
	r.claimed(clk.Now(), byKeyClaim, p, dialects.ClaimReport{}, 5*time.Millisecond, time.Time{})
	r.took(p, 1, false)
	r.seen.last = 1001
	if p = r.plan(clk.Now(), byKeyClaim, 4); !p.full || p.kind != byKeyClaim {
		t.Fatalf("a row arrived since the last walk: %+v, want a walk", p)
	}
	r.claimed(clk.Now(), byKeyClaim, p, dialects.ClaimReport{}, 5*time.Millisecond, time.Time{})
	r.took(p, 1, false)
	if p = r.plan(clk.Now(), byKeyClaim, 4); p.full {
		t.Fatalf("the walk saw that row: %+v, want no walk", p)
	}
	clk.Advance(100 * time.Millisecond)
	if p = r.plan(clk.Now(), byKeyClaim, 4); !p.full {
		t.Fatalf("100 ms after a walk of 5 ms: %+v, want a walk (its cost allows one)", p)
	}
}

// A key whose run took its last claimable row is not continued while the
// horizon is not held (a claim would find nothing there; a row that
// arrives for it is news, which brings a walk), but its position is kept.
// While held, walks are rare, and it is continued all the same.
func TestReachContinuesAnEndedKeyOnlyWhileHeld(t *testing.T) {
	r := newReach(tune)
	r.observe(dialects.Probe{})
	r.continued([]Continuation{
		{Pos: dialects.KeyPosition{Key: "a", After: 7}, Ended: true},
		{Pos: dialects.KeyPosition{Key: "b", After: 9}},
	})
	if len(r.continuing) != 1 || r.continuing[0].Key != "b" {
		t.Fatalf("not held: continuing %+v, want b only", r.continuing)
	}
	if r.positions["a"].after != 7 {
		t.Fatalf("the ended key's position was not kept: %+v", r.positions)
	}
	r.held = true
	r.continued([]Continuation{{Pos: dialects.KeyPosition{Key: "a", After: 12}, Ended: true}})
	if len(r.continuing) != 2 || r.continuing[1].Key != "a" || r.continuing[1].After != 12 {
		t.Fatalf("held: continuing %+v, want b, then a from 12", r.continuing)
	}
}

// A claim that took no row returns no time from the database, but it
// walked every due row it could look at: the next walk in schedule order
// looks back only to it. Left where it was, every walk after it would walk
// the same backlog again (a one-key backlog: 600 ms a claim, seen). Its
// time on the database's clock is estimated from the last claim that
// returned one; a dialect that keeps no bounds moves nothing.
func TestReachMovesOnAfterAnEmptyClaim(t *testing.T) {
	clk := newManualClock()
	r := newReach(tune)
	r.observe(dialects.Probe{})
	p := r.plan(clk.Now(), scheduleClaim, 10)
	db := clk.Now().Add(time.Hour) // the database's clock is an hour ahead
	r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{Now: db.Add(2 * time.Millisecond)}, 5*time.Millisecond, time.Time{})
	clk.Advance(time.Second)
	p = r.plan(clk.Now(), scheduleClaim, 10)
	if p.full || p.bounds.Lookback != time.Second+tune.LookbackMargin {
		t.Fatalf("a second after the last claim: %+v, want a lookback of a second plus the margin", p.bounds)
	}
	r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{Empty: true}, 5*time.Millisecond, time.Time{})
	if want := clk.Now().Add(time.Hour + 2*time.Millisecond); !r.lastWalk.Equal(want) {
		t.Fatalf("an empty claim's time on the database's clock: %v, want %v", r.lastWalk, want)
	}
	clk.Advance(10 * time.Millisecond)
	if p = r.plan(clk.Now(), scheduleClaim, 10); p.bounds.Lookback != 10*time.Millisecond+tune.LookbackMargin {
		t.Fatalf("10 ms after an empty claim: lookback %s, want 10 ms plus the margin", p.bounds.Lookback)
	}
	anchor := r.anchor
	clk.Advance(10 * time.Millisecond)
	p = r.plan(clk.Now(), scheduleClaim, 10)
	r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{}, 5*time.Millisecond, time.Time{})
	if !r.anchor.Equal(anchor) {
		t.Fatal("a claim without a report (a dialect that keeps no bounds) moved the anchor")
	}
}

// While a long transaction holds the horizon back, and once the floors are
// older than tune.PositionsAfter, a claim in schedule order carries the
// positions of the keys whose runs finished, in bytewise key order, each at
// its furthest; at most tune.MaxPositions of them, the most recently updated;
// none after a replay, nor without such a transaction.
func TestReachCarriesKeysPositionsWhenTheFloorsAreOld(t *testing.T) {
	clk := newManualClock()
	r := newReach(tune)
	r.held = true
	r.observe(dialects.Probe{Rewinds: 1})
	p := r.plan(clk.Now(), scheduleClaim, 10)
	r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{Now: clk.Now()}, time.Millisecond, time.Time{})
	r.floorsRead(clk.Now(), dialects.Floors{Rewinds: 1, Groups: make([]int64, dialects.FloorGroups)}, time.Millisecond, nil)
	r.continued([]Continuation{
		{Pos: dialects.KeyPosition{Key: "b", After: 9}, Rewinds: 1},
		{Pos: dialects.KeyPosition{Key: "B", After: 4}, Rewinds: 1},
		{Pos: dialects.KeyPosition{Key: "a", After: 7}, Rewinds: 1},
		{Pos: dialects.KeyPosition{Key: "b", After: 3}, Rewinds: 1}, // older news: b stays at 9
		{Pos: dialects.KeyPosition{Key: "c", After: 2}, Rewinds: 0}, // another counter's
	})
	if p := r.plan(clk.Now(), scheduleClaim, 10); p.bounds.Positions != nil {
		t.Fatalf("with floors just read: positions %v, want none", p.bounds.Positions)
	}
	clk.Advance(tune.PositionsAfter)
	p = r.plan(clk.Now(), scheduleClaim, 10)
	want := []dialects.KeyPosition{{Key: "B", After: 4}, {Key: "a", After: 7}, {Key: "b", After: 9}}
	if !slices.Equal(p.bounds.Positions, want) {
		t.Fatalf("with floors %s old: positions %v, want %v", tune.PositionsAfter, p.bounds.Positions, want)
	}
	if p := r.plan(clk.Now(), byKeyClaim, 10); p.kind == byKeyClaim && p.bounds.Positions != nil {
		t.Fatalf("a claim by key carries positions %v; only the walk in schedule order probes heads", p.bounds.Positions)
	}
	for i := range 2 * tune.MaxPositions {
		r.continued([]Continuation{{Pos: dialects.KeyPosition{Key: fmt.Sprintf("k%05d", i), After: int64(i)}, Rewinds: 1}})
	}
	clk.Advance(tune.PositionsEvery)
	p = r.plan(clk.Now(), scheduleClaim, 10)
	if n := len(p.bounds.Positions); n > tune.MaxPositions || n < tune.MaxPositions/2 {
		t.Fatalf("%d positions after %d keys, want between %d and %d", n, 2*tune.MaxPositions, tune.MaxPositions/2, tune.MaxPositions)
	}
	if last := p.bounds.Positions[len(p.bounds.Positions)-1]; last.Key != fmt.Sprintf("k%05d", 2*tune.MaxPositions-1) {
		t.Fatalf("the last position is %v, want the most recent key's", last)
	}
	r.held = false
	if p := r.plan(clk.Now(), scheduleClaim, 10); p.bounds.Positions != nil {
		t.Fatalf("with the horizon no longer held: positions %v, want none", p.bounds.Positions)
	}
	r.held = true
	r.observe(dialects.Probe{Rewinds: 2})
	if p := r.plan(clk.Now(), scheduleClaim, 10); p.bounds.Positions != nil {
		t.Fatalf("after a replay: positions %v, want none", p.bounds.Positions)
	}
}

// A walk whose probe saw a writer open since 40 ms before it was planned
// makes the next walk look back to that writer's start, and a row of that
// writer which the next walk takes does not count as late: the margin stays
// narrow. A writer older than tune.LookbackMargin is left to the looks for
// stragglers.
func TestReachLooksBackToTheOpenWriters(t *testing.T) {
	clk := newManualClock()
	r := newReach(tune)
	r.held = true
	r.observe(dialects.Probe{Rewinds: 1})
	for range 2 { // the full look, then the first (wide) bounded one
		p := r.plan(clk.Now(), scheduleClaim, 10)
		r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{Now: clk.Now()}, time.Millisecond, time.Time{})
		clk.Advance(5 * time.Millisecond)
	}
	p := r.plan(clk.Now(), scheduleClaim, 10)
	p.writerAge = 40 * time.Millisecond
	r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{Now: clk.Now()}, time.Millisecond, time.Time{})
	clk.Advance(5 * time.Millisecond)
	next := r.plan(clk.Now(), scheduleClaim, 10)
	if want := 45*time.Millisecond + tune.MinMargin; next.bounds.Lookback != want {
		t.Fatalf("after a probe that saw a writer open 40 ms: lookback %s, want %s", next.bounds.Lookback, want)
	}
	// It takes the writer's row, due 44 ms before it (39 ms before the
	// previous walk, 1 ms after the writer's start).
	r.claimed(clk.Now(), scheduleClaim, next, dialects.ClaimReport{Now: clk.Now(), Earliest: clk.Now().Add(-44 * time.Millisecond)}, time.Millisecond, time.Time{})
	clk.Advance(5 * time.Millisecond)
	if p := r.plan(clk.Now(), scheduleClaim, 10); p.bounds.Lookback != 5*time.Millisecond+tune.MinMargin {
		t.Fatalf("after the writer's row: lookback %s, want 5 ms plus %s (the row was not late)", p.bounds.Lookback, tune.MinMargin)
	}
}

// The writers a claim's probe saw are remembered from the first claim
// that saw them; the age of the oldest still open goes to the next walk,
// up to tune.LookbackMargin.
func TestReachRemembersWhenItFirstSawEachWriter(t *testing.T) {
	clk := newManualClock()
	r := newReach(tune)
	t0 := clk.Now()
	if age := r.writersSeen([]int64{10}, t0); age != 0 {
		t.Fatalf("a writer seen for the first time: age %s, want 0", age)
	}
	if age := r.writersSeen([]int64{10, 11}, t0.Add(30*time.Millisecond)); age != 30*time.Millisecond {
		t.Fatalf("writer 10 seen again 30 ms later: age %s, want 30ms", age)
	}
	if age := r.writersSeen(nil, t0.Add(40*time.Millisecond)); age != 0 || len(r.writers) != 2 {
		t.Fatalf("a probe that could not tell the writers: age %s, %d remembered, want 0 and both kept", age, len(r.writers))
	}
	if age := r.writersSeen([]int64{11}, t0.Add(50*time.Millisecond)); age != 20*time.Millisecond || len(r.writers) != 1 {
		t.Fatalf("writer 10 ended: age %s (want 20ms, writer 11's), %d remembered (want 1)", age, len(r.writers))
	}
	if age := r.writersSeen([]int64{11}, t0.Add(30*time.Millisecond+tune.LookbackMargin+time.Millisecond)); age != 0 {
		t.Fatalf("a writer open longer than %s: age %s, want 0 (left to the looks for stragglers)", tune.LookbackMargin, age)
	}
	if age := r.writersSeen([]int64{}, t0.Add(time.Second)); age != 0 || len(r.writers) != 0 {
		t.Fatalf("no writer open: age %s, %d remembered, want 0 and none", age, len(r.writers))
	}
}

// A writer open longer than tune.LookbackMargin is passed over while it runs,
// and does not hide the younger writers from the walks; once it has ended,
// the next walk looks back to when it was first seen, once.
func TestReachLooksBackToASlowWriterOnceItEnds(t *testing.T) {
	clk := newManualClock()
	r := newReach(tune)
	r.held = true
	r.observe(dialects.Probe{Rewinds: 1})
	claim := func(ws []int64) claimPlan {
		p := r.plan(clk.Now(), scheduleClaim, 10)
		p.writerAge = r.writersSeen(ws, p.sentAt)
		r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{Now: clk.Now()}, time.Millisecond, time.Time{})
		clk.Advance(10 * time.Millisecond)
		return p
	}
	claim([]int64{})
	first := clk.Now()
	claim([]int64{7}) // writer 7, slow: its commit waits a second
	for clk.Now().Sub(first) <= tune.LookbackMargin+20*time.Millisecond {
		claim([]int64{7})
	}
	if p := claim([]int64{7, 8}); p.writerAge != 0 { // a young writer beside it
		t.Fatalf("writer 8's first claim: age %s, want 0", p.writerAge)
	}
	p := r.plan(clk.Now(), scheduleClaim, 10)
	if age := r.writersSeen([]int64{7, 8}, p.sentAt); age != 10*time.Millisecond {
		t.Fatalf("writer 8 seen 10 ms ago beside writer 7 open %s: age %s, want 10ms (the old writer must not hide it)",
			clk.Now().Sub(first), age)
	}
	r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{Now: clk.Now()}, time.Millisecond, time.Time{})
	clk.Advance(10 * time.Millisecond)
	if p := r.plan(clk.Now(), scheduleClaim, 10); p.bounds.Lookback > 20*time.Millisecond+tune.LookbackMargin {
		t.Fatalf("while writer 7 runs: lookback %s, want only back to writer 8 (20 ms) and the margin", p.bounds.Lookback)
	}
	for clk.Now().Sub(first) < time.Second {
		claim([]int64{7})
	}
	ended := claim([]int64{}) // writer 7 has committed: this claim's walk passed its rows
	next := r.plan(clk.Now(), scheduleClaim, 10)
	want := clk.Now().Sub(first) + tune.LookbackMargin
	if next.bounds.Lookback < want {
		t.Fatalf("after the slow writer ended: lookback %s, want at least %s (back to when it was first seen, and the margin)",
			next.bounds.Lookback, want)
	}
	// The claim whose probe saw it end must not move the anchor forward
	// again: it was planned before the anchor moved back.
	if ended.lowered == r.lowered {
		t.Fatalf("the anchor was not moved back (lowered %d)", r.lowered)
	}
	r.claimed(clk.Now(), scheduleClaim, next, dialects.ClaimReport{Now: clk.Now()}, time.Millisecond, time.Time{})
	clk.Advance(10 * time.Millisecond)
	if p := r.plan(clk.Now(), scheduleClaim, 10); p.bounds.Lookback > 10*time.Millisecond+tune.LookbackMargin {
		t.Fatalf("the walk after that: lookback %s, want back to the last walk only", p.bounds.Lookback)
	}

	// A writer open longer than tune.StragglerSpan is left to the looks
	// for stragglers.
	claim([]int64{9})
	opened := clk.Now()
	for clk.Now().Sub(opened) <= tune.StragglerSpan {
		clk.Advance(time.Second)
		claim([]int64{9})
	}
	claim([]int64{})
	if p := r.plan(clk.Now(), scheduleClaim, 10); p.bounds.Lookback > time.Second {
		t.Fatalf("after a writer open %s ended: lookback %s, want narrow", clk.Now().Sub(opened), p.bounds.Lookback)
	}
}

// A walk over the keys that took every head it could leaves keys waiting,
// but only until the claim policy leaves claims by key: a claim in
// schedule order finds the heads by itself, and once it has, no key is
// said to wait. (Kept, it made an idle claimer claim back to back on an
// empty table: each claim in schedule order that found nothing asked for
// the walk that the policy no longer picked.)
func TestReachForgetsWaitingKeysOnceClaimsGoInScheduleOrder(t *testing.T) {
	clk, r, _ := afterAFullWalk()
	if !r.keysWait() {
		t.Fatal("after a walk that took every head it could: keys do not wait")
	}
	clk.Advance(time.Millisecond)
	p := r.plan(clk.Now(), scheduleClaim, 4)
	r.claimed(clk.Now(), scheduleClaim, p, dialects.ClaimReport{}, time.Millisecond, time.Time{})
	r.took(p, 0, false)
	if r.keysWait() {
		t.Fatal("after a claim in schedule order: keys still wait")
	}
}

// afterAFullWalk is a reach, not held, whose first claim by key walked the
// keys (seeing 1000, settled 900) and took every head it could.
func afterAFullWalk() (*clock.Fake, reach, claimPlan) {
	clk := newManualClock()
	r := newReach(tune)
	r.observe(dialects.Probe{})
	r.anchor = clk.Now()
	r.seen = mark{last: 1000, settled: 900}
	p := r.plan(clk.Now(), byKeyClaim, 4)
	r.claimed(clk.Now(), byKeyClaim, p, dialects.ClaimReport{}, 5*time.Millisecond, time.Time{})
	r.took(p, 500, true)
	return clk, r, p
}
