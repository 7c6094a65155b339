// Package clock is the engine's one source of time. Every actor, loop and
// timer of the engine reads the time and waits through a Clock, so that
// tests can run the engine's rules on a Fake clock that they move
// themselves, rather than sleep and hope.
//
// Wall is the real clock; Fake is the test clock. Nothing else in the
// engine calls the time package's Now, Since, After, AfterFunc, NewTimer or
// Sleep.
package clock

import (
	"context"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed, unless the
	// returned timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
	// NewTimer returns a timer whose channel receives the time once d has
	// passed; Reset arms it again.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of time.Timer the engine uses.
type Timer interface {
	// C is the channel of a timer made by NewTimer (nil for AfterFunc).
	C() <-chan time.Time
	// Reset arms the timer to fire once, d from now, replacing any earlier
	// arming.
	Reset(d time.Duration)
	// Stop disarms it; it reports whether it was armed.
	Stop() bool
}

// Since is how long ago t was on c.
func Since(c Clock, t time.Time) time.Duration { return c.Now().Sub(t) }

// Sleep waits d on c, or until ctx ends; it reports whether the whole wait
// passed.
func Sleep(ctx context.Context, c Clock, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// Wall is the real clock.
type Wall struct{}

// Now is time.Now.
func (Wall) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (Wall) AfterFunc(d time.Duration, f func()) Timer { return wallTimer{time.AfterFunc(d, f)} }

// NewTimer is time.NewTimer.
func (Wall) NewTimer(d time.Duration) Timer { return wallTimer{time.NewTimer(d)} }

type wallTimer struct{ t *time.Timer }

func (w wallTimer) C() <-chan time.Time   { return w.t.C }
func (w wallTimer) Reset(d time.Duration) { w.t.Reset(d) }
func (w wallTimer) Stop() bool            { return w.t.Stop() }

// Or returns c, or the wall clock when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return Wall{}
	}
	return c
}
