package actors

import (
	"sync/atomic"
	"time"
)

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
