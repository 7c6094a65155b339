package destctl

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/queuebox/queuebox/sinks"
)

// health follows whether a destination works, from the outcomes of its
// Publish calls, on this replica: for the log (one line when its
// deliveries start failing, one when they succeed again), and for its
// circuit breaker.
//
// The breaker opens the circuit when every attempt has failed for
// Breaker.Window, with at least Breaker.MinAttempts failed attempts (rows)
// in that time: the destination is down, and retrying every row on its own
// backoff would only burn the rows' attempts until they go dead. While the
// circuit is open, the destination's rows are deferred (no attempt made or
// counted), and one delivery of one row, the probe, goes out per
// ProbeInterval, counted from the previous probe's answer. When the probe
// succeeds the circuit closes, and the rows flow again; when it fails, its
// row waits as the others do, its try not counted (the probe tests the
// destination, not the row). Each replica has its own breakers.
//
// An outage costs the rows time, not tries they cannot spare: a row's last
// try that fails while the destination is down (down: the circuit is open,
// or every attempt since the latest success failed, at least MinAttempts of
// them and at least two, so that the circuit opens once the window has
// passed) is not counted either, and the row waits for the circuit (see
// BreakerView and outcomePolicy.decide). The tries before the last count,
// and a destination that works for other rows is not down, so a row whose
// own fault is a retryable one still runs out of tries.
//
// Publishes overlap, and one that began earlier can reach the destination
// later (a new connection, a slow dial, a timeout), so an outcome is old
// news, and changes nothing, when its Publish began before the last change
// was seen, or before the latest Publish with the opposite outcome began.
// Times are since the handle's origin (Handle.origin).
type health struct {
	sync.Mutex
	breaker CircuitBreaker
	// down is set while the destination's deliveries fail (for the log);
	// changed is when that state last changed, and okBegan and failBegan
	// when the latest Publish that succeeded, and that failed, began.
	down                        bool
	changed, okBegan, failBegan time.Duration
	// streak counts the failed attempts since the latest success, and
	// streakBegan is when the first of their Publish calls began.
	streak      int
	streakBegan time.Duration
	lastErr     error
	// open: the circuit is open since openedAt (wall clock); nextProbe is
	// when a probe may go, probing that one is under way.
	open      bool
	openedAt  time.Time
	nextProbe time.Duration
	probing   bool
	// opened and probes count the openings and the probes sent.
	opened, probes int64
}

// admit reports whether the circuit is open, and if so whether this
// delivery is its probe (which it then becomes: one at a time, one per
// interval).
func (hs *health) admit(now time.Duration) (open, probe bool) {
	if hs.breaker.Window <= 0 {
		return false, false // no breaker (set once, at the start): no lock on the hot path
	}
	hs.Lock()
	defer hs.Unlock()
	if !hs.open {
		return false, false
	}
	if hs.probing || now < hs.nextProbe {
		return true, false
	}
	hs.probing, hs.nextProbe = true, now+hs.breaker.ProbeInterval
	hs.probes++
	return true, true
}

// probeAbandoned: the probe did not go out after all (the destination was
// paused or throttled, the replica drains); another may take its place.
func (hs *health) probeAbandoned() {
	hs.Lock()
	defer hs.Unlock()
	hs.probing = false
	hs.probes--
}

func (hs *health) isOpen() bool {
	if hs.breaker.Window <= 0 {
		return false
	}
	hs.Lock()
	defer hs.Unlock()
	return hs.open
}

// delay is how long a row deferred by the open circuit waits (see
// holdDelay).
func (hs *health) delay(now time.Time) time.Duration {
	hs.Lock()
	since := hs.openedAt
	hs.Unlock()
	return holdDelay(now.Sub(since))
}

// BreakerView says what the breaker makes of a failed delivery (probe: it
// was the circuit's probe), for the row's outcome: whether the destination
// is down, and how long a row whose failure is not counted waits (as long
// as the circuit holds rows while it is open; 0, its backoff, before).
func (h *Handle) BreakerView(probe bool, now time.Time) BreakerView {
	hs := &h.health
	if hs.breaker.Window <= 0 {
		return BreakerView{}
	}
	hs.Lock()
	// Two failures at least: one alone may be the row's own.
	open, since, down := hs.open, hs.openedAt, hs.open || hs.streak >= max(hs.breaker.MinAttempts, 2)
	hs.Unlock()
	b := BreakerView{Probe: probe, Down: down}
	if open {
		b.Wait = holdDelay(now.Sub(since))
	}
	return b
}

// BreakerView is what a destination's circuit breaker says of a failed
// delivery to it (circuit.go): whether the failure is the row's try at all.
// The zero value counts every failure, as for a destination without a
// breaker.
type BreakerView struct {
	// Probe: the delivery was the open circuit's probe. Its failure tells
	// that the destination is still down, nothing about the row.
	Probe bool
	// Down: the destination is down: its circuit is open, or every
	// request to it since the latest success failed, at least the
	// breaker's minimum of attempts.
	Down bool
	// Wait is how long the row of a failure that is not counted waits
	// while the circuit is open (as long as the circuit holds every row);
	// 0 when it is not open yet: the row waits the backoff a retry would.
	Wait time.Duration
}

// circuitView is what the circuit looks like now.
type circuitView struct {
	open           bool
	openedAt       time.Time
	lastErr        error
	opened, probes int64
}

func (hs *health) view() circuitView {
	hs.Lock()
	defer hs.Unlock()
	return circuitView{open: hs.open, openedAt: hs.openedAt, lastErr: hs.lastErr, opened: hs.opened, probes: hs.probes}
}

// noteHealth takes in the outcome of one Publish (its errors, one per row;
// when it began and ended) and logs a change between working and failing,
// and opens or closes the circuit. A failure that is the row's own fault (a
// permanent error) says nothing about the destination, and neither does a
// cancelled delivery. probe says the Publish was the circuit's probe.
func (h *Handle) NoteHealth(errs []error, began, ended time.Duration, probe bool, log *slog.Logger) {
	var failure error
	ok, failed := false, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok = true
		case sinks.IsPermanent(err) || errors.Is(err, context.Canceled):
		default:
			failure = err
			failed++
		}
	}
	hs := &h.health
	hs.Lock()
	defer hs.Unlock()
	if probe {
		// The next probe goes an interval after this one's answer, not
		// after its start: a destination that answers slowly is not sent
		// its probes back to back.
		hs.probing = false
		hs.nextProbe = max(hs.nextProbe, ended+hs.breaker.ProbeInterval)
	}
	if failure == nil && !ok {
		return
	}
	failing := failure != nil && !ok
	hs.breakerNote(h.name, failing, failed, failure, began, ended, h.origin.Add(ended), log)
	newer := hs.okBegan // the latest opposite outcome's Publish
	if failing {
		hs.failBegan = max(hs.failBegan, began)
	} else {
		hs.okBegan = max(hs.okBegan, began)
		newer = hs.failBegan
	}
	if failing == hs.down || began < hs.changed || began < newer {
		return
	}
	hs.down, hs.changed = failing, max(hs.changed, ended)
	if failing {
		log.Warn("destination failing; its deliveries are retried with backoff", "destination", h.name, "error", failure)
		return
	}
	log.Info("destination delivering again", "destination", h.name)
}

// breakerNote moves the breaker on one Publish's outcome (see health); it
// runs before noteHealth updates okBegan and failBegan, which it reads as
// the latest success and failure before this outcome.
// at is when the Publish ended, on the engine's clock.
func (hs *health) breakerNote(name string, failing bool, failed int, failure error, began, ended time.Duration, at time.Time, log *slog.Logger) {
	if hs.breaker.Window <= 0 {
		return
	}
	if !failing {
		// A success sent before the latest failure is old news; one sent
		// after it says the destination works.
		if began < hs.failBegan {
			return
		}
		hs.streak = 0
		if hs.open {
			hs.open = false
			log.Info("circuit closed: a delivery to the destination succeeded; its rows flow again",
				"destination", name, "openFor", at.Sub(hs.openedAt).Round(time.Millisecond))
		}
		return
	}
	if began < hs.okBegan {
		return // sent before the latest success: old news
	}
	if hs.streak == 0 {
		hs.streakBegan = began
	}
	hs.streak += failed
	hs.lastErr = failure
	if hs.open || hs.streak < hs.breaker.MinAttempts || ended-hs.streakBegan < hs.breaker.Window {
		return
	}
	hs.open, hs.openedAt, hs.nextProbe, hs.probing = true, at, ended+hs.breaker.ProbeInterval, false
	hs.opened++
	log.Warn("circuit open: every delivery to the destination failed; its rows wait, with no attempt counted, and one probe goes out per interval",
		"destination", name, "failingFor", (ended - hs.streakBegan).Round(time.Millisecond), "attempts", hs.streak,
		"probeInterval", hs.breaker.ProbeInterval, "error", failure)
}

// holdDelay is how long a row waits when its destination is held (paused,
// or its circuit open) since heldFor: one second at first, then as long as
// the hold has lasted, up to maxHoldDelay, spread by ±20% so that rows
// deferred together come back apart. A short pause costs little delay
// after the resume; a long one costs the database a claim per row only
// every half minute or so.
func holdDelay(heldFor time.Duration) time.Duration {
	d := min(max(heldFor, time.Second), maxHoldDelay)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// maxHoldDelay bounds holdDelay: after a long pause, the rows are delivered
// again within about this long after the resume.
const maxHoldDelay = 30 * time.Second
