package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// startBackground starts the tickers of the claim poll and the lease
// renewal. They only ever send to actors, so no mailbox waits on them.
func (e *Engine) startBackground() {
	e.every(e.opts.PollInterval, func() { e.send(e.claimer, &claimTick{}) })
	e.every(e.opts.Lease/3, func() { e.send(e.leaseKeeper, &renewTick{}) })
}

// loopActor is the Notifier or the Janitor: an actor under the engine
// supervisor that owns one long-running loop. The loop talks to the
// database and only sends to other actors; it ends with the engine's
// background context, and the engine waits for it on stop.
type loopActor struct {
	e    *Engine
	loop func()
}

func (a *loopActor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		a.e.bg.Add(1)
		go a.loop()
	case *whereAreYou:
		// Engine.Start waits for this answer, so the loop is counted in
		// the engine's WaitGroup before Stop can wait on it.
		ctx.Respond(true)
	}
}

func (e *Engine) every(d time.Duration, f func()) {
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-e.bgCtx.Done():
				return
			case <-t.C:
				f()
			}
		}
	}()
}
