package clock

import (
	"slices"
	"sync"
	"time"
)

// Fake is a clock that moves only when a test moves it. Timers fire in
// the order of their deadlines as Advance passes them: a channel timer
// receives the deadline (without blocking: its buffer holds one value), an
// AfterFunc's function runs in the goroutine that called Advance, so that
// when Advance returns, everything due by then has happened.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	seq    int
	// armed is signalled whenever a timer is armed, for WaitArmed.
	armed chan struct{}
}

// NewFake returns a fake clock that reads start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, armed: make(chan struct{}, 1)}
}

// Now is the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// AfterFunc arms a timer that calls fn when the clock passes now+d.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{clock: f, fn: fn}
	t.Reset(d)
	return t
}

// NewTimer arms a timer whose channel receives its deadline.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{clock: f, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the clock by d, firing every timer due on the way, in
// order, each at its own deadline.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	end := f.now.Add(d)
	f.mu.Unlock()
	for {
		f.mu.Lock()
		i := slices.IndexFunc(f.timers, func(t *fakeTimer) bool { return !t.at.After(end) })
		if i < 0 {
			f.now = end
			f.mu.Unlock()
			return
		}
		// The earliest due timer (ties: the first armed).
		for j, t := range f.timers {
			if !t.at.After(end) && (t.at.Before(f.timers[i].at) || t.at.Equal(f.timers[i].at) && t.seq < f.timers[i].seq) {
				i = j
			}
		}
		t := f.timers[i]
		f.timers = slices.Delete(f.timers, i, i+1)
		if t.at.After(f.now) {
			f.now = t.at
		}
		at := f.now
		f.mu.Unlock()
		if t.fn != nil {
			t.fn()
		} else {
			select {
			case t.ch <- at:
			default:
			}
		}
	}
}

// Armed is how many timers are armed.
func (f *Fake) Armed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// Next is how long until the earliest armed timer fires, and whether one
// is armed.
func (f *Fake) Next() (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.timers) == 0 {
		return 0, false
	}
	at := f.timers[0].at
	for _, t := range f.timers[1:] {
		if t.at.Before(at) {
			at = t.at
		}
	}
	return at.Sub(f.now), true
}

// WaitArmed returns once a timer has been armed since the last call (or
// at once if one was), for tests whose code arms timers in other
// goroutines; it gives up after real time d and reports whether one was.
func (f *Fake) WaitArmed(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-f.armed:
		return true
	case <-t.C:
		return false
	}
}

type fakeTimer struct {
	clock *Fake
	fn    func()
	ch    chan time.Time
	at    time.Time
	seq   int
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Reset(d time.Duration) {
	f := t.clock
	f.mu.Lock()
	f.timers = slices.DeleteFunc(f.timers, func(x *fakeTimer) bool { return x == t })
	f.seq++
	t.at, t.seq = f.now.Add(d), f.seq
	f.timers = append(f.timers, t)
	f.mu.Unlock()
	select {
	case f.armed <- struct{}{}:
	default:
	}
}

func (t *fakeTimer) Stop() bool {
	f := t.clock
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.timers)
	f.timers = slices.DeleteFunc(f.timers, func(x *fakeTimer) bool { return x == t })
	return len(f.timers) < n
}
