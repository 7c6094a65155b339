package actors

import (
	"context"
	"errors"
	"fmt"
	"github.com/queuebox/queuebox/actors/internal/destctl"
	"github.com/queuebox/queuebox/actors/internal/upkeep"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/queuebox/queuebox/actors/internal/claimplan"
	"github.com/queuebox/queuebox/dialects"
)

// Stats are the engine's counters, read at any time.
type Stats struct {
	Claimed, Delivered, Retried, Dead, Released, LostClaims atomic.Int64
	InFlight                                                atomic.Int64
	// Deferred counts the rows put back to pending because their
	// destination was held (paused, circuit open, flow full): no attempt.
	Deferred atomic.Int64
	// KeyActors is how many key actors are alive.
	KeyActors atomic.Int64
	// ClaimStatements and CompleteStatements count round trips; Probes the
	// probes of an idle claimer (a claim probes too, uncounted).
	ClaimStatements, CompleteStatements, Probes atomic.Int64
	// OtherRelays is how many sessions other relays held on the database
	// server at the last look (see statementBudget).
	OtherRelays atomic.Int64
	// Idle says the claimer probes at its idle pace (for observation only).
	Idle atomic.Bool
	// ClaimTime and CompleteTime add up the statements' durations.
	ClaimTime, CompleteTime atomic.Int64
	// Nudges counts the wake-ups that logical replication brought.
	Nudges atomic.Int64
	// Horizon is what held the database's horizon back at the Janitor's
	// last look (nil before the first), for observation: the claimer hears
	// of each look in a message.
	Horizon atomic.Pointer[dialects.Horizon]
	// Claims counts the claims of each kind (in schedule order, by key):
	// how many, the rows they took and their time.
	Claims [claimplan.Kinds]struct{ Statements, Rows, Time atomic.Int64 }
	// Looks counts the background looks of each kind (the floors, the
	// stragglers, expired leases): how many, and their time. Each reads
	// what a long transaction elsewhere keeps, off the claims' path. Two
	// more kinds count what sends the walks back: the stragglers found
	// (with how long before the look they became due, as their time), and
	// the walks in schedule order from the start (after a rewind, or rows
	// released back to pending).
	Looks [lookKinds]struct{ Count, Time atomic.Int64 }
}

// lookKind is a kind of background look.
type lookKind uint8

const (
	floorsLook lookKind = iota
	stragglersLook
	releaseLook
	stragglersFoundLook
	fromStartWalk
	lookKinds
)

func (k lookKind) String() string {
	return [...]string{"floors", "stragglers", "expired leases", "stragglers found (due before)", "walks from the start"}[k]
}

// looked counts a background look of kind k that took took.
func (s *Stats) looked(k lookKind, took time.Duration) {
	if s != nil {
		s.Looks[k].Count.Add(1)
		s.Looks[k].Time.Add(int64(took))
	}
}

// LookKinds describes the background looks of each kind, for benchmarks:
// from the counts in since (nil: from the start).
func (s *Stats) LookKinds(since *[lookKinds][2]int64) string {
	var b strings.Builder
	for k := range lookKinds {
		n, t := s.Looks[k].Count.Load(), s.Looks[k].Time.Load()
		if since != nil {
			n, t = n-since[k][0], t-since[k][1]
		}
		if n == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d × %.0f ms", k, n, float64(t)/1e6/float64(n))
	}
	return b.String()
}

// LookCounts are the looks' counts and times as they stand, for LookKinds.
func (s *Stats) LookCounts() (c [lookKinds][2]int64) {
	for k := range lookKinds {
		c[k] = [2]int64{s.Looks[k].Count.Load(), s.Looks[k].Time.Load()}
	}
	return c
}

// ClaimKinds describes the claims of each kind, for benchmarks and logs.
func (s *Stats) ClaimKinds() string {
	var b strings.Builder
	for k := range claimplan.Kinds {
		c := &s.Claims[k]
		n := c.Statements.Load()
		if n == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %d claims, %.0f rows and %.1f ms each", k, n, float64(c.Rows.Load())/float64(n), float64(c.Time.Load())/1e6/float64(n))
	}
	return b.String()
}

// Engine is one replica's relay: its actors under one supervisor. See the
// package doc for the design.
type Engine struct {
	opts   Options
	log    *slog.Logger
	system *actor.ActorSystem
	sinks  map[string]*destctl.Handle
	routes routeObservers

	// copies is the copies path's claimer (nil: no fan-out route).
	root, claimer, copies *actor.PID

	// deliveryCtx is the parent of every delivery; cancelled on a hard stop.
	deliveryCtx    context.Context
	cancelDelivery context.CancelFunc
	bg             *background

	drained chan struct{}
	// copiesDrained is closed when the copies path has drained.
	copiesDrained chan struct{}
	fatal         chan error
	fatalOnce     sync.Once
	stopOnce      sync.Once
	ready         atomic.Bool
	mailboxes     mailboxLengths

	Stats Stats
}

// New checks the options and builds an engine; Start runs it.
func New(opts Options) (*Engine, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	e := &Engine{opts: opts, log: opts.Logger, sinks: map[string]*destctl.Handle{}, drained: make(chan struct{}), copiesDrained: make(chan struct{}),
		fatal: make(chan error, 1)}
	if sh := opts.Shared; sh != nil {
		e.sinks, e.opts.Destinations = sh.handles, sh.factories
	} else {
		for name := range opts.Destinations {
			e.sinks[name] = destctl.NewHandle(name, opts.Policies[name], opts.MaxInFlight, opts.Clock)
		}
	}
	e.routes = newRouteObservers(opts.Router, opts.Observer)
	return e, nil
}

// Start spawns the actors and begins claiming.
func (e *Engine) Start(ctx context.Context) error {
	// The sinks first: a destination that cannot be built stops the start
	// before anything runs.
	if sh := e.opts.Shared; sh != nil {
		if err := sh.Open(); err != nil {
			return err
		}
	} else {
		for name, f := range e.opts.Destinations {
			s, err := f()
			if err != nil {
				destctl.CloseSinks(e.sinks)
				return fmt.Errorf("destination %s: %w", name, err)
			}
			e.sinks[name].Set(s)
		}
	}
	rootName := "engine"
	if sh := e.opts.Shared; sh != nil {
		// The engines that share destinations share an actor system too:
		// each system keeps a registry of its own, which fifty outboxes
		// would pay fifty times.
		e.system, rootName = sh.actorSystem(e.log), fmt.Sprintf("engine-%d", watchSources.Add(1))
	} else {
		e.system = newActorSystem(e.log)
	}
	e.deliveryCtx, e.cancelDelivery = context.WithCancel(context.WithoutCancel(ctx))
	e.bg = newBackground(ctx, e.opts.Clock)
	p := parts{
		opts: &e.opts, log: e.log, stats: &e.Stats, sinks: e.sinks, routes: e.routes, mailboxes: &e.mailboxes,
		bg: e.bg, deliveryCtx: e.deliveryCtx, drained: e.drained, copiesDrained: e.copiesDrained, ready: &e.ready, clock: e.opts.Clock, tune: claimplan.Default(),
		fanOut: e.opts.Router.FanOut() || copiesWaiting(ctx, e.opts.Dialect, e.log),
	}
	props := actor.PropsFromProducer(func() actor.Actor { return &supervisorActor{parts: p} },
		actor.WithSupervisor(&engineStrategy{crash: e.crash}))
	pid, err := e.system.Root.SpawnNamed(props, rootName)
	if err != nil {
		e.abort()
		return err
	}
	e.root = pid
	if err := e.awaitChildren(); err != nil {
		e.abort()
		return fmt.Errorf("engine did not start: %w", err)
	}
	e.log.Info("engine started", "batchSize", e.opts.BatchSize, "maxInFlight", e.opts.MaxInFlight,
		"lease", e.opts.Lease, "destinations", len(e.opts.Destinations))
	return nil
}

// awaitChildren waits until the supervisor has spawned its children and
// each loop actor has started its loop (so that Stop, which waits for the
// loops, never waits before they are counted).
func (e *Engine) awaitChildren() error {
	res, err := e.system.Root.RequestFuture(e.root, &whereAreYou{}, 10*time.Second).Result()
	if err != nil {
		return err
	}
	kids := res.(*children)
	if kids.err != nil {
		return kids.err
	}
	for _, loop := range kids.loops {
		if _, err := e.system.Root.RequestFuture(loop, &upkeep.Ping{}, 10*time.Second).Result(); err != nil {
			return err
		}
	}
	e.claimer, e.copies = kids.claimer, kids.copies
	return nil
}

// abort undoes a start that failed half-way.
func (e *Engine) abort() {
	e.bg.stop()
	e.cancelDelivery()
	e.shutdownSystem()
	e.closeSinks()
	e.system = nil
}

// newActorSystem builds an actor system whose own log keeps warnings only:
// protoactor logs every dead letter (a message to an actor that just
// stopped, which is normal here) at info.
func newActorSystem(log *slog.Logger) *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(minLevel{log.Handler(), slog.LevelWarn}).With("component", "actor-system")
	}))
}

// shutdownSystem ends the engine's actors: the whole system when it is the
// engine's own, else its supervisor and everything under it.
func (e *Engine) shutdownSystem() {
	if e.opts.Shared != nil {
		if e.root != nil {
			e.system.Root.Stop(e.root)
		}
		return
	}
	e.system.Shutdown()
}

// closeSinks closes the sinks the engine built (shared ones are closed by
// their owner).
func (e *Engine) closeSinks() {
	if e.opts.Shared == nil {
		destctl.CloseSinks(e.sinks)
	}
}

// Ready reports whether the last claim reached the database.
func (e *Engine) Ready() bool { return e.ready.Load() }

// MailboxLength is how many messages wait in (or are being handled from)
// the mailboxes of the actors of one kind, summed over them.
func (e *Engine) MailboxLength(kind ActorKind) int {
	if kind >= actorKinds {
		return 0
	}
	return int(e.mailboxes[kind].n.Load())
}

// Fatal delivers an error when an engine actor crashed (a bug): the replica
// should stop; its leases expire and other replicas take its rows.
func (e *Engine) Fatal() <-chan error { return e.fatal }

func (e *Engine) crash(err error) {
	e.fatalOnce.Do(func() {
		e.log.Error("engine actor crashed; stopping", "error", err)
		e.fatal <- err
	})
}

// errTimedOut: awaitClosed's timer fired first.
var errTimedOut = errors.New("timed out")

// awaitClosed waits until every channel of chans is closed (nil), the
// timer fires (errTimedOut) or ctx ends (its error).
func awaitClosed(ctx context.Context, timer <-chan time.Time, chans []chan struct{}) error {
	for _, ch := range chans {
		select {
		case <-ch:
		case <-timer:
			return errTimedOut
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
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
	drained := []chan struct{}{e.drained}
	e.system.Root.Send(e.claimer, &drain{})
	if e.copies != nil {
		e.system.Root.Send(e.copies, &drain{})
		drained = append(drained, e.copiesDrained)
	}
	timer := e.opts.Clock.NewTimer(e.opts.DrainTimeout)
	defer timer.Stop()
	var err error
	switch awaitClosed(ctx, timer.C(), drained) {
	case errTimedOut:
		e.log.Warn("drain timeout passed; cancelling the deliveries still running", "inFlight", e.Stats.InFlight.Load())
		e.cancelDelivery()
		grace := e.opts.Clock.NewTimer(5 * time.Second)
		defer grace.Stop()
		if err = awaitClosed(ctx, grace.C(), drained); err == errTimedOut {
			err = errors.New("outcomes of some rows could not be written; their leases will expire")
		}
	case nil:
	default:
		e.cancelDelivery()
		err = ctx.Err()
	}
	e.bg.stop()
	e.cancelDelivery()
	e.system.Root.Stop(e.root)
	e.shutdownSystem()
	e.closeSinks()
	e.log.Info("stopped", "delivered", e.Stats.Delivered.Load(), "retried", e.Stats.Retried.Load(), "dead", e.Stats.Dead.Load())
	return err
}

// copiesWaiting reports whether copies of fan-out rows wait to be
// delivered although the router has no fan-out route (a configuration
// that fanned out before): the engine then runs the copies path too, and
// its claims keep those destinations' keys in order behind them. A
// database that does not answer within two seconds says nothing.
func copiesWaiting(ctx context.Context, d dialects.Dialect, log *slog.Logger) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	counts, err := d.CopyCounts(ctx)
	if err != nil {
		return false
	}
	for _, c := range counts {
		if c.Rows > 0 && (c.State == dialects.Pending || c.State == dialects.Processing) {
			log.Info("copies of fan-out rows wait to be delivered although no route fans out: they are delivered", "destination", c.Destination, "state", c.State, "copies", c.Rows)
			return true
		}
	}
	return false
}
