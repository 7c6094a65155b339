package actors

import (
	"context"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// background is the lifetime of the engine's loops: the clocks of the claim
// poll, the claimer's probe, the lease renewal and the inbox relay, the
// share watcher, and the Janitor's loops. A loop talks to the database or
// ticks, and only ever sends to actors, so no mailbox waits on it. Loops end
// with ctx; Stop waits for them.
type background struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newBackground(parent context.Context) *background {
	b := &background{}
	b.ctx, b.cancel = context.WithCancel(context.WithoutCancel(parent))
	return b
}

// run runs loop in a goroutine; loop returns when b.ctx ends.
func (b *background) run(loop func()) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		loop()
	}()
}

// every calls tick every d until b.ctx ends (the wait starts when a tick
// returns): a paced clock whose pace never changes.
func (b *background) every(d time.Duration, tick func()) {
	b.everyPaced(newPace(d, wallClock{}), tick)
}

// nudges calls nudge for each value from ch (a wake-up source's channel),
// until b.ctx ends.
func (b *background) nudges(ch <-chan struct{}, nudge func()) {
	b.run(func() {
		for {
			select {
			case <-b.ctx.Done():
				return
			case <-ch:
				nudge()
			}
		}
	})
}

// stop ends the loops and waits for them.
func (b *background) stop() {
	b.cancel()
	b.wg.Wait()
}

// runLoop is the whole Receive of an actor that owns a loop (the Janitor):
// the loop starts with the actor, and the actor answers whereAreYou once it
// has, so that Engine.Start returns only after the loop is counted in b
// (Stop waits for it).
func runLoop(ctx actor.Context, b *background, loop func(root *actor.RootContext)) {
	switch ctx.Message().(type) {
	case *actor.Started:
		root := ctx.ActorSystem().Root
		b.run(func() { loop(root) })
	case *whereAreYou:
		ctx.Respond(true)
	}
}
