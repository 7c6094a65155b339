package actors

import (
	"errors"
	"github.com/queuebox/queuebox/actors/internal/destctl"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/sinks"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: time.Second, Multiplier: 2, Max: 10 * time.Second, Jitter: 0.2}
	// rnd = 0.5 is the middle of the jitter: the plain formula.
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 50: 10 * time.Second} {
		if got := b.Delay(n, 0.5); got != want {
			t.Errorf("retry %d: %v, want %v", n, got, want)
		}
	}
	if lo, hi := b.Delay(2, 0), b.Delay(2, 1); lo != 1600*time.Millisecond || hi != 2400*time.Millisecond {
		t.Errorf("jitter bounds: %v..%v", lo, hi)
	}
	if got := b.Delay(5, 1); got != 10*time.Second {
		t.Errorf("jitter must not pass the maximum: %v", got)
	}
}

func TestCutUTF8(t *testing.T) {
	s := strings.Repeat("é", 10) // 2 bytes each
	for n := 0; n <= 21; n++ {
		c := CutUTF8(s, n)
		if (n > 0 && len(c) > n) || !utf8.ValidString(c) {
			t.Errorf("cut to %d: %d bytes, valid=%v", n, len(c), utf8.ValidString(c))
		}
	}
	if CutUTF8("abc", 2) != "ab" {
		t.Error("plain ASCII")
	}
}

// With a breaker, a failed probe, and a failed last try while the
// destination is down, are not counted: the row waits (OutcomeDefer), its
// attempt unchanged, for as long as the circuit holds rows or else its
// backoff. Every other failure counts as without a breaker, and a failure
// that is the row's own is dead whatever the breaker says.
func TestDecideWithTheBreaker(t *testing.T) {
	p := outcomePolicy{backoff: Backoff{Initial: time.Second, Multiplier: 2, Max: time.Minute}}
	down := errors.New("HTTP 503")
	own := sinks.Permanent(errors.New("HTTP 422"))
	row := func(attempt, most int) dialects.Row { return dialects.Row{Attempt: attempt, MaxAttempts: most} }
	open := destctl.BreakerView{Down: true, Wait: 7 * time.Second}
	for _, c := range []struct {
		name  string
		row   dialects.Row
		err   error
		b     destctl.BreakerView
		kind  dialects.OutcomeKind
		delay time.Duration
	}{
		{"a success", row(2, 2), nil, destctl.BreakerView{Probe: true, Down: true}, dialects.OutcomeDelivered, 0},
		{"a first try, no breaker", row(0, 2), down, destctl.BreakerView{}, dialects.OutcomeRetry, time.Second},
		{"the last try, no breaker", row(2, 2), down, destctl.BreakerView{}, dialects.OutcomeDead, 0},
		{"the last try, the destination working", row(2, 2), down, destctl.BreakerView{Down: false}, dialects.OutcomeDead, 0},
		{"a try before the last, the destination down", row(1, 2), down, destctl.BreakerView{Down: true}, dialects.OutcomeRetry, 2 * time.Second},
		{"the last try, the destination down, the circuit not open yet", row(2, 2), down, destctl.BreakerView{Down: true}, dialects.OutcomeDefer, 4 * time.Second},
		{"the last try, the circuit open", row(2, 2), down, open, dialects.OutcomeDefer, 7 * time.Second},
		{"a failed probe", row(0, 2), down, destctl.BreakerView{Probe: true, Down: true, Wait: 7 * time.Second}, dialects.OutcomeDefer, 7 * time.Second},
		{"a failed probe on the last try", row(2, 2), down, destctl.BreakerView{Probe: true, Down: true, Wait: 7 * time.Second}, dialects.OutcomeDefer, 7 * time.Second},
		{"the row's own fault in a probe", row(0, 2), own, destctl.BreakerView{Probe: true, Down: true}, dialects.OutcomeDead, 0},
		{"the row's own fault in an outage", row(2, 2), own, open, dialects.OutcomeDead, 0},
	} {
		o := p.decide(c.row, c.err, c.b)
		if o.Kind != c.kind || o.Delay != c.delay {
			t.Errorf("%s: %v after %v, want %v after %v", c.name, o.Kind, o.Delay, c.kind, c.delay)
		}
		if c.err != nil && o.Error == "" {
			t.Errorf("%s: no error worded", c.name)
		}
	}
}
