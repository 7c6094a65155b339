package actors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
)

// SinkFactory builds a destination's sink; the sink actor calls it at start
// and again after a crash.
type SinkFactory func() (sinks.Sink, error)

// Mailboxes are the bounded mailbox sizes per actor kind; 0 is unbounded.
type Mailboxes struct {
	Claimer, Key, Sink, Completer int
}

// Retention is the janitor's policy; an age of 0 keeps rows forever.
type Retention struct {
	Delivered, Dead time.Duration
	Interval        time.Duration
	BatchSize       int
}

// Options configure an Engine.
type Options struct {
	Dialect      dialects.Dialect
	Router       *routing.Router
	Destinations map[string]SinkFactory

	BatchSize    int
	MaxInFlight  int
	Lease        time.Duration
	PollInterval time.Duration
	Notify       bool
	Backoff      Backoff
	Retention    Retention

	Mailboxes            Mailboxes
	KeyIdle              time.Duration
	UnorderedConcurrency int
	DrainTimeout         time.Duration
	MaxErrorBytes        int

	// Redact removes secrets from last_error and logs.
	Redact func(string) string
	Logger *slog.Logger
}

// Stats are the engine's counters, read at any time.
type Stats struct {
	Claimed, Delivered, Retried, Dead, Released, LostClaims atomic.Int64
	InFlight                                                atomic.Int64
	// KeyActors is how many key actors are alive.
	KeyActors atomic.Int64
	// ClaimStatements and CompleteStatements count round trips.
	ClaimStatements, CompleteStatements atomic.Int64
	// ClaimTime and CompleteTime add up the statements' durations.
	ClaimTime, CompleteTime atomic.Int64
}

// Engine is one replica's relay: the actors of architecture.md under one
// supervisor. See the package doc for the design.
type Engine struct {
	opts   Options
	log    *slog.Logger
	system *actor.ActorSystem
	sinks  map[string]*sinkHandle

	root, claimer, completer, leaseKeeper, pool *actor.PID

	// deliveryCtx is the parent of every delivery; cancelled on a hard stop.
	deliveryCtx    context.Context
	cancelDelivery context.CancelFunc
	// bgCtx ends the background loops (tickers, listener, janitor).
	bgCtx    context.Context
	cancelBg context.CancelFunc
	bg       sync.WaitGroup

	drained   chan struct{}
	fatal     chan error
	fatalOnce sync.Once
	stopOnce  sync.Once
	ready     atomic.Bool

	Stats Stats
}

// New checks the options and builds an engine; Start runs it.
func New(opts Options) (*Engine, error) {
	if opts.Dialect == nil || opts.Router == nil {
		return nil, errors.New("engine: a dialect and a router are required")
	}
	if opts.BatchSize <= 0 || opts.MaxInFlight <= 0 || opts.Lease <= 0 {
		return nil, errors.New("engine: batch size, max in flight and lease must be positive")
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 500 * time.Millisecond
	}
	if opts.KeyIdle <= 0 {
		opts.KeyIdle = 10 * time.Second
	}
	if opts.UnorderedConcurrency <= 0 {
		opts.UnorderedConcurrency = 256
	}
	if opts.MaxErrorBytes <= 0 {
		opts.MaxErrorBytes = 2048
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e := &Engine{opts: opts, log: opts.Logger, sinks: map[string]*sinkHandle{}, drained: make(chan struct{}), fatal: make(chan error, 1)}
	for name := range opts.Destinations {
		e.sinks[name] = &sinkHandle{name: name}
	}
	return e, nil
}

// mailbox returns a bounded mailbox of size (0: unbounded). A size of 1 is
// served as 2: protoactor's bounded mailbox sits on a Workiva ring buffer
// whose "full" test cannot work at capacity 1 (a second Put overwrites the
// unread message and the reader then spins forever). Sizes are rounded up to
// a power of two by the ring buffer anyway.
func mailbox(size int) actor.MailboxProducer {
	if size <= 0 {
		return actor.Unbounded()
	}
	return actor.Bounded(max(size, 2))
}

// Start spawns the actors and begins claiming.
func (e *Engine) Start(ctx context.Context) error {
	// The sinks first: a destination that cannot be built stops the start
	// before anything runs.
	for name, f := range e.opts.Destinations {
		s, err := f()
		if err != nil {
			for _, h := range e.sinks {
				if s := h.get(); s != nil {
					_ = s.Close()
				}
			}
			return fmt.Errorf("destination %s: %w", name, err)
		}
		e.sinks[name].set(s)
	}
	// protoactor logs every dead letter (a message to an actor that just
	// stopped, which is normal here) at info: keep its warnings only.
	e.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(minLevel{e.log.Handler(), slog.LevelWarn}).With("component", "actor-system")
	}))
	e.deliveryCtx, e.cancelDelivery = context.WithCancel(context.WithoutCancel(ctx))
	e.bgCtx, e.cancelBg = context.WithCancel(context.WithoutCancel(ctx))
	props := actor.PropsFromProducer(func() actor.Actor { return &supervisorActor{e: e} },
		actor.WithSupervisor(&engineStrategy{e: e}))
	pid, err := e.system.Root.SpawnNamed(props, "engine")
	if err != nil {
		return err
	}
	e.root = pid
	// The supervisor spawns its children in Started; wait until it has.
	res, err := e.system.Root.RequestFuture(pid, &whereAreYou{}, 10*time.Second).Result()
	if err != nil {
		return fmt.Errorf("engine did not start: %w", err)
	}
	for _, loop := range res.(*children).loops {
		if _, err := e.system.Root.RequestFuture(loop, &whereAreYou{}, 10*time.Second).Result(); err != nil {
			return fmt.Errorf("engine did not start: %w", err)
		}
	}
	e.startBackground()
	e.log.Info("engine started", "batchSize", e.opts.BatchSize, "maxInFlight", e.opts.MaxInFlight,
		"lease", e.opts.Lease, "destinations", len(e.opts.Destinations))
	return nil
}

// Ready reports whether the last claim reached the database.
func (e *Engine) Ready() bool { return e.ready.Load() }

// Fatal delivers an error when an engine actor crashed (a bug): the replica
// should stop; its leases expire and other replicas take its rows.
func (e *Engine) Fatal() <-chan error { return e.fatal }

func (e *Engine) crash(err error) {
	e.fatalOnce.Do(func() {
		e.log.Error("engine actor crashed; stopping", "error", err)
		e.fatal <- err
	})
}

// Stop drains: no new claims, unstarted rows released at once, in-flight
// deliveries finish for up to the drain timeout (then they are cancelled and
// released), outcomes written, connections closed. It is safe to call twice.
func (e *Engine) Stop(ctx context.Context) error {
	var err error
	e.stopOnce.Do(func() { err = e.stop(ctx) })
	return err
}

func (e *Engine) stop(ctx context.Context) error {
	if e.system == nil {
		return nil
	}
	e.log.Info("draining", "inFlight", e.Stats.InFlight.Load())
	e.system.Root.Send(e.claimer, &drain{})
	timer := time.NewTimer(e.opts.DrainTimeout)
	defer timer.Stop()
	var err error
	select {
	case <-e.drained:
	case <-timer.C:
		e.log.Warn("drain timeout passed; cancelling the deliveries still running", "inFlight", e.Stats.InFlight.Load())
		e.cancelDelivery()
		select {
		case <-e.drained:
		case <-time.After(5 * time.Second):
			err = errors.New("outcomes of some rows could not be written; their leases will expire")
		case <-ctx.Done():
			err = ctx.Err()
		}
	case <-ctx.Done():
		e.cancelDelivery()
		err = ctx.Err()
	}
	e.cancelBg()
	e.bg.Wait()
	e.cancelDelivery()
	e.system.Root.Stop(e.root)
	e.system.Shutdown()
	for _, h := range e.sinks {
		if s := h.get(); s != nil {
			_ = s.Close()
		}
	}
	e.log.Info("stopped", "delivered", e.Stats.Delivered.Load(), "retried", e.Stats.Retried.Load(), "dead", e.Stats.Dead.Load())
	return err
}

// send delivers a message to an actor from outside any actor (a goroutine).
func (e *Engine) send(pid *actor.PID, msg any) { e.system.Root.Send(pid, msg) }
