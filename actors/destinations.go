package actors

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/queuebox/queuebox/actors/internal/destctl"
	"maps"
	"os"
	"slices"
)

// The destinations' policies and status are destination control's
// (actors/internal/destctl); these names are the engine's API.
type (
	// DestinationPolicy is how the engine paces and guards one destination.
	DestinationPolicy = destctl.Policy
	// CircuitBreaker configures a destination's circuit breaker.
	CircuitBreaker = destctl.CircuitBreaker
	// DestinationStatus is one destination as this replica sees it.
	DestinationStatus = destctl.Status
)

// DeferReasons are the reasons a row is deferred, as DestinationStatus
// counts them.
var DeferReasons = destctl.DeferReasons

// CircuitFresh is how recently a replica must have refreshed a circuit it
// reported open for the circuit to count as open.
const CircuitFresh = destctl.CircuitFresh

// Destinations describes every destination, in name order.
func (e *Engine) Destinations() []DestinationStatus {
	describe := outcomePolicy{maxErrorBytes: e.opts.MaxErrorBytes, redact: e.opts.Redact}.lastError
	out := make([]DestinationStatus, 0, len(e.sinks))
	for _, name := range slices.Sorted(maps.Keys(e.sinks)) {
		out = append(out, e.sinks[name].Status(describe))
	}
	return out
}

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
