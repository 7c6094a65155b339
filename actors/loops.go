package actors

import (
	"context"
	"sync"
	"sync/atomic"
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
	b.everyPaced(newPace(d), tick)
}

// pace is the interval of a paced clock (everyPaced), which the actor it
// ticks may change at any time: short while there is work, long while idle,
// and held (no ticks at all) while a tick could only be ignored.
type pace struct {
	base, idle time.Duration
	// now is the interval in force; 0 while the clock is held.
	now atomic.Int64
	// woken cuts short a wait when the clock speeds up or resumes; kick
	// says to tick at once: it resumed at the base interval, and what the
	// actor ignored while held (rows that arrived during a claim) is
	// worth a look now rather than an interval later.
	woken chan struct{}
	kick  atomic.Bool
	// heldAt is when the clock was last held (UnixNano): a kick only
	// makes up for a tick that the hold skipped, so an actor whose work
	// is shorter than the interval (the inbox relay's probe) still waits
	// the interval between runs.
	heldAt atomic.Int64
}

func newPace(base time.Duration) *pace {
	p := &pace{base: base, idle: max(base, idleProbe), woken: make(chan struct{}, 1)}
	p.now.Store(int64(base))
	return p
}

// set makes the clock tick at the idle interval or at the base one. Leaving
// the idle interval restarts the wait at the base one; a held clock resumes,
// with a tick at once when it resumes at the base one after being held at
// least that long (a tick was skipped).
func (p *pace) set(idle bool) {
	if p == nil {
		return
	}
	to := p.base
	if idle {
		to = p.idle
	}
	if from := time.Duration(p.now.Swap(int64(to))); from != to && (from == 0 || to == p.base) {
		if from == 0 && to == p.base && time.Since(time.Unix(0, p.heldAt.Load())) >= p.base {
			p.kick.Store(true)
		}
		p.wake()
	}
}

// hold stops the ticks until the next set: each tick wakes a goroutine and
// the actor's mailbox, which on a busy machine costs context switches for
// nothing while the actor would ignore it.
func (p *pace) hold() {
	if p != nil && p.now.Swap(0) != 0 {
		p.heldAt.Store(time.Now().UnixNano())
	}
}

func (p *pace) wake() {
	select {
	case p.woken <- struct{}{}:
	default:
	}
}

// A probing actor (the claimer, the inbox relay) that has seen nothing new
// for idleAfter probes every idleProbe rather than every probe interval: a
// probe every 2 ms costs an idle replica about a third of a core (the
// wake-ups of the clock, the actors and the connection, more than the two
// tiny statements) and the database a few percent of one. The first row
// after a quiet spell waits up to idleProbe longer; a busy replica probes at
// the configured interval.
const (
	idleAfter = time.Second
	idleProbe = 25 * time.Millisecond
)

// everyPaced calls tick, waiting between calls as long as p says at that
// moment (not at all while it is held), until b.ctx ends.
func (b *background) everyPaced(p *pace, tick func()) {
	b.run(func() {
		t := time.NewTimer(time.Hour)
		rearm := func() {
			if d := time.Duration(p.now.Load()); d > 0 {
				t.Reset(d)
			} else {
				t.Stop()
			}
		}
		rearm()
		defer t.Stop()
		for {
			select {
			case <-b.ctx.Done():
				return
			case <-t.C:
				tick()
				rearm()
			case <-p.woken:
				if p.kick.Swap(false) {
					tick()
				}
				rearm()
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
