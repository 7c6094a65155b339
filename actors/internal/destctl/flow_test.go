package destctl

import (
	"context"
	"errors"
	"github.com/queuebox/queuebox/internal/clock"
	"testing"
	"time"
)

func TestFlowRoomAndBatches(t *testing.T) {
	if NewFlow(Policy{}, 1000, clock.Wall{}) != nil {
		t.Fatal("a policy without limits has a flow control")
	}
	f := NewFlow(Policy{RatePerSecond: 50, Burst: 10}, 1000, clock.Wall{})
	if got := f.BatchLimit(500); got != 10 {
		t.Errorf("a batch under a bucket of 10: %d rows", got)
	}
	// Rows wait for their turn in memory up to half the credit, however
	// slow the flow: a smaller room defers rows that could wait.
	for _, p := range []Policy{{RatePerSecond: 50, Burst: 10}, {RatePerSecond: 2, MaxConcurrency: 1}, {MaxConcurrency: 4}, {RatePerSecond: 5000}} {
		if got := NewFlow(p, 1000, clock.Wall{}).Room(8); got != 500 {
			t.Errorf("room of %+v with a credit of 1000: %d, want half the credit (500)", p, got)
		}
	}
	if got := NewFlow(Policy{MaxConcurrency: 4}, 10, clock.Wall{}).Room(8); got != 8 {
		t.Errorf("room with a credit of 10 and batches of 8: %d, want a batch", got)
	}
}

// Until a Publish has been measured, a concurrency limit does not slow the
// pace of a rate limit: deferred rows follow the rate. Measured, the
// slower of the two sets the pace.
func TestFlowPace(t *testing.T) {
	f := NewFlow(Policy{RatePerSecond: 50, Burst: 50, MaxConcurrency: 8}, 1000, clock.Wall{})
	if got := f.Pace(1); got != 50 {
		t.Errorf("50 a second and 8 at once, nothing measured: a pace of %v rows a second, want 50", got)
	}
	f.NoteTook(time.Millisecond)
	if got := f.Pace(1); got != 50 {
		t.Errorf("8 at once at 1 ms each under 50 a second: a pace of %v, want 50", got)
	}
	slow := NewFlow(Policy{RatePerSecond: 50, MaxConcurrency: 8}, 1000, clock.Wall{})
	slow.NoteTook(time.Second)
	if got := slow.Pace(1); got != 8 {
		t.Errorf("8 at once at 1 s each under 50 a second: a pace of %v, want 8", got)
	}
	if got := NewFlow(Policy{MaxConcurrency: 4}, 1000, clock.Wall{}).Pace(2); got != 8 {
		t.Errorf("4 at once of 2 rows, nothing measured: a pace of %v, want a round a second (8)", got)
	}
}

// Deferred rows are spread at the flow's pace after the rows that wait: a
// backlog comes back about when the flow can take it.
func TestFlowDeferralsFollowThePace(t *testing.T) {
	f := NewFlow(Policy{RatePerSecond: 10, Burst: 1}, 1000, clock.Wall{})
	f.Enter(20) // two seconds of rows wait
	now := time.Now()
	first := f.Deferral(now, 1, 1)
	if first < 1900*time.Millisecond || first > 2100*time.Millisecond {
		t.Fatalf("the first deferral: %v, want about 2 s (20 rows waiting at 10 a second)", first)
	}
	prev := first
	for range 9 {
		d := f.Deferral(now, 1, 1)
		if step := d - prev; step < 90*time.Millisecond || step > 110*time.Millisecond {
			t.Fatalf("deferrals %v then %v: want one row's share (100 ms) apart", prev, d)
		}
		prev = d
	}
}

func TestFlowAcquire(t *testing.T) {
	f := NewFlow(Policy{MaxConcurrency: 1}, 1000, clock.Wall{})
	f.Enter(1)
	release, err := f.Acquire(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if f.waiting.Load() != 0 || f.publishing.Load() != 1 {
		t.Fatalf("waiting %d, publishing %d after the first acquire", f.waiting.Load(), f.publishing.Load())
	}
	// The only slot is taken: a second delivery waits, until the
	// destination is paused.
	f.Enter(1)
	got := make(chan error, 1)
	go func() {
		_, err := f.Acquire(context.Background(), 1)
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a second Publish got a slot of one: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	f.Interrupt()
	if err := <-got; !errors.Is(err, ErrHeld) {
		t.Fatalf("a pause ended the wait with %v, want ErrHeld", err)
	}
	release()
	if f.waiting.Load() != 0 || f.publishing.Load() != 0 {
		t.Fatalf("waiting %d, publishing %d at the end", f.waiting.Load(), f.publishing.Load())
	}
	// A lost claim ends a wait too.
	ctx, cancel := context.WithCancel(context.Background())
	hold, _ := f.Acquire(context.Background(), 1)
	go cancel()
	if _, err := f.Acquire(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait: %v", err)
	}
	hold()
}
