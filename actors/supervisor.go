package actors

import (
	"context"
	"fmt"
	"github.com/queuebox/queuebox/actors/internal/destctl"
	"github.com/queuebox/queuebox/actors/internal/upkeep"
	"github.com/queuebox/queuebox/dialects"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/queuebox/queuebox/actors/internal/claimplan"
	"github.com/queuebox/queuebox/internal/clock"
)

// parts are what the engine supervisor builds its children from: the
// options, and what the engine owns and shares with them (counters, sinks,
// the contexts that end deliveries and loops, the signals it waits on).
type parts struct {
	opts      *Options
	log       *slog.Logger
	stats     *Stats
	sinks     map[string]*destctl.Handle
	routes    routeObservers
	mailboxes *mailboxLengths
	bg        *background
	// deliveryCtx is the parent of every Publish.
	deliveryCtx context.Context
	drained     chan struct{}
	// copiesDrained is closed when the copies path has drained (fanOut
	// only).
	copiesDrained chan struct{}
	// fanOut: the copies path runs and claims read the blocked lanes (the
	// router has fan-out routes, or copies wait from an earlier
	// configuration: copiesWaiting).
	fanOut bool
	ready  *atomic.Bool
	clock  clock.Clock
	tune   claimplan.Tuning
}

// supervisorActor is the engine supervisor: it spawns the engine's actors,
// each with the addresses of the actors it sends to, starts the clocks that
// drive the claimer and the lease keeper, and owns the children's failures
// through engineStrategy.
type supervisorActor struct {
	parts
	kids *children
}

// whereAreYou asks the supervisor for its children; Engine.Start waits for
// the answer, then pings each loop actor (upkeep.Ping) until its loops run.
type whereAreYou struct{}

type children struct {
	claimer *actor.PID
	// copies is the copies path's claimer (nil: no fan-out route).
	copies *actor.PID
	loops  []*actor.PID
	err    error
}

func (s *supervisorActor) Receive(c actor.Context) {
	switch c.Message().(type) {
	case *actor.Started:
		s.kids = s.spawnChildren(c)
	case *whereAreYou:
		c.Respond(s.kids)
	}
}

// spawnChildren spawns the children downstream first, so that each is built
// with the addresses it sends to: the lease keeper, the completer, the pool,
// then the claimer (which spawns the key actors), then the loops. The
// completer's flushes return credit to the claimer, which does not exist yet
// when the completer is built; a child's address is its parent's followed by
// its name, so the completer is given the claimer's address in advance, and
// it sends to it only for rows the claimer has claimed.
func (s *supervisorActor) spawnChildren(c actor.Context) *children {
	o, lengths := s.opts, s.mailboxes
	var err error
	spawn := func(name string, mb actor.MailboxProducer, build func() actor.Actor) *actor.PID {
		pid, e := c.SpawnNamed(actor.PropsFromProducer(build, actor.WithMailbox(mb)), name)
		if e != nil && err == nil {
			err = fmt.Errorf("spawning the %s: %w", name, e)
		}
		return pid
	}
	claimerAt := actor.NewPID(c.Self().Address, c.Self().Id+"/claimer")
	var copiesAt *actor.PID
	if s.fanOut {
		copiesAt = actor.NewPID(c.Self().Address, c.Self().Id+"/copies-claimer")
	}

	c.SpawnPrefix(actor.PropsFromProducer(func() actor.Actor {
		return &sinkSupervisor{handles: s.sinks, factories: o.Destinations, mailbox: mailbox(o.Mailboxes.Sink, &lengths[KindSink])}
	}, actor.WithSupervisor(actor.NewExponentialBackoffStrategy(time.Minute, time.Second))), "sinks")

	leaseKeeperPID := spawn("lease-keeper", mailbox(o.Mailboxes.Claimer, &lengths[KindLeaseKeeper]), func() actor.Actor {
		return upkeep.NewLeaseKeeper(upkeep.LeaseKeeper{Dialect: o.Dialect, LeaseLength: o.Lease, BG: s.bg.ctx, Log: s.log, Clock: s.clock})
	})
	completerPID := spawn("completer", mailbox(o.Mailboxes.Completer, &lengths[KindCompleter]), func() actor.Actor {
		cm := &completer{dialect: o.Dialect, claimer: claimerAt, leaseKeeper: leaseKeeperPID, bg: s.bg.ctx, log: s.log, stats: s.stats, obs: o.Observer,
			clock: s.clock, statements: s.tune.StatementsAlone, copies: copiesAt}
		if copiesAt != nil {
			cm.fan = newFanIn()
		}
		return cm
	})
	d := &deliverer{
		router: o.Router, sinks: s.sinks, completer: completerPID, ctx: s.deliveryCtx,
		log: s.log, stats: s.stats, obs: o.Observer, routes: s.routes, history: o.History.Enabled, allDeliveries: o.History.AllDeliveries, clock: s.clock,
		policy: outcomePolicy{backoff: o.Backoff, maxErrorBytes: o.MaxErrorBytes, redact: o.Redact},
	}
	// The paused destinations are read before the claimer starts (see
	// destctl.Watch.First).
	dests := &destctl.Watch{Dialect: o.Dialect, Handles: s.sinks, Replica: o.Replica, Describe: d.policy.lastError, Log: s.log, BG: s.bg.ctx, Clock: s.clock,
		Wakeups: o.Wakeups, Source: fmt.Sprint(watchSources.Add(1))}
	dests.First()
	poolPID := spawn("unordered", mailbox(o.Mailboxes.Key, &lengths[KindPool]), func() actor.Actor {
		return newPool(d, o.UnorderedConcurrency)
	})
	claimerPID := spawn("claimer", mailbox(o.Mailboxes.Claimer, &lengths[KindClaimer]), func() actor.Actor {
		return newClaimer(claimer{
			dialect: o.Dialect, clock: s.clock, leaseLength: o.Lease,
			pool: poolPID, leaseKeeper: leaseKeeperPID, completer: completerPID, fanOut: copiesAt != nil,
			delivery: d, keyIdleAfter: o.KeyIdle, keyMailbox: mailbox(o.Mailboxes.Key, &lengths[KindKey]),
			bg: s.bg.ctx, log: s.log, stats: s.stats, obs: o.Observer, ready: s.ready, drained: s.drained,
			wakeups: o.Wakeups, tune: s.tune,
			plan: claimplan.New(s.tune, claimplan.Config{BatchSize: o.BatchSize, MaxInFlight: o.MaxInFlight,
				ProbeInterval: o.ProbeInterval, PollInterval: o.PollInterval, Statements: s.tune.StatementsAlone}),
		})
	})
	if err != nil {
		return &children{err: err}
	}
	if !claimerPID.Equal(claimerAt) {
		return &children{err: fmt.Errorf("the claimer's address is %s, not %s as the completer was told", claimerPID.Id, claimerAt.Id)}
	}

	kids := &children{claimer: claimerPID}
	if copiesAt != nil {
		if kids.copies = s.spawnCopies(c, d, spawn); err != nil {
			return &children{err: err}
		}
		if !kids.copies.Equal(copiesAt) {
			return &children{err: fmt.Errorf("the copies claimer's address is %s, not %s as the completer was told", kids.copies.Id, copiesAt.Id)}
		}
	}
	kids.loops = append(kids.loops, c.SpawnPrefix(actor.PropsFromProducer(func() actor.Actor {
		return &upkeep.Janitor{Dialect: o.Dialect, Attempts: o.Dialect, HistoryRetention: o.History.Retention, LeaseLength: o.Lease, Retention: o.Retention,
			LeaseKeeper: leaseKeeperPID, Claimer: claimerPID, Log: s.log, Loops: s.bg, WarnAfter: o.LongTransactionWarning, Clock: s.clock, Tune: s.tune,
			SawHorizon: func(h *dialects.Horizon) { s.stats.Horizon.Store(h) },
			Looked:     func(took time.Duration) { s.stats.looked(releaseLook, took) }}
	}), "janitor"))

	// The loops only ever send, so no mailbox waits on them. The claimer
	// arms its own timers.
	root := c.ActorSystem().Root
	s.bg.nudges(o.Wakeups.Outbox(), func() { root.Send(claimerPID, &nudged{}) })
	s.bg.every(o.Lease/3, func() { root.Send(leaseKeeperPID, &upkeep.RenewTick{}) })
	watcher := &relayWatcher{dialect: o.Dialect, clock: s.clock, stats: s.stats, log: s.log, bg: s.bg.ctx, tune: s.tune,
		tell: func(n int) {
			root.Send(claimerPID, &budgetChanged{statements: n})
			root.Send(completerPID, &budgetChanged{statements: n})
		}}
	s.bg.run(watcher.loop)
	s.bg.run(dests.Loop)
	if o.Inbox.Enabled {
		// The inbox relay sends only to itself and wakes the claimer; its
		// mailbox holds ticks, which it handles at once.
		relayPID := spawn("inbox-relay", actor.Unbounded(), func() actor.Actor {
			return newInboxRelay(inboxRelay{dialect: o.Dialect, batchSize: o.Inbox.BatchSize, maxAttempts: o.Inbox.MaxAttempts,
				timeout: max(o.Lease/2, time.Second), claimer: claimerPID, bg: s.bg.ctx, log: s.log, wakeups: o.Wakeups,
				clock: s.clock, tune: s.tune, pace: claimplan.NewPace(s.tune, o.ProbeInterval)})
		})
		if err != nil {
			return &children{err: err}
		}
		s.bg.nudges(o.Wakeups.Inbox(), func() { root.Send(relayPID, &relayNudged{}) })
		s.bg.every(o.PollInterval, func() { root.Send(relayPID, &relayPoll{}) })
	}
	return kids
}

// spawnCopies spawns the copies path (copies.go): its lease keeper,
// completer, pool and claimer, over the engine's destinations, and starts
// its loops. It returns the claimer.
func (s *supervisorActor) spawnCopies(c actor.Context, d *deliverer, spawn func(string, actor.MailboxProducer, func() actor.Actor) *actor.PID) *actor.PID {
	o, lengths, root := s.opts, s.mailboxes, c.ActorSystem().Root
	relay := copiesRelay{Relay: o.Dialect, copies: o.Dialect}
	claimerAt := actor.NewPID(c.Self().Address, c.Self().Id+"/copies-claimer")
	leaseKeeperPID := spawn("copies-lease-keeper", mailbox(o.Mailboxes.Claimer, &lengths[KindLeaseKeeper]), func() actor.Actor {
		return upkeep.NewLeaseKeeper(upkeep.LeaseKeeper{Dialect: relay, LeaseLength: o.Lease, BG: s.bg.ctx, Log: s.log, Clock: s.clock})
	})
	completerPID := spawn("copies-completer", mailbox(o.Mailboxes.Completer, &lengths[KindCompleter]), func() actor.Actor {
		return &completer{dialect: relay, claimer: claimerAt, leaseKeeper: leaseKeeperPID, bg: s.bg.ctx, log: s.log, stats: s.stats, obs: o.Observer,
			clock: s.clock, statements: s.tune.StatementsAlone}
	})
	cd := *d
	cd.completer = completerPID
	poolPID := spawn("copies-unordered", mailbox(o.Mailboxes.Key, &lengths[KindPool]), func() actor.Actor {
		return newPool(&cd, o.UnorderedConcurrency)
	})
	claimerPID := spawn("copies-claimer", mailbox(o.Mailboxes.Claimer, &lengths[KindClaimer]), func() actor.Actor {
		return newCopyClaimer(copyClaimer{copies: o.Dialect, clock: s.clock, leaseLength: o.Lease, batch: o.BatchSize, maxInFlight: o.MaxInFlight,
			pool: poolPID, leaseKeeper: leaseKeeperPID, delivery: &cd, keyIdleAfter: o.KeyIdle, keyMailbox: mailbox(o.Mailboxes.Key, &lengths[KindKey]),
			bg: s.bg.ctx, log: s.log.With("path", "copies"), drained: s.copiesDrained})
	})
	if claimerPID == nil {
		return nil
	}
	s.bg.every(o.Lease/3, func() { root.Send(leaseKeeperPID, &upkeep.RenewTick{}) })
	s.bg.every(copySafetyNet, func() { root.Send(claimerPID, &copyTick{}) })
	(&copyUpkeep{copies: o.Dialect, leaseKeeper: leaseKeeperPID, claimer: claimerPID, leaseLength: o.Lease, retention: o.Retention,
		log: s.log, loops: s.bg}).start(root)
	return claimerPID
}

// engineStrategy handles a crash of an engine actor. The claimer, completer,
// lease keeper and key actors hold the replica's claims in memory: a restart
// would forget them, so a crash there is a bug that stops the replica (its
// leases expire and other replicas take the rows). Sink actors are restarted
// with backoff by their own supervisor.
type engineStrategy struct{ crash func(error) }

func (s *engineStrategy) HandleFailure(_ *actor.ActorSystem, supervisor actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason interface{}, message interface{}) {
	s.crash(fmt.Errorf("%s panicked on %T: %v", child.Id, message, reason))
	supervisor.StopChildren(child)
}
