package actors

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// A held clock does not tick at all (a busy claimer is spared a wake-up
// every probe interval that it would ignore), and resumes at once when set.
func TestAHeldPaceStopsTicksAndResumesWhenSet(t *testing.T) {
	t.Parallel()
	b := newBackground(context.Background())
	defer b.stop()
	p := newPace(time.Millisecond)
	var ticks atomic.Int64
	b.everyPaced(p, func() { ticks.Add(1) })

	waitFor := func(what string, n int64) {
		t.Helper()
		for at := time.Now(); ticks.Load() < n; time.Sleep(time.Millisecond) {
			if time.Since(at) > 5*time.Second {
				t.Fatalf("%s: %d ticks after 5 s, want %d", what, ticks.Load(), n)
			}
		}
	}
	waitFor("a clock at 1 ms", 5)

	p.hold()
	// A tick already under way when hold came may still land.
	time.Sleep(20 * time.Millisecond)
	held := ticks.Load()
	time.Sleep(150 * time.Millisecond)
	if n := ticks.Load() - held; n != 0 {
		t.Fatalf("a held clock ticked %d times in 150 ms; want none", n)
	}

	p.set(true) // the idle pace: 25 ms
	waitFor("a held clock set to the idle pace", held+1)

	// Resuming at the base pace after a hold that skipped a tick ticks at
	// once, not an interval later; after a shorter hold it waits the
	// interval (no run-after-run for an actor faster than its interval).
	p.base = time.Hour
	p.hold()
	time.Sleep(40 * time.Millisecond)
	held = ticks.Load()
	p.set(false)
	time.Sleep(100 * time.Millisecond)
	if n := ticks.Load() - held; n != 0 {
		t.Fatalf("a clock held for 40 ms resumed at a base pace of an hour ticked %d times at once", n)
	}
	p.hold()
	p.heldAt.Store(time.Now().Add(-2 * time.Hour).UnixNano()) // held for longer than the base
	p.set(false)
	waitFor("a held clock resumed at a base pace of an hour after two hours", held+1)
	p.base = time.Millisecond
	p.hold()
	time.Sleep(40 * time.Millisecond)
	held = ticks.Load()
	p.set(false)
	waitFor("a held clock set to the base pace", held+20)
}

// Leaving the idle pace cuts the idle wait short: the next tick comes at
// the base interval, not after the rest of the idle one.
func TestLeavingTheIdlePaceTicksAtOnce(t *testing.T) {
	t.Parallel()
	b := newBackground(context.Background())
	defer b.stop()
	p := newPace(time.Millisecond)
	p.idle = time.Hour
	p.set(true)
	var ticks atomic.Int64
	b.everyPaced(p, func() { ticks.Add(1) })
	time.Sleep(20 * time.Millisecond)
	if n := ticks.Load(); n > 1 {
		t.Fatalf("a clock at an idle pace of an hour ticked %d times in 20 ms", n)
	}
	p.set(false)
	for at := time.Now(); ticks.Load() < 3; time.Sleep(time.Millisecond) {
		if time.Since(at) > 5*time.Second {
			t.Fatal("leaving the idle pace did not bring the ticks back within 5 s")
		}
	}
}
