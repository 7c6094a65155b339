package destctl

import (
	"context"
	"github.com/queuebox/queuebox/internal/clock"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
)

// countedStates counts the reads of the pauses.
type countedStates struct {
	dialects.Destinations
	reads atomic.Int64
}

func (c *countedStates) DestinationStates(ctx context.Context) ([]dialects.DestinationState, error) {
	c.reads.Add(1)
	return c.Destinations.DestinationStates(ctx)
}

// heardPauses is a wake-up source whose pauses come as nudges (or not).
type heardPauses struct {
	ch     chan struct{}
	hears  atomic.Bool
	status dialects.WakeupStatus
}

func (h *heardPauses) Outbox() <-chan struct{} { return nil }
func (h *heardPauses) Inbox() <-chan struct{}  { return nil }
func (h *heardPauses) Pauses() <-chan struct{} { return h.ch }
func (h *heardPauses) Status() dialects.WakeupStatus {
	st := h.status
	st.State, st.Pauses = dialects.WakeupsListening, h.hears.Load()
	return st
}

// While pauses come as nudges, the watch does not read them twice a
// second: it reads them when a nudge comes (and once more at the next
// tick, as a nudge may come before its transaction is visible), and the
// handle is held at once; without nudges it reads them at every tick. The
// watch runs on a fake clock: the test moves its ticks.
func TestThePausesAreReadWhenANudgeSaysSo(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 4)
	states := &countedStates{Destinations: d}
	w := &heardPauses{ch: make(chan struct{}, 1)}
	w.hears.Store(true)
	clk := clock.NewFake(time.Now())
	h := NewHandle("crm", Policy{}, 100, clk)
	ctx, cancel := context.WithCancel(context.Background())
	watch := &Watch{Dialect: states, Handles: map[string]*Handle{"crm": h}, Replica: "r1",
		Describe: func(err error) string { return err.Error() }, Log: slog.New(slog.DiscardHandler), BG: ctx, Wakeups: w, Clock: clk}
	watch.First()
	done := make(chan struct{})
	go func() { defer close(done); watch.Loop() }()
	t.Cleanup(func() { cancel(); <-done })
	// armed waits until the watch waits for its next tick: the last one
	// is handled.
	armed := func() {
		t.Helper()
		testkit.Eventually(t, "the watch waits for its next tick", 0, testkit.True(func() bool { return clk.Armed() > 0 }))
	}
	tick := func() {
		t.Helper()
		armed()
		clk.Advance(watchEvery)
	}

	for range 3 {
		tick()
	}
	armed()
	if n := states.reads.Load(); n != 1 {
		t.Fatalf("%d reads of the pauses in three ticks while they come as nudges, want the first one only", n)
	}
	if _, _, err := d.DestinationPause(context.Background(), "crm", "upgrade"); err != nil {
		t.Fatal(err)
	}
	w.ch <- struct{}{}
	testkit.Eventually(t, "the nudge holds the destination", 0, testkit.True(func() bool { return h.hold.reason() == HeldPaused }))
	tick()
	testkit.Eventually(t, "a second read at the tick after the nudge", 0, testkit.True(func() bool { return states.reads.Load() == 3 }))

	w.hears.Store(false)
	if _, _, err := d.DestinationResume(context.Background(), "crm"); err != nil {
		t.Fatal(err)
	}
	tick()
	testkit.Eventually(t, "without nudges, a tick reads the resumption", 0, testkit.True(func() bool { return h.hold.reason() == NotHeld }))
	reads := states.reads.Load()
	tick()
	tick()
	testkit.Eventually(t, "reads at every tick without nudges", 0, testkit.True(func() bool { return states.reads.Load() >= reads+2 }))
}
