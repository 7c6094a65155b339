package claimplan

import (
	"testing"
	"time"
)

// The pace's intervals, step by step: each row is one probe, in the state
// it ran in, whether it found news, and the interval the pace then gives.
func TestPaceIntervals(t *testing.T) {
	probing := func(active, waiting bool) PaceState { return PaceState{Active: active, Waiting: waiting} }
	listening := func(active, waiting bool) PaceState {
		return PaceState{Listening: true, Active: active, Waiting: waiting}
	}
	type step struct {
		s     PaceState
		found bool
		want  time.Duration
	}
	cases := []struct {
		name  string
		base  time.Duration
		steps []step
	}{
		{"probing while active: the base interval", 2 * time.Millisecond, []step{
			{probing(true, false), false, 2 * time.Millisecond},
			{probing(true, true), false, 2 * time.Millisecond},
		}},
		{"probing while idle: 25 ms doubling to 250 ms, back to the start at news", 2 * time.Millisecond, []step{
			{probing(false, false), false, 50 * time.Millisecond},
			{probing(false, false), false, 100 * time.Millisecond},
			{probing(false, false), false, 200 * time.Millisecond},
			{probing(false, false), false, 250 * time.Millisecond},
			{probing(false, false), false, 250 * time.Millisecond},
			{probing(false, false), true, 25 * time.Millisecond},
		}},
		{"a base interval longer than the idle range: the base", time.Second, []step{
			{probing(false, false), false, time.Second},
			{probing(true, false), false, time.Second},
		}},
		{"listening, nothing waits: only the safety probe, active or not", 2 * time.Millisecond, []step{
			{listening(true, false), false, 5 * time.Second},
			{listening(false, false), true, 5 * time.Second},
		}},
		{"listening while rows wait to settle: the backed-off range", 2 * time.Millisecond, []step{
			{listening(true, true), false, 50 * time.Millisecond},
			{listening(true, true), false, 100 * time.Millisecond},
			{listening(true, true), true, 25 * time.Millisecond},
			{listening(true, false), false, 5 * time.Second},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := NewPace(Default(), c.base)
			for i, s := range c.steps {
				p.Probed(s.s, s.found)
				if got := p.Interval(s.s); got != s.want {
					t.Fatalf("after probe %d (%+v, news %v): interval %v, want %v", i+1, s.s, s.found, got, s.want)
				}
			}
		})
	}
}

// The first probe of an idle or waiting spell waits the first step of the
// back-off; the metrics call a listening or inactive pace idle.
func TestPaceStartsItsBackOffAtTheFirstStep(t *testing.T) {
	p := NewPace(Default(), 2*time.Millisecond)
	idle := PaceState{}
	if got := p.Interval(idle); got != 25*time.Millisecond {
		t.Fatalf("first idle interval %v, want 25ms", got)
	}
	if !p.Idle(idle) || !p.Idle(PaceState{Listening: true, Active: true}) || p.Idle(PaceState{Active: true}) {
		t.Fatal("Idle is wrong")
	}
}
