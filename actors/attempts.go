package actors

import (
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// History is the attempt history: every delivery attempt of a row (its
// time, duration and outcome, what the destination answered) is recorded
// by the statement that writes the attempt's outcome, so that it costs no
// statement of its own. Off, the relay records nothing.
type History struct {
	Enabled bool
	// Retention is how long attempts are kept; 0 keeps them for ever. The
	// janitor deletes older ones in the rows' retention loop (Retention's
	// Interval and BatchSize).
	Retention time.Duration
}

// attemptOf is the attempt of the i-th row of a finished Publish, or nil
// when the history is off; probe says the Publish was its destination's
// circuit probe. The rows of one Publish share its start and duration (a
// sink that takes several rows at once answers them together); the error,
// worded like last_error, and whether it counted are filled in by finish.
func (d *deliverer) attemptOf(p *prepared, m *deliveryDone, i int, probe bool) *dialects.Attempt {
	if !d.history {
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
