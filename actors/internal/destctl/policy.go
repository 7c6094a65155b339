package destctl

import "time"

// Policy is how the engine paces and guards one destination (the
// destination's rateLimit, maxConcurrency and circuitBreaker keys). The
// zero policy limits nothing and has no breaker.
type Policy struct {
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

// Status is one destination as this replica sees it: for the
// admin API, the page and the metrics.
type Status struct {
	Name   string
	Policy Policy
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
