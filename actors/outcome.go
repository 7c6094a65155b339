package actors

import (
	"github.com/queuebox/queuebox/actors/internal/destctl"
	"math"
	"math/rand/v2"
	"time"
	"unicode/utf8"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/sinks"
)

// Backoff is the retry delay policy: Initial, then each delay Multiplier
// times the last, up to Max, spread by ±Jitter (a fraction) so that rows that
// failed together do not come back together.
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

// outcomePolicy turns the result of a delivery into the row's outcome:
// delivered, retried after a backoff, or dead. It also words last_error.
type outcomePolicy struct {
	backoff       Backoff
	maxErrorBytes int
	// redact removes secrets from last_error (nil: nothing to remove).
	redact func(string) string
}

// decide turns a delivery result into the row's outcome. With a circuit
// breaker an outage costs time, not rows: a failed probe, and a failed last
// try while the destination is down, are not counted (OutcomeDefer: the row
// waits, its attempt unchanged). A failure that is the row's own (a
// permanent error) is dead whatever the breaker says.
func (p outcomePolicy) decide(r dialects.Row, err error, b destctl.BreakerView) dialects.Outcome {
	o := dialects.Outcome{Claim: r.Claim}
	switch {
	case err == nil:
		o.Kind = dialects.OutcomeDelivered
	case sinks.IsPermanent(err):
		o.Kind, o.Error = dialects.OutcomeDead, p.lastError(err)
	case b.Probe || (r.Attempt >= r.MaxAttempts && b.Down):
		o.Kind, o.Error, o.Delay = dialects.OutcomeDefer, p.lastError(err), b.Wait
		if o.Delay <= 0 {
			o.Delay = p.retryDelay(r, err)
		}
	case r.Attempt >= r.MaxAttempts:
		o.Kind, o.Error = dialects.OutcomeDead, p.lastError(err)
	default:
		o.Kind, o.Error = dialects.OutcomeRetry, p.lastError(err)
		o.Delay = p.retryDelay(r, err)
	}
	return o
}

// retryDelay is how long a row waits before its next try after err: the
// backoff, or the destination's Retry-After when that is longer (up to the
// backoff's maximum).
func (p outcomePolicy) retryDelay(r dialects.Row, err error) time.Duration {
	d := p.backoff.Delay(r.Attempt+1, rand.Float64())
	if after, ok := sinks.RetryAfter(err); ok && after > d {
		d = min(after, p.backoff.Max)
	}
	return d
}

// dead is the outcome of a row that can never be delivered, for reason.
func (p outcomePolicy) dead(r dialects.Row, reason error) dialects.Outcome {
	return dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeDead, Error: p.lastError(reason)}
}

// release is the outcome of a row handed back to pending untouched.
func release(r dialects.Row) dialects.Outcome {
	return dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeRelease}
}

// lastError redacts secrets and cuts the text to maxErrorBytes on a UTF-8
// boundary.
func (p outcomePolicy) lastError(err error) string {
	s := err.Error()
	if p.redact != nil {
		s = p.redact(s)
	}
	return CutUTF8(s, p.maxErrorBytes)
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
