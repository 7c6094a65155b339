package actors

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testkit"
)

// pacedTicks runs a paced clock on a manual clock and counts its ticks.
type pacedTicks struct {
	clk   *manualClock
	p     *pace
	ticks atomic.Int64
}

func newPacedTicks(t *testing.T, base time.Duration) *pacedTicks {
	b := newBackground(context.Background())
	t.Cleanup(b.stop)
	pt := &pacedTicks{clk: newManualClock()}
	pt.p = newPace(base, pt.clk)
	b.everyPaced(pt.p, func() { pt.ticks.Add(1) })
	pt.settle(t, 0)
	return pt
}

// settle waits until the clock has ticked want times and armed its timer
// again, so that the next move of the manual clock counts from there.
func (pt *pacedTicks) settle(t *testing.T, want int64) {
	t.Helper()
	testkit.Eventually(t, "the tick", 0, func() error {
		if n := pt.ticks.Load(); n != want {
			return fmt.Errorf("%d ticks, want %d", n, want)
		}
		if armed := pt.clk.armed(); (pt.p.now.Load() != 0) != (armed == 1) {
			return fmt.Errorf("the timer is armed %d times at an interval of %d", armed, pt.p.now.Load())
		}
		return nil
	})
}

// step moves the clock by d and waits until the ticks reach want.
func (pt *pacedTicks) step(t *testing.T, d time.Duration, want int64) {
	t.Helper()
	pt.clk.advance(d)
	pt.settle(t, want)
}

// A held clock does not tick at all (a busy claimer is spared a wake-up
// every probe interval that it would ignore), and resumes when set: at
// once after a hold that skipped a tick, an interval later otherwise.
func TestAHeldPaceStopsTicksAndResumesWhenSet(t *testing.T) {
	t.Parallel()
	pt := newPacedTicks(t, 10*time.Millisecond)
	pt.step(t, 10*time.Millisecond, 1)
	pt.step(t, 10*time.Millisecond, 2)

	pt.p.hold()
	pt.settle(t, 2)
	pt.clk.advance(time.Hour)
	if n := pt.ticks.Load(); n != 2 {
		t.Fatalf("a held clock ticked %d times in an hour", n-2)
	}
	pt.p.set(false) // held for longer than the base: a tick at once
	pt.settle(t, 3)

	pt.p.hold()
	pt.settle(t, 3)
	pt.clk.advance(5 * time.Millisecond) // shorter than the base
	pt.p.set(false)
	pt.settle(t, 3)
	pt.step(t, 10*time.Millisecond, 4)
}

// The idle interval starts at idleProbe and doubles at each tick up to
// idleProbeMax; leaving it ticks at the base interval again at once.
func TestTheIdlePaceBacksOff(t *testing.T) {
	t.Parallel()
	pt := newPacedTicks(t, 2*time.Millisecond)
	pt.step(t, 2*time.Millisecond, 1)
	pt.p.set(true)
	pt.step(t, 2*time.Millisecond, 2) // the timer armed at the base fires first
	want := int64(2)
	for _, d := range []time.Duration{idleProbe, 2 * idleProbe, 4 * idleProbe, 8 * idleProbe, idleProbeMax, idleProbeMax} {
		pt.clk.advance(d - time.Millisecond)
		if n := pt.ticks.Load(); n != want {
			t.Fatalf("a tick before the idle interval of %s had passed", d)
		}
		want++
		pt.step(t, time.Millisecond, want)
		pt.p.set(true) // the actor says it is still idle
	}
	pt.p.set(false)
	if took := pt.nextTick(t); took > 4*time.Millisecond {
		t.Fatalf("leaving the idle pace, the next tick came %s later; want the base interval", took)
	}
}

// nextTick moves the clock a millisecond at a time until the clock ticks,
// and says how far it moved.
func (pt *pacedTicks) nextTick(t *testing.T) time.Duration {
	t.Helper()
	from, n := pt.clk.Now(), pt.ticks.Load()
	testkit.Eventually(t, "a tick", 0, func() error {
		if pt.ticks.Load() == n {
			pt.clk.advance(time.Millisecond)
			return fmt.Errorf("no tick yet")
		}
		return nil
	})
	return pt.clk.Now().Sub(from)
}

// With nudges from logical replication, an idle clock is a safety net:
// it ticks every idleListening.
func TestAListeningIdlePaceIsASafetyNet(t *testing.T) {
	t.Parallel()
	pt := newPacedTicks(t, 2*time.Millisecond)
	pt.p.setIdle(true)
	pt.p.set(true)
	pt.step(t, 2*time.Millisecond, 1) // armed at the base before going idle
	pt.clk.advance(idleListening - time.Millisecond)
	if n := pt.ticks.Load(); n != 1 {
		t.Fatalf("a listening idle clock ticked before %s", idleListening)
	}
	pt.step(t, time.Millisecond, 2)
	pt.p.setIdle(false) // the listener lost its connection: probe again
	if took := pt.nextTick(t); took > 2*idleProbe {
		t.Fatalf("after the listener stopped, the next tick came %s later, want about %s", took, idleProbe)
	}
}
