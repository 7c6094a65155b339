package destctl

import (
	"sync/atomic"
	"time"

	"github.com/queuebox/queuebox/internal/clock"
	"github.com/queuebox/queuebox/sinks"
)

// Handle is one destination as deliveries see it: its current sink
// (the sink actor sets it when it builds the sink; deliveries read it
// without locks), and what decides whether a delivery to it may start now
// (admit): whether an operator paused it (hold, set by the destination
// watch), its circuit breaker (health, circuit.go), and its flow control
// (flow.go). A delivery that may not start is deferred: its rows go back to
// pending for a while, with no attempt counted.
type Handle struct {
	name   string
	cur    atomic.Pointer[sinkBox]
	policy Policy
	// health follows the outcomes of the Publish calls: the log lines of
	// an outage and a recovery, and the circuit breaker (circuit.go).
	health health
	// hold is whether the destination is paused (destwatch.go).
	hold hold
	// flow is the rate limit and concurrency limit; nil when neither is
	// set.
	flow *Flow
	// deferred counts the rows deferred, per reason.
	deferred [HoldReasons]atomic.Int64
	// clock is the engine's; origin, when the handle was built, is where
	// the Publish times that health compares count from.
	clock  clock.Clock
	origin time.Time
}

type sinkBox struct{ s sinks.Sink }

// NewHandle builds the handle of a destination with its policy;
// maxInFlight bounds the rows its flow control lets wait (flow.go).
func NewHandle(name string, p Policy, maxInFlight int, c clock.Clock) *Handle {
	h := &Handle{name: name, policy: p, clock: c, origin: c.Now()}
	h.health.breaker = p.CircuitBreaker
	h.flow = NewFlow(p, maxInFlight, c)
	return h
}

func (h *Handle) Set(s sinks.Sink) { h.cur.Store(&sinkBox{s}) }

func (h *Handle) Sink() sinks.Sink {
	if b := h.cur.Load(); b != nil {
		return b.s
	}
	return nil
}

// maxBatch is how many rows may go in one Publish: the sink's ordered batch
// when it keeps order within one, else 1; with a rate limit, no more than
// its burst (a batch takes one token per row, at once).
func (h *Handle) MaxBatch() int {
	n := 1
	if b, ok := h.Sink().(sinks.OrderedBatcher); ok {
		n = max(1, b.MaxOrderedBatch())
	}
	if h.flow != nil {
		n = h.flow.BatchLimit(n)
	}
	return n
}

// HoldReason says why a delivery may not start now.
type HoldReason uint8

const (
	NotHeld HoldReason = iota
	// HeldPaused: an operator paused the destination.
	HeldPaused
	// HeldCircuit: its circuit is open and no probe is due.
	HeldCircuit
	// HeldThrottled: as many rows as its flow control lets wait already
	// wait for a permit.
	HeldThrottled
	HoldReasons
)

func (r HoldReason) String() string {
	return [...]string{"", "paused", "circuit", "throttled"}[r]
}

// Admission is what admit decided for a delivery about to start.
type Admission struct {
	// Held says why it may not start (NotHeld: it may); its rows are
	// deferred for Delay.
	Held  HoldReason
	Delay time.Duration
	// Probe: the circuit is open and this delivery is its probe; it
	// carries one row.
	Probe bool
}

// admit decides whether a delivery to the destination may start now: not
// while it is paused, nor while its circuit is open (unless this is the
// probe), nor while its flow control has as many rows waiting for a permit
// as it lets wait. run is how many rows come back with the delivery's
// first row if it is deferred (a key's run: the rows behind it go back to
// pending too), own how many rows the asking actor holds in the Flow
// already.
func (h *Handle) Admit(now time.Time, run, own int) Admission {
	if r := h.hold.reason(); r != NotHeld {
		return Admission{Held: r, Delay: h.hold.delay(now)}
	}
	open, probe := h.health.admit(now.Sub(h.origin))
	if open && !probe {
		return Admission{Held: HeldCircuit, Delay: h.health.delay(now)}
	}
	if h.flow != nil && h.flow.Full(h.MaxBatch(), own) {
		if probe {
			h.health.probeAbandoned()
		}
		return Admission{Held: HeldThrottled, Delay: h.flow.Deferral(now, run, h.MaxBatch())}
	}
	return Admission{Probe: probe}
}

// heldNow says whether a delivery that waited for its permits must not
// start after all: the destination was paused, or (for a delivery that is
// not the probe) its circuit opened, meanwhile.
func (h *Handle) HeldNow(now time.Time, probe bool) (HoldReason, time.Duration) {
	if r := h.hold.reason(); r != NotHeld {
		return r, h.hold.delay(now)
	}
	if !probe && h.health.isOpen() {
		return HeldCircuit, h.health.delay(now)
	}
	return NotHeld, 0
}

// CloseSinks closes every sink that was built.
func CloseSinks(handles map[string]*Handle) {
	for _, h := range handles {
		if s := h.Sink(); s != nil {
			_ = s.Close()
		}
	}
}

// Status describes the destination as this replica sees it; describe words
// an error as last_error would be.
func (h *Handle) Status(describe func(error) string) Status {
	p, c := h.hold.view(), h.health.view()
	st := Status{
		Name: h.name, Policy: h.policy,
		Paused: p.paused, PauseReason: p.reason, PausedSince: p.since,
		CircuitOpen: c.open, CircuitOpened: c.opened, Probes: c.probes,
		Deferred: map[string]int64{},
	}
	if c.open {
		st.CircuitOpenedAt = c.openedAt
		if c.lastErr != nil {
			st.CircuitError = describe(c.lastErr)
		}
	}
	for _, r := range []HoldReason{HeldPaused, HeldCircuit, HeldThrottled} {
		st.Deferred[r.String()] = h.deferred[r].Load()
	}
	if f := h.flow; f != nil {
		st.Waiting, st.Publishing, st.Throttled = f.Holding(), f.publishing.Load(), time.Duration(f.waitedNs.Load())
	}
	return st
}

// DeferReasons are the reasons a row is deferred, as Status
// counts them.
var DeferReasons = []string{HeldPaused.String(), HeldCircuit.String(), HeldThrottled.String()}

// Name is the destination's name.
func (h *Handle) Name() string { return h.name }

// Flow is the destination's flow control (nil: it has none).
func (h *Handle) Flow() *Flow { return h.flow }

// Clock is the engine's clock; Origin is where the times NoteHealth takes
// count from.
func (h *Handle) Clock() clock.Clock { return h.clock }

// Origin is where the times NoteHealth takes count from.
func (h *Handle) Origin() time.Time { return h.origin }

// ProbeAbandoned says the delivery that Admit made the circuit's probe did
// not go out: the next may be the probe.
func (h *Handle) ProbeAbandoned() { h.health.probeAbandoned() }

// Deferred counts a row deferred for why.
func (h *Handle) Deferred(why HoldReason) { h.deferred[why].Add(1) }
