package clock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/clock"
)

var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestFakeFiresTimersInDeadlineOrderEachAtItsTime(t *testing.T) {
	c := clock.NewFake(start)
	var got []string
	var at []time.Duration
	note := func(name string) func() {
		return func() { got = append(got, name); at = append(at, c.Now().Sub(start)) }
	}
	c.AfterFunc(30*time.Millisecond, note("c"))
	c.AfterFunc(10*time.Millisecond, note("a"))
	stopped := c.AfterFunc(15*time.Millisecond, note("never"))
	c.AfterFunc(20*time.Millisecond, note("b"))
	if !stopped.Stop() {
		t.Fatal("Stop of an armed timer reported it was not armed")
	}
	c.Advance(25 * time.Millisecond)
	if want := []string{"a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("after 25ms fired %v, want %v", got, want)
	}
	if want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}; !slices.Equal(at, want) {
		t.Fatalf("fired at %v, want %v", at, want)
	}
	if d, ok := c.Next(); !ok || d != 5*time.Millisecond {
		t.Fatalf("next timer in %v (%v), want 5ms", d, ok)
	}
	c.Advance(time.Second)
	if want := []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("fired %v, want %v", got, want)
	}
	if c.Armed() != 0 {
		t.Fatalf("%d timers still armed", c.Armed())
	}
}

func TestFakeTimerChannelAndReset(t *testing.T) {
	c := clock.NewFake(start)
	tm := c.NewTimer(time.Second)
	c.Advance(999 * time.Millisecond)
	select {
	case <-tm.C():
		t.Fatal("fired early")
	default:
	}
	tm.Reset(2 * time.Second) // from now: fires at 2.999s
	c.Advance(time.Second)
	select {
	case <-tm.C():
		t.Fatal("a reset timer fired at its old deadline")
	default:
	}
	c.Advance(time.Second)
	select {
	case v := <-tm.C():
		if want := start.Add(2999 * time.Millisecond); !v.Equal(want) {
			t.Fatalf("fired with %v, want %v", v, want)
		}
	default:
		t.Fatal("did not fire at its new deadline")
	}
}

func TestSleepEndsWithTheContextOrTheWait(t *testing.T) {
	c := clock.NewFake(start)
	done := make(chan bool)
	go func() { done <- clock.Sleep(context.Background(), c, time.Minute) }()
	if !c.WaitArmed(5 * time.Second) {
		t.Fatal("Sleep armed no timer")
	}
	c.Advance(time.Minute)
	if !<-done {
		t.Fatal("Sleep said the wait did not pass")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if clock.Sleep(ctx, clock.Wall{}, time.Hour) {
		t.Fatal("Sleep with an ended context said the wait passed")
	}
	if clock.Since(c, start) != time.Minute {
		t.Fatalf("Since = %v", clock.Since(c, start))
	}
}
