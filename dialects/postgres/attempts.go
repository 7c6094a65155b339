package postgres

import (
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// attemptArrays binds the attempts the outcomes carry; nil when none does
// (the history is off, or no delivery was tried), and the plain
// OutboxComplete runs.
func attemptArrays(outcomes []dialects.Outcome) *attempts {
	n := 0
	for i := range outcomes {
		if outcomes[i].Attempt != nil {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	a := &attempts{AttemptIDs: make([][16]byte, 0, n), At: make([]time.Time, 0, n), DurationsUS: make([]int64, 0, n), Tries: make([]int32, 0, n),
		Outcomes: make([]string, 0, n), Destinations: make([]string, 0, n), Statuses: make([]string, 0, n), AttemptErrs: make([]string, 0, n),
		Responses: make([]string, 0, n), ProbeIDs: [][16]byte{}, UncountedIDs: [][16]byte{}}
	for i := range outcomes {
		o := &outcomes[i]
		t := o.Attempt
		if t == nil {
			continue
		}
		a.AttemptIDs = append(a.AttemptIDs, o.ID)
		a.At = append(a.At, t.At)
		a.DurationsUS = append(a.DurationsUS, t.Duration.Microseconds())
		a.Tries = append(a.Tries, int32(t.Try))
		a.Outcomes = append(a.Outcomes, dialects.RecordedOutcome(o.Kind))
		a.Destinations = append(a.Destinations, t.Destination)
		a.Statuses = append(a.Statuses, t.Status)
		a.AttemptErrs = append(a.AttemptErrs, t.Error)
		a.Responses = append(a.Responses, t.Response)
		if t.Probe {
			a.ProbeIDs = append(a.ProbeIDs, o.ID)
		}
		if t.Uncounted {
			a.UncountedIDs = append(a.UncountedIDs, o.ID)
		}
	}
	return a
}
