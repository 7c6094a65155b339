package destctl

import (
	"context"
	"errors"
	"github.com/queuebox/queuebox/internal/clock"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// hold is whether an operator paused a destination, as this replica last
// read it from the database (dialects.Destinations).
type hold struct {
	paused atomic.Bool
	mu     sync.Mutex
	why    string
	since  time.Time // when it was paused (database clock)
	seen   time.Time // when this replica saw it paused (wall clock)
	// by are the watches that read it paused: engines of several outboxes
	// share a destination, each watching its own database, and the
	// destination is held while any of them says so.
	by map[string]bool
	// watching are the watches that read it, each since its first read
	// and until its engine stops.
	watching map[string]bool
}

// reason says whether the destination is held by a pause.
func (h *hold) reason() HoldReason {
	if h.paused.Load() {
		return HeldPaused
	}
	return NotHeld
}

// delay is how long a row of a paused destination waits (holdDelay).
func (h *hold) delay(now time.Time) time.Duration {
	h.mu.Lock()
	seen := h.seen
	h.mu.Unlock()
	return holdDelay(now.Sub(seen))
}

// forget drops what source read: its engine stopped.
func (h *hold) forget(source string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.watching, source)
	h.drop(source)
}

// stepAside drops the pause that source read last, when other watches
// read the destination too: source's database has not answered for a
// while, so its engine claims nothing, and its last word would only hold
// the other outboxes' rows, even after a resume that could not reach it.
// Its next read counts again. A watch alone keeps its last word.
func (h *hold) stepAside(source string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.watching) > 1 {
		h.drop(source)
	}
}

// drop removes source's pause; h.mu is held.
func (h *hold) drop(source string) {
	if !h.by[source] {
		return
	}
	delete(h.by, source)
	if len(h.by) == 0 {
		h.paused.Store(false)
		h.seen, h.why, h.since = time.Time{}, "", time.Time{}
	}
}

// pauseView is the pause as this replica knows it.
type pauseView struct {
	paused      bool
	reason      string
	since, seen time.Time
}

func (h *hold) view() pauseView {
	h.mu.Lock()
	defer h.mu.Unlock()
	return pauseView{paused: h.paused.Load(), reason: h.why, since: h.since, seen: h.seen}
}

// set records a state read from the database, and reports whether the
// destination was paused or resumed by it.
func (h *hold) set(source string, st dialects.DestinationState, now time.Time) (changed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	was := h.paused.Load()
	if h.by == nil {
		h.by, h.watching = map[string]bool{}, map[string]bool{}
	}
	h.watching[source] = true
	if st.Paused {
		h.by[source] = true
	} else {
		delete(h.by, source)
	}
	paused := len(h.by) > 0
	if st.Paused || !paused {
		h.why, h.since = st.Reason, st.Since
	}
	if paused && !was {
		h.seen = now
	}
	if !paused {
		h.seen = time.Time{}
	}
	h.paused.Store(paused)
	return paused != was
}

// Watch reads the destinations' pauses from the database and
// holds or releases the handles, so that a pause made on one replica, or
// with the command line, holds on every replica within about a second:
// every watchEvery, or, while logical wake-ups bring the changes of the
// destinations table (dialects.WakeupStatus.Pauses), when one comes and
// every pausesSafetyRead, so that an idle relay does not ask twice a
// second. It also reports this replica's open circuits for
// operators (refreshed every circuitRefresh, removed when they close and
// when the engine stops). It runs in the engine's background and sends to
// no actor.
type Watch struct {
	Dialect dialects.Destinations
	Handles map[string]*Handle
	Replica string
	// Describe words a circuit's last error as last_error would be:
	// redacted and cut.
	Describe func(error) string
	Log      *slog.Logger
	// BG ends when the engine stops.
	BG context.Context
	// Wakeups, when set, may nudge on pauses (nil: none).
	Wakeups dialects.Wakeups
	Clock   clock.Clock
	// Source tells this watch's reads from those of the other engines'
	// watches over the same handles (each reads its own database).
	Source string

	// reported: the circuits reported open, and when last.
	reported map[string]time.Time
	// failing: the last read of the pauses failed, reportFailing the last
	// report of a circuit (each logged once until one succeeds).
	failing, reportFailing bool
	// failingSince is when the reads of the pauses began to fail.
	failingSince time.Time
}

const (
	watchEvery = 500 * time.Millisecond
	// pausesSafetyRead is how often the pauses are read while their
	// changes come as nudges: in case one is lost.
	pausesSafetyRead = 30 * time.Second
	// stepAsideAfter is how long the reads of the pauses fail before a
	// watch's last word stops holding the destinations it shares with
	// other engines (hold.stepAside).
	stepAsideAfter = time.Minute
	circuitRefresh = 10 * time.Second
	// CircuitFresh is how recently a replica must have refreshed a circuit
	// for operators to be shown it open: a replica that stopped without
	// removing its circuits is forgotten after this.
	CircuitFresh = 3 * circuitRefresh
)

// first reads the pauses before the engine claims anything, so that a
// replica that starts while a destination is paused sends it nothing. It
// waits at most firstReadTimeout: a replica that cannot read them (the
// database is away) starts as if none were paused, and the loop reads them
// as soon as it can.
func (w *Watch) First() {
	w.reported = map[string]time.Time{}
	w.readPauses(firstReadTimeout)
}

const firstReadTimeout = 2 * time.Second

// loop reads the pauses and reports the circuits every watchEvery until the
// engine stops.
func (w *Watch) Loop() {
	t := w.Clock.NewTimer(watchEvery)
	defer t.Stop()
	var nudges <-chan struct{}
	if w.Wakeups != nil {
		nudges = w.Wakeups.Pauses()
	}
	lastRead, recheck := w.Clock.Now(), false
	for {
		nudged := false
		select {
		case <-w.BG.Done():
			// The engine stops: its circuits are no one's any more, and
			// its reading of the pauses no longer holds the handles that
			// other engines share.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			w.reportCircuits(ctx, true)
			cancel()
			for _, h := range w.Handles {
				h.hold.forget(w.Source)
			}
			return
		case <-t.C():
			t.Reset(watchEvery)
		case <-nudges:
			nudged = true
		}
		now := w.Clock.Now()
		if nudged || recheck || !w.hearsPauses() || now.Sub(lastRead) >= pausesSafetyRead {
			w.readPauses(5 * time.Second)
			lastRead = now
			// A nudge can come an instant before its transaction is
			// visible to other sessions: read once more at the next tick.
			recheck = nudged
		}
		w.reportCircuits(w.BG, false)
	}
}

// hearsPauses says whether pauses come as nudges now.
func (w *Watch) hearsPauses() bool {
	return w.Wakeups != nil && w.Wakeups.Status().Pauses
}

func (w *Watch) readPauses(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(w.BG, timeout)
	states, err := w.Dialect.DestinationStates(ctx)
	cancel()
	if err != nil {
		if w.BG.Err() != nil {
			return
		}
		if now := w.Clock.Now(); !w.failing {
			w.failingSince = now
		} else if now.Sub(w.failingSince) >= stepAsideAfter {
			for _, h := range w.Handles {
				h.hold.stepAside(w.Source)
			}
		}
		if !w.failing {
			w.failing = true
			msg := "cannot read which destinations are paused; going on with what was read last"
			if errors.Is(err, dialects.ErrNoTable) {
				msg = "cannot read which destinations are paused: the schema is older than this release (run `queuebox migrate up`); no destination is held meanwhile"
			}
			w.Log.Error(msg, "error", err)
		}
		return
	}
	if w.failing {
		w.failing = false
		w.Log.Info("reading which destinations are paused again")
	}
	byName := make(map[string]dialects.DestinationState, len(states))
	for _, st := range states {
		byName[st.Name] = st
	}
	now := w.Clock.Now()
	for name, h := range w.Handles {
		st := byName[name]
		st.Name = name
		if h.hold.set(w.Source, st, now) {
			if st.Paused {
				if h.flow != nil {
					h.flow.Interrupt()
				}
				w.Log.Info("destination paused: its rows wait, with no attempt counted, until it is resumed",
					"destination", name, "reason", st.Reason, "pausedAt", st.Since)
			} else {
				w.Log.Info("destination resumed: its rows flow again", "destination", name)
			}
		}
	}
}

// reportCircuits writes which circuits this replica holds open, and removes
// those it closed (all of them when stopping).
func (w *Watch) reportCircuits(ctx context.Context, stopping bool) {
	now := w.Clock.Now()
	var closed []string
	for _, name := range slices.Sorted(maps.Keys(w.Handles)) {
		c := w.Handles[name].health.view()
		last, reported := w.reported[name]
		switch {
		case c.open && !stopping:
			if reported && now.Sub(last) < circuitRefresh {
				continue
			}
			lastErr := ""
			if c.lastErr != nil {
				lastErr = w.Describe(c.lastErr)
			}
			if err := w.Dialect.DestinationCircuitOpen(ctx, dialects.OpenCircuit{Destination: name, Replica: w.Replica, LastError: lastErr}); err != nil {
				w.reportFailed(err)
				continue // said again at the next look
			}
			w.reportFailing = false
			w.reported[name] = now
		case reported:
			closed = append(closed, name)
		}
	}
	if len(closed) == 0 {
		return
	}
	if err := w.Dialect.DestinationCircuitsClosed(ctx, w.Replica, closed); err != nil {
		w.reportFailed(err)
		return
	}
	w.reportFailing = false
	for _, name := range closed {
		delete(w.reported, name)
	}
}

// reportFailed logs, once until a report works again, that the open
// circuits could not be written: operators see stale ones meanwhile (the
// circuits themselves work the same).
func (w *Watch) reportFailed(err error) {
	if w.reportFailing || w.BG.Err() != nil {
		return
	}
	w.reportFailing = true
	w.Log.Warn("cannot tell operators which circuits this replica holds open; `queuebox destinations list` may show them late", "error", err)
}
