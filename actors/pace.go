package actors

import (
	"sync/atomic"
	"time"
)

// pace is the interval of a paced clock (everyPaced), which the actor it
// ticks may change at any time: the base interval while there is work, an
// idle interval that backs off while there is none, and held (no ticks at
// all) while a tick could only be ignored.
//
// A probing actor (the claimer, the inbox relay) that has seen nothing new
// for idleAfter leaves the base interval (outbox.probeIntervalMs, 2 ms by
// default: a probe every 2 ms costs an idle replica about a third of a core
// and the database a transaction each) for the idle one. How the idle
// interval behaves depends on what else wakes the actor (setIdle):
//
//   - with logical wake-ups listening, nudges say when rows arrive, and a
//     probe is only a safety net: every idleListening.
//   - otherwise the idle interval starts at idleProbe and doubles at each
//     idle tick up to idleProbeMax: a replica that has been quiet for a
//     while runs a few transactions a second, and the first row after a
//     quiet spell waits up to idleProbeMax longer.
type pace struct {
	clock clock
	base  time.Duration
	// idleFirst and idleMax are the idle interval's range (setIdle), and
	// idleStep the idle interval it has grown to (kept while the clock is
	// held: the actor holds it during each of its runs).
	idleFirst, idleMax, idleStep atomic.Int64
	// now is the interval in force; 0 while the clock is held. idling
	// says it is the idle one, which grows at each tick.
	now    atomic.Int64
	idling atomic.Bool
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

// The idle intervals (see pace).
const (
	idleAfter     = time.Second
	idleProbe     = 25 * time.Millisecond
	idleProbeMax  = 250 * time.Millisecond
	idleListening = 5 * time.Second
)

func newPace(base time.Duration, c clock) *pace {
	p := &pace{clock: c, base: base, woken: make(chan struct{}, 1)}
	p.setIdle(false)
	p.now.Store(int64(base))
	return p
}

// setIdle sets the idle interval's range for whether nudges wake the actor
// (see pace). An idle clock starts over at the new range.
func (p *pace) setIdle(listening bool) {
	if p == nil {
		return
	}
	first, most := max(p.base, idleProbe), max(p.base, idleProbeMax)
	if listening {
		first, most = max(p.base, idleListening), max(p.base, idleListening)
	}
	p.idleFirst.Store(int64(first))
	p.idleMax.Store(int64(most))
	p.idleStep.Store(int64(first))
	if p.idling.Load() && p.now.Load() != 0 {
		p.now.Store(int64(first))
		p.wake()
	}
}

// set makes the clock tick at the idle interval or at the base one. Leaving
// the idle interval restarts the wait at the base one; entering it starts
// at its first step; a held clock resumes, with a tick at once when it
// resumes at the base one after being held at least that long (a tick was
// skipped).
func (p *pace) set(idle bool) {
	if p == nil {
		return
	}
	to := p.base
	if idle {
		if !p.idling.Load() {
			p.idleStep.Store(p.idleFirst.Load()) // a new idle spell starts over
		}
		to = time.Duration(p.idleStep.Load())
	}
	p.idling.Store(idle)
	if from := time.Duration(p.now.Swap(int64(to))); from != to && (from == 0 || to == p.base) {
		if from == 0 && to == p.base && p.clock.Now().Sub(time.Unix(0, p.heldAt.Load())) >= p.base {
			p.kick.Store(true)
		}
		p.wake()
	}
}

// ticked grows an idle interval after a tick that waited it (waited), up
// to its range's end.
func (p *pace) ticked(waited time.Duration) {
	step := p.idleStep.Load()
	if !p.idling.Load() || int64(waited) != step {
		return
	}
	next := min(2*step, p.idleMax.Load())
	p.idleStep.Store(next)
	p.now.CompareAndSwap(step, next)
}

// hold stops the ticks until the next set: each tick wakes a goroutine and
// the actor's mailbox, which on a busy machine costs context switches for
// nothing while the actor would ignore it.
func (p *pace) hold() {
	if p != nil && p.now.Swap(0) != 0 {
		p.heldAt.Store(p.clock.Now().UnixNano())
		p.wake() // disarm the wait under way
	}
}

func (p *pace) wake() {
	select {
	case p.woken <- struct{}{}:
	default:
	}
}

// everyPaced calls tick, waiting between calls as long as p says at that
// moment (not at all while it is held), until b.ctx ends.
func (b *background) everyPaced(p *pace, tick func()) {
	b.run(func() {
		t := p.clock.NewTimer()
		var armed time.Duration
		rearm := func() {
			if armed = time.Duration(p.now.Load()); armed > 0 {
				t.Reset(armed)
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
			case <-t.C():
				tick()
				p.ticked(armed)
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
