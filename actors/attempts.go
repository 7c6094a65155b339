package actors

import (
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// History is the attempt history: the delivery attempts of a row (their
// time, duration and outcome, what the destination answered) are recorded
// by the statement that writes each attempt's outcome, so that it costs no
// statement of its own. Off, the relay records nothing.
//
// A first try that succeeds, and was no circuit probe, is told by the row
// itself (delivered, attempt 0, updated_at): it is recorded only with
// AllDeliveries, so that the happy path writes nothing but the outcome.
// Everything else is recorded: failed tries, tries the breaker did not
// count, probes, and a delivery at any later try. Readers compose the
// row's own delivery with what was recorded (dialects.History.OutboxRow),
// and a replay keeps what the row told before it sets it back.
type History struct {
	Enabled bool
	// AllDeliveries records every delivery, a first try that succeeded
	// too, with its duration and the destination's answer.
	AllDeliveries bool
	// Retention is how long attempts are kept; 0 keeps them for ever. The
	// janitor deletes older ones in the rows' retention loop (Retention's
	// Interval and BatchSize).
	Retention time.Duration
}

// attemptOf is the attempt of the i-th row of a finished Publish, or nil
// when the history does not record it: the history is off, or the row's
// first try succeeded and was no probe (see History); probe says the
// Publish was its destination's circuit probe. The rows of one Publish
// share its start and duration (a sink that takes several rows at once
// answers them together); the error, worded like last_error, and whether
// it counted are filled in by finish.
func (d *deliverer) attemptOf(p *prepared, m *deliveryDone, i int, probe bool) *dialects.Attempt {
	if !d.history || !d.recorded(p.row, m.errs[i], probe) {
		return nil
	}
	a := &dialects.Attempt{At: m.started, Duration: m.took, Try: p.row.Attempt + 1, Destination: p.dest.Name(), Probe: probe}
	if m.answers != nil {
		ans := m.answers.Of(i)
		a.Status = CutUTF8(ans.Status, 255)
		if ans.Body != "" {
			body := ans.Body
			if d.policy.redact != nil {
				body = d.policy.redact(body)
			}
			a.Response = CutUTF8(body, d.policy.maxErrorBytes)
		}
	}
	return a
}

// recorded reports whether the history records a try of r that returned
// err: all of them but a first try that succeeded and was no probe, which
// the row tells (delivered, attempt 0), unless every delivery is recorded.
// A nil err is a delivery whatever the breaker says (outcomePolicy.decide).
func (d *deliverer) recorded(r dialects.Row, err error, probe bool) bool {
	return err != nil || probe || r.Attempt > 0 || d.allDeliveries
}
