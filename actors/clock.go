package actors

import "time"

// clock is the time source of the gate, the probe pace and the lease trust
// window. The engine runs on the wall clock; tests of those parts run on a
// manual clock that they move themselves, so that they wait on what the code
// does rather than sleep for it.
type clock interface {
	Now() time.Time
	// NewTimer returns a stopped timer.
	NewTimer() timer
}

// timer is the part of time.Timer that the pace uses.
type timer interface {
	C() <-chan time.Time
	// Reset arms the timer to fire once, d from now (replacing any
	// earlier arming); Stop disarms it.
	Reset(d time.Duration)
	Stop()
}

// wallClock is the real clock.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) NewTimer() timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return wallTimer{t}
}

type wallTimer struct{ t *time.Timer }

func (w wallTimer) C() <-chan time.Time   { return w.t.C }
func (w wallTimer) Reset(d time.Duration) { w.t.Reset(d) }
func (w wallTimer) Stop()                 { w.t.Stop() }
