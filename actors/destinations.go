package actors

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"
)

// DestinationPolicy is how the engine paces and guards one destination (the
// destination's rateLimit, maxConcurrency and circuitBreaker keys). The
// zero policy limits nothing and has no breaker.
type DestinationPolicy struct {
	// RatePerSecond bounds the rows this replica sends the destination per
	// second (0: no bound); Burst is how many may go at once after a quiet
	// spell (the size of the token bucket; 0: a second's worth).
	RatePerSecond float64
	Burst         int
	// MaxConcurrency bounds the Publish calls (requests, produce calls) to
	// the destination in flight at once on this replica (0: no bound).
	MaxConcurrency int
	CircuitBreaker CircuitBreaker
}

// CircuitBreaker configures a destination's circuit breaker (circuit.go):
// the circuit opens when every attempt failed for Window, with at least
// MinAttempts failed attempts; while open, one probe goes out per
// ProbeInterval. A zero Window turns the breaker off.
type CircuitBreaker struct {
	Window        time.Duration
	MinAttempts   int
	ProbeInterval time.Duration
}

// DestinationStatus is one destination as this replica sees it: for the
// admin API, the page and the metrics.
type DestinationStatus struct {
	Name   string
	Policy DestinationPolicy
	// Paused, with its reason and when it was paused (database clock), as
	// this replica last read it.
	Paused      bool
	PauseReason string
	PausedSince time.Time
	// CircuitOpen, since CircuitOpenedAt, with the last failure seen
	// (redacted and cut); CircuitOpened and Probes count the openings and
	// the probes since the replica started.
	CircuitOpen     bool
	CircuitOpenedAt time.Time
	CircuitError    string
	CircuitOpened   int64
	Probes          int64
	// Deferred counts the rows deferred since the replica started, by
	// reason: "paused", "circuit", "throttled".
	Deferred map[string]int64
	// Waiting is the rows waiting for a permit of the flow control now (in
	// deliveries, behind them in key actors, and parked in the pool),
	// Publishing the Publish calls that hold one; Throttled is the time
	// deliveries spent waiting for permits, in total.
	Waiting, Publishing int64
	Throttled           time.Duration
}

// Destinations describes every destination, in name order.
func (e *Engine) Destinations() []DestinationStatus {
	describe := outcomePolicy{maxErrorBytes: e.opts.MaxErrorBytes, redact: e.opts.Redact}.lastError
	out := make([]DestinationStatus, 0, len(e.sinks))
	for _, name := range slices.Sorted(maps.Keys(e.sinks)) {
		out = append(out, e.sinks[name].status(describe))
	}
	return out
}

func (h *sinkHandle) status(describe func(error) string) DestinationStatus {
	p, c := h.hold.view(), h.health.view()
	st := DestinationStatus{
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
	for _, r := range []holdReason{heldPaused, heldCircuit, heldThrottled} {
		st.Deferred[r.String()] = h.deferred[r].Load()
	}
	if f := h.flow; f != nil {
		st.Waiting, st.Publishing, st.Throttled = f.holding(), f.publishing.Load(), time.Duration(f.waitedNs.Load())
	}
	return st
}

// DeferReasons are the reasons a row is deferred, as DestinationStatus
// counts them.
var DeferReasons = []string{heldPaused.String(), heldCircuit.String(), heldThrottled.String()}

// replicaName names this process for the circuits it reports: its host,
// its process id, and a random part (a restarted process is another
// replica).
func replicaName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}
