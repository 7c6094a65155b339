package postgres

import (
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// newAttemptRecords makes room for n attempts; its arrays are never nil,
// so that no attempt binds a NULL array.
func newAttemptRecords(n int) attemptRecords {
	return attemptRecords{AttemptIDs: make([][16]byte, 0, n), At: make([]time.Time, 0, n), DurationsUS: make([]int64, 0, n), Tries: make([]int32, 0, n),
		Outcomes: make([]string, 0, n), Destinations: make([]string, 0, n), Statuses: make([]string, 0, n), AttemptErrs: make([]string, 0, n),
		Responses: make([]string, 0, n)}
}

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
	a := &attempts{attemptRecords: newAttemptRecords(n), ProbeIDs: [][16]byte{}, UncountedIDs: [][16]byte{}}
	for i := range outcomes {
		o := &outcomes[i]
		t := o.Attempt
		if t == nil {
			continue
		}
		a.add(o.ID, t, dialects.RecordedOutcome(o.Kind))
		if t.Probe {
			a.ProbeIDs = append(a.ProbeIDs, o.ID)
		}
		if t.Uncounted {
			a.UncountedIDs = append(a.UncountedIDs, o.ID)
		}
	}
	return a
}
