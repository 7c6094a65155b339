package actors

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/queuebox/queuebox/actors/internal/destctl"
	"github.com/queuebox/queuebox/internal/clock"
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

// SharedDestinations are destinations that several engines deliver to:
// the engines of one relay's outboxes. Each destination has one sink (one
// set of connections), one rate limit and concurrency limit, and one
// circuit breaker, whichever outbox its rows come from. Its pause is read
// by every engine from its own database, and holds the destination while
// any of them says it is paused.
type SharedDestinations struct {
	handles   map[string]*destctl.Handle
	factories map[string]SinkFactory
	openMu    sync.Mutex
	opened    bool
	closed    atomic.Bool
	// system is the actor system of the engines that share the
	// destinations (made by the first to start).
	systemOnce sync.Once
	system     *actor.ActorSystem
}

// actorSystem is the engines' shared actor system; log is the first
// engine's.
func (s *SharedDestinations) actorSystem(log *slog.Logger) *actor.ActorSystem {
	s.systemOnce.Do(func() { s.system = newActorSystem(log) })
	return s.system
}

// NewSharedDestinations builds the destinations from their factories and
// policies; maxInFlight bounds the rows a flow control lets wait (the
// largest outbox.maxInFlight of the engines that share them). Nothing is
// built until Open.
func NewSharedDestinations(factories map[string]SinkFactory, policies map[string]DestinationPolicy, maxInFlight int, c clock.Clock) *SharedDestinations {
	c = clock.Or(c)
	s := &SharedDestinations{handles: map[string]*destctl.Handle{}, factories: factories}
	for name := range factories {
		s.handles[name] = destctl.NewHandle(name, policies[name], maxInFlight, c)
	}
	return s
}

// Open builds every sink, once; a destination that cannot be built is an
// error, as at an engine's start. Engines that share the destinations
// call it as they start.
func (s *SharedDestinations) Open() error {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	if s.opened {
		return nil
	}
	for name, f := range s.factories {
		snk, err := f()
		if err != nil {
			// The next engine's start tries again: what was missing (a
			// certificate not mounted yet) may be there by then.
			destctl.CloseSinks(s.handles)
			return fmt.Errorf("destination %s: %w", name, err)
		}
		s.handles[name].Set(snk)
	}
	s.opened = true
	return nil
}

// Close closes the sinks and shuts the engines' actor system down, once
// every engine that shares them has stopped.
func (s *SharedDestinations) Close() {
	if s.closed.CompareAndSwap(false, true) {
		destctl.CloseSinks(s.handles)
		s.systemOnce.Do(func() {})
		if s.system != nil {
			s.system.Shutdown()
		}
	}
}

// watchSources numbers the engines' destination watches (destctl.Watch.Source).
var watchSources atomic.Int64
