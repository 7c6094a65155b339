package actors

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestFlowRoomAndBatches(t *testing.T) {
	if newFlow(DestinationPolicy{}, 1000) != nil {
		t.Fatal("a policy without limits has a flow control")
	}
	f := newFlow(DestinationPolicy{RatePerSecond: 50, Burst: 10}, 1000)
	if got := f.batchLimit(500); got != 10 {
		t.Errorf("a batch under a bucket of 10: %d rows", got)
	}
	if got := f.room(1); got != 100 {
		t.Errorf("room at 50 rows a second: %d, want two seconds' worth (100)", got)
	}
	if got := newFlow(DestinationPolicy{RatePerSecond: 5000}, 1000).room(1); got != 500 {
		t.Errorf("room at 5000 rows a second with a credit of 1000: %d, want half the credit", got)
	}
	if got := newFlow(DestinationPolicy{MaxConcurrency: 4}, 1000).room(8); got != 64 {
		t.Errorf("room for 4 Publish calls of 8 rows: %d, want two rounds (64)", got)
	}
}

// Deferred rows are spread at the flow's pace after the rows that wait: a
// backlog comes back about when the flow can take it.
func TestFlowDeferralsFollowThePace(t *testing.T) {
	f := newFlow(DestinationPolicy{RatePerSecond: 10, Burst: 1}, 1000)
	f.enter(20) // two seconds of rows wait
	now := time.Now()
	first := f.deferral(now, 1, 1)
	if first < 1900*time.Millisecond || first > 2100*time.Millisecond {
		t.Fatalf("the first deferral: %v, want about 2 s (20 rows waiting at 10 a second)", first)
	}
	prev := first
	for range 9 {
		d := f.deferral(now, 1, 1)
		if step := d - prev; step < 90*time.Millisecond || step > 110*time.Millisecond {
			t.Fatalf("deferrals %v then %v: want one row's share (100 ms) apart", prev, d)
		}
		prev = d
	}
}

func TestFlowAcquire(t *testing.T) {
	f := newFlow(DestinationPolicy{MaxConcurrency: 1}, 1000)
	f.enter(1)
	release, err := f.acquire(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if f.waiting.Load() != 0 || f.publishing.Load() != 1 {
		t.Fatalf("waiting %d, publishing %d after the first acquire", f.waiting.Load(), f.publishing.Load())
	}
	// The only slot is taken: a second delivery waits, until the
	// destination is paused.
	f.enter(1)
	got := make(chan error, 1)
	go func() {
		_, err := f.acquire(context.Background(), 1)
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a second Publish got a slot of one: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	f.interrupt()
	if err := <-got; !errors.Is(err, errHeld) {
		t.Fatalf("a pause ended the wait with %v, want errHeld", err)
	}
	release()
	if f.waiting.Load() != 0 || f.publishing.Load() != 0 {
		t.Fatalf("waiting %d, publishing %d at the end", f.waiting.Load(), f.publishing.Load())
	}
	// A lost claim ends a wait too.
	ctx, cancel := context.WithCancel(context.Background())
	hold, _ := f.acquire(context.Background(), 1)
	go cancel()
	if _, err := f.acquire(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait: %v", err)
	}
	hold()
}
