package actors

import (
	"context"
	"sync"
	"time"

	"github.com/queuebox/queuebox/internal/clock"
)

// background is the lifetime of the engine's loops: the lease renewal's
// clock, the wake-ups, the inbox relay's poll, the budget watcher, the
// destination watch and the Janitor's loops. A loop talks to the database or
// ticks, and only ever sends to actors, so no mailbox waits on it. Loops end
// with ctx; Stop waits for them.
type background struct {
	clock  clock.Clock
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newBackground(parent context.Context, c clock.Clock) *background {
	b := &background{clock: c}
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
// returns).
func (b *background) every(d time.Duration, tick func()) {
	b.run(func() {
		for clock.Sleep(b.ctx, b.clock, d) {
			tick()
		}
	})
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

// Context, Run and Every make background the Janitor's upkeep.Loops.
func (b *background) Context() context.Context { return b.ctx }

// Run is run.
func (b *background) Run(loop func()) { b.run(loop) }

// Every is every.
func (b *background) Every(d time.Duration, tick func()) { b.every(d, tick) }
