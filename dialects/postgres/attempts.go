package postgres

import (
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// attempts are the arrays of OutboxCompleteAttempts: one element per
// outcome that carries an attempt.
type attempts struct {
	ids                              [][16]byte
	at                               []time.Time
	us                               []int64
	try                              []int32
	outcome, dest, status, err, resp []string
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
	a := &attempts{ids: make([][16]byte, 0, n), at: make([]time.Time, 0, n), us: make([]int64, 0, n), try: make([]int32, 0, n),
		outcome: make([]string, 0, n), dest: make([]string, 0, n), status: make([]string, 0, n), err: make([]string, 0, n), resp: make([]string, 0, n)}
	for i := range outcomes {
		o := &outcomes[i]
		t := o.Attempt
		if t == nil {
			continue
		}
		a.ids = append(a.ids, o.ID)
		a.at = append(a.at, t.At)
		a.us = append(a.us, t.Duration.Microseconds())
		a.try = append(a.try, int32(t.Try))
		a.outcome = append(a.outcome, o.Kind.String())
		a.dest = append(a.dest, t.Destination)
		a.status = append(a.status, t.Status)
		a.err = append(a.err, t.Error)
		a.resp = append(a.resp, t.Response)
	}
	return a
}
