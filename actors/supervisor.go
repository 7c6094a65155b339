package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// supervisorActor is the engine supervisor: it spawns the engine's actors
// and owns their failures through engineStrategy.
type supervisorActor struct {
	e    *Engine
	kids *children
}

type whereAreYou struct{}

type children struct {
	claimer, completer, leaseKeeper, pool, sinks *actor.PID
	loops                                        []*actor.PID
}

func (s *supervisorActor) Receive(c actor.Context) {
	switch c.Message().(type) {
	case *actor.Started:
		e := s.e
		mb := e.opts.Mailboxes
		k := &children{}
		k.sinks = c.SpawnPrefix(actor.PropsFromProducer(func() actor.Actor { return &sinkSupervisor{e: e} },
			actor.WithSupervisor(actor.NewExponentialBackoffStrategy(time.Minute, time.Second))), "sinks")
		k.completer = c.SpawnPrefix(actor.PropsFromProducer(func() actor.Actor { return newCompleter(e) },
			actor.WithMailbox(mailbox(mb.Completer))), "completer")
		k.leaseKeeper = c.SpawnPrefix(actor.PropsFromProducer(func() actor.Actor { return newLeaseKeeper(e) },
			actor.WithMailbox(mailbox(mb.Claimer))), "lease-keeper")
		// The pool and the key actors must know the completer before they run.
		e.completer = k.completer
		e.leaseKeeper = k.leaseKeeper
		k.pool = c.SpawnPrefix(actor.PropsFromProducer(func() actor.Actor { return newPool(e) },
			actor.WithMailbox(mailbox(mb.Key))), "unordered")
		e.pool = k.pool
		k.claimer = c.SpawnPrefix(actor.PropsFromProducer(func() actor.Actor { return newClaimer(e) },
			actor.WithMailbox(mailbox(mb.Claimer))), "claimer")
		e.claimer = k.claimer
		if e.opts.Notify {
			k.loops = append(k.loops, c.SpawnPrefix(actor.PropsFromProducer(func() actor.Actor { return &loopActor{e: e, loop: e.notifier} }), "notifier"))
		}
		k.loops = append(k.loops, c.SpawnPrefix(actor.PropsFromProducer(func() actor.Actor { return &loopActor{e: e, loop: e.janitor} }), "janitor"))
		s.kids = k
	case *whereAreYou:
		c.Respond(s.kids)
	}
}

// engineStrategy handles a crash of an engine actor. The claimer, completer,
// lease keeper and key actors hold the replica's claims in memory: a restart
// would forget them, so a crash there is a bug that stops the replica (its
// leases expire and other replicas take the rows). Sink actors are restarted
// with backoff by their own supervisor.
type engineStrategy struct{ e *Engine }

func (s *engineStrategy) HandleFailure(_ *actor.ActorSystem, supervisor actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason interface{}, message interface{}) {
	s.e.crash(fmt.Errorf("%s panicked on %T: %v", child.Id, message, reason))
	supervisor.StopChildren(child)
}
