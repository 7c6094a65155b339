package actors

import (
	"errors"
	"github.com/queuebox/queuebox/actors/internal/upkeep"
	"io"
	"log/slog"
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/clock"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
)

// SinkFactory builds a destination's sink; the sink actor calls it at start
// and again after a crash.
type SinkFactory func() (sinks.Sink, error)

// Mailboxes are the bounded mailbox sizes per actor kind; 0 is unbounded.
// The pool's mailbox has the key actors' size, the lease keeper's the
// claimer's.
type Mailboxes struct {
	Claimer, Key, Sink, Completer int
}

// Retention is the Janitor's policy; an age of 0 keeps rows forever.
type Retention = upkeep.Retention

// Options configure an Engine.
type Options struct {
	Dialect      dialects.Dialect
	Router       *routing.Router
	Destinations map[string]SinkFactory
	// Policies are the destinations' flow control and circuit breakers
	// (destinations.go); a destination without one has neither.
	Policies map[string]DestinationPolicy
	// Shared, when set, are destinations this engine shares with others
	// (the engines of a relay's outboxes): their sinks, flow control and
	// circuits. Destinations and Policies are then ignored; the engine
	// neither builds nor closes the sinks (SharedDestinations does).
	Shared *SharedDestinations
	// Replica names this replica in the circuits it reports; default: its
	// host, process id and a random part.
	Replica string

	BatchSize    int
	MaxInFlight  int
	Lease        time.Duration
	PollInterval time.Duration
	// ProbeInterval is how often a claimer that is not claiming asks the
	// database whether rows arrived (OutboxProbe); once idle for a second,
	// less and less often (pace.go).
	ProbeInterval time.Duration
	// Wakeups nudges the claimer and the inbox relay when rows commit
	// (logical replication); nil: they probe.
	Wakeups dialects.Wakeups
	// LongTransactionWarning is how long a transaction may hold the
	// database's horizon back before the Janitor warns; 0 never warns.
	LongTransactionWarning time.Duration
	Backoff                Backoff
	Retention              Retention
	// History is the attempt history (attempts.go).
	History History

	Mailboxes            Mailboxes
	KeyIdle              time.Duration
	UnorderedConcurrency int
	DrainTimeout         time.Duration
	MaxErrorBytes        int

	// Redact removes secrets from last_error and logs.
	Redact func(string) string
	Logger *slog.Logger
	// Observer hears claims, deliveries and completions (for metrics); nil
	// hears nothing.
	Observer Observer
	// Inbox configures the inbox relay (inboxrelay.go).
	Inbox InboxRelay
	// Clock is the engine's time: every actor, loop and timer reads it.
	// Nil is the wall clock; tests pass a fake.
	Clock clock.Clock
}

// withDefaults checks the options and fills in what was left out.
func (o Options) withDefaults() (Options, error) {
	if o.Dialect == nil || o.Router == nil {
		return o, errors.New("engine: a dialect and a router are required")
	}
	if o.BatchSize <= 0 || o.MaxInFlight <= 0 || o.Lease <= 0 {
		return o, errors.New("engine: batch size, max in flight and lease must be positive")
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 500 * time.Millisecond
	}
	if o.Wakeups == nil {
		o.Wakeups = dialects.NoWakeups(dialects.WakeupsProbe, "no wake-up source was given")
	}
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = 2 * time.Millisecond
	}
	if o.KeyIdle <= 0 {
		o.KeyIdle = 10 * time.Second
	}
	if o.UnorderedConcurrency <= 0 {
		o.UnorderedConcurrency = 256
	}
	if o.MaxErrorBytes <= 0 {
		o.MaxErrorBytes = 2048
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Observer == nil {
		o.Observer = NopObserver{}
	}
	if o.Replica == "" {
		o.Replica = replicaName()
	}
	o.Clock = clock.Or(o.Clock)
	if o.Inbox.BatchSize <= 0 {
		o.Inbox.BatchSize = o.BatchSize
	}
	return o, nil
}
