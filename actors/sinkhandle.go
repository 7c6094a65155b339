package actors

import (
	"sync/atomic"
	"time"

	"github.com/queuebox/queuebox/internal/clock"
	"github.com/queuebox/queuebox/sinks"
)

// sinkHandle is one destination as deliveries see it: its current sink
// (the sink actor sets it when it builds the sink; deliveries read it
// without locks), and what decides whether a delivery to it may start now
// (admit): whether an operator paused it (hold, set by the destination
// watch), its circuit breaker (health, circuit.go), and its flow control
// (flow.go). A delivery that may not start is deferred: its rows go back to
// pending for a while, with no attempt counted.
type sinkHandle struct {
	name   string
	cur    atomic.Pointer[sinkBox]
	policy DestinationPolicy
	// health follows the outcomes of the Publish calls: the log lines of
	// an outage and a recovery, and the circuit breaker (circuit.go).
	health health
	// hold is whether the destination is paused (destwatch.go).
	hold hold
	// flow is the rate limit and concurrency limit; nil when neither is
	// set.
	flow *flow
	// deferred counts the rows deferred, per reason.
	deferred [holdReasons]atomic.Int64
	// clock is the engine's; origin, when the handle was built, is where
	// the Publish times that health compares count from.
	clock  clock.Clock
	origin time.Time
}

type sinkBox struct{ s sinks.Sink }

// newSinkHandle builds the handle of a destination with its policy;
// maxInFlight bounds the rows its flow control lets wait (flow.go).
func newSinkHandle(name string, p DestinationPolicy, maxInFlight int, c clock.Clock) *sinkHandle {
	h := &sinkHandle{name: name, policy: p, clock: c, origin: c.Now()}
	h.health.breaker = p.CircuitBreaker
	h.flow = newFlow(p, maxInFlight, c)
	return h
}

func (h *sinkHandle) set(s sinks.Sink) { h.cur.Store(&sinkBox{s}) }

func (h *sinkHandle) get() sinks.Sink {
	if b := h.cur.Load(); b != nil {
		return b.s
	}
	return nil
}

// maxBatch is how many rows may go in one Publish: the sink's ordered batch
// when it keeps order within one, else 1; with a rate limit, no more than
// its burst (a batch takes one token per row, at once).
func (h *sinkHandle) maxBatch() int {
	n := 1
	if b, ok := h.get().(sinks.OrderedBatcher); ok {
		n = max(1, b.MaxOrderedBatch())
	}
	if h.flow != nil {
		n = h.flow.batchLimit(n)
	}
	return n
}

// holdReason says why a delivery may not start now.
type holdReason uint8

const (
	notHeld holdReason = iota
	// heldPaused: an operator paused the destination.
	heldPaused
	// heldCircuit: its circuit is open and no probe is due.
	heldCircuit
	// heldThrottled: as many rows as its flow control lets wait already
	// wait for a permit.
	heldThrottled
	holdReasons
)

func (r holdReason) String() string {
	return [...]string{"", "paused", "circuit", "throttled"}[r]
}

// admission is what admit decided for a delivery about to start.
type admission struct {
	// held says why it may not start (notHeld: it may); its rows are
	// deferred for delay.
	held  holdReason
	delay time.Duration
	// probe: the circuit is open and this delivery is its probe; it
	// carries one row.
	probe bool
}

// admit decides whether a delivery to the destination may start now: not
// while it is paused, nor while its circuit is open (unless this is the
// probe), nor while its flow control has as many rows waiting for a permit
// as it lets wait. run is how many rows come back with the delivery's
// first row if it is deferred (a key's run: the rows behind it go back to
// pending too), own how many rows the asking actor holds in the flow
// already.
func (h *sinkHandle) admit(now time.Time, run, own int) admission {
	if r := h.hold.reason(); r != notHeld {
		return admission{held: r, delay: h.hold.delay(now)}
	}
	open, probe := h.health.admit(now.Sub(h.origin))
	if open && !probe {
		return admission{held: heldCircuit, delay: h.health.delay(now)}
	}
	if h.flow != nil && h.flow.full(h.maxBatch(), own) {
		if probe {
			h.health.probeAbandoned()
		}
		return admission{held: heldThrottled, delay: h.flow.deferral(now, run, h.maxBatch())}
	}
	return admission{probe: probe}
}

// heldNow says whether a delivery that waited for its permits must not
// start after all: the destination was paused, or (for a delivery that is
// not the probe) its circuit opened, meanwhile.
func (h *sinkHandle) heldNow(now time.Time, probe bool) (holdReason, time.Duration) {
	if r := h.hold.reason(); r != notHeld {
		return r, h.hold.delay(now)
	}
	if !probe && h.health.isOpen() {
		return heldCircuit, h.health.delay(now)
	}
	return notHeld, 0
}

// closeSinks closes every sink that was built.
func closeSinks(handles map[string]*sinkHandle) {
	for _, h := range handles {
		if s := h.get(); s != nil {
			_ = s.Close()
		}
	}
}
