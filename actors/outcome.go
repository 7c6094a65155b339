package actors

import (
	"math"
	"math/rand/v2"
	"time"
	"unicode/utf8"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/sinks"
)

// Backoff is the retry delay policy of behaviour.md.
type Backoff struct {
	Initial    time.Duration
	Multiplier float64
	Max        time.Duration
	Jitter     float64
}

// Delay returns the delay before retry n (n = the new attempt, from 1),
// spread by ±Jitter, and capped at Max.
func (b Backoff) Delay(n int, rnd float64) time.Duration {
	if n < 1 {
		n = 1
	}
	d := float64(b.Initial) * math.Pow(b.Multiplier, float64(n-1))
	if d > float64(b.Max) || math.IsInf(d, 0) {
		d = float64(b.Max)
	}
	d *= 1 + b.Jitter*(2*rnd-1)
	if d > float64(b.Max) {
		d = float64(b.Max)
	}
	if d < 0 {
		d = 0
	}
	return time.Duration(d)
}

// decide turns a delivery result into the row's outcome.
func (e *Engine) decide(r dialects.Row, err error) dialects.Outcome {
	o := dialects.Outcome{Claim: r.Claim}
	switch {
	case err == nil:
		o.Kind = dialects.OutcomeDelivered
	case sinks.IsPermanent(err) || r.Attempt >= r.MaxAttempts:
		o.Kind, o.Error = dialects.OutcomeDead, e.lastError(err)
	default:
		o.Kind, o.Error = dialects.OutcomeRetry, e.lastError(err)
		o.Delay = e.opts.Backoff.Delay(r.Attempt+1, rand.Float64())
		if after, ok := sinks.RetryAfter(err); ok && after > o.Delay {
			o.Delay = min(after, e.opts.Backoff.Max)
		}
	}
	return o
}

// lastError redacts secrets and cuts the text to MaxErrorBytes on a UTF-8
// boundary.
func (e *Engine) lastError(err error) string {
	s := err.Error()
	if e.opts.Redact != nil {
		s = e.opts.Redact(s)
	}
	return CutUTF8(s, e.opts.MaxErrorBytes)
}

// CutUTF8 cuts s to at most n bytes without splitting a character.
func CutUTF8(s string, n int) string {
	if n <= 0 || len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}
