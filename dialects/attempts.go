package dialects

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Attempt is one delivery attempt of a row, as the attempt history keeps
// it: the relay measures it in its delivery path and the outcome carries
// it to the statement that writes the outcome, which records it in the
// same statement (see Outcome.Attempt).
type Attempt struct {
	// At is when the delivery started, Duration how long the destination
	// took (the relay's clock).
	At       time.Time
	Duration time.Duration
	// Try is the row's attempt counter before this attempt, plus one: 1
	// for the first try. A replay starts the counter again.
	Try int
	// Probe: the attempt was its destination's circuit probe (the one
	// delivery an open circuit lets through). Uncounted: it failed and the
	// circuit breaker did not count it (OutcomeDefer): the row's attempt
	// stays, and its next try has the same number.
	Probe, Uncounted bool
	// Destination is the name of the destination it went to.
	Destination string
	// Status is what the destination answered ("HTTP 500 Internal Server
	// Error", a broker's acknowledgement); "" when it did not answer.
	Status string
	// Error is the failure, redacted and cut like last_error ("" on a
	// delivery); Response an excerpt of the response's body, redacted
	// and cut the same way.
	Error    string
	Response string
}

// RecordedAttempt is an entry read back from the history: an attempt with
// how it ended (delivered, retry: failed, to be tried again, or dead), or
// an operator's replay (OutcomeReplayed): the row went back to pending and
// the count of its tries started again, ReplayedBy says who or what
// replayed it, At when (the database's clock), and the rest is zero.
type RecordedAttempt struct {
	Attempt
	Outcome    string
	ReplayedBy string
}

// OutcomeReplayed is the outcome of a replay's entry in the history.
const OutcomeReplayed = "replayed"

// RecordedOutcome is the outcome an attempt is recorded with: a failure
// that the circuit breaker did not count (OutcomeDefer) is recorded as a
// retry, which it is to the row (it is tried again), with
// Attempt.Uncounted set.
func RecordedOutcome(k OutcomeKind) string {
	if k == OutcomeDefer {
		return OutcomeRetry.String()
	}
	return k.String()
}

// RowDetail is one outbox row as an operator inspects it: everything
// ListedRow shows, its payload and headers as stored, when it is due, and
// its attempts, oldest first.
type RowDetail struct {
	ListedRow
	Payload     string
	Headers     string
	ScheduledAt time.Time
	Attempts    []RecordedAttempt
	// MoreAttempts is true when the row has more attempts than were read:
	// the newest are kept.
	MoreAttempts bool
}

// History reads one row with its attempts, and deletes old attempts. The
// relay writes attempts with the outcomes (OutboxComplete).
type History interface {
	// OutboxRow reads the row id with up to attempts of its newest
	// attempts; found is false when no row has that id (the attempts of
	// a row that retention deleted are not shown).
	OutboxRow(ctx context.Context, id uuid.UUID, attempts int) (d RowDetail, found bool, err error)
	// AttemptsPurge deletes up to batch attempts made more than olderThan
	// ago (on the database clock), oldest first.
	AttemptsPurge(ctx context.Context, olderThan time.Duration, batch int) (int, error)
}

// AttemptStatements are a dialect's statements of the attempt history; a
// dialect's catalog embeds them. OutboxRow takes the row's id (text) and
// returns id (text), topic, key, aggregate type, state, attempt, max
// attempts, sequence, created, updated and scheduled times, last error,
// payload and headers (text); AttemptsOfRow takes the id and a limit and
// returns the newest attempts, newest first: time, duration in
// microseconds, try, outcome, destination, status, error, response,
// probe, counted, replayed by;
// AttemptsPurge takes an age (see AttemptTables.Age) and a limit and
// returns the count it deleted.
type AttemptStatements struct {
	OutboxRow, AttemptsOfRow, AttemptsPurge string
}

// AttemptTables is History over a dialect's connection pool, written once
// for every dialect (like DestinationTables).
type AttemptTables struct {
	Conn       Conn
	Statements *AttemptStatements
	// Age binds the age of AttemptsPurge in the unit its statement takes
	// (PostgreSQL milliseconds, SQL Server seconds).
	Age func(time.Duration) any
}

func (t AttemptTables) OutboxRow(ctx context.Context, id uuid.UUID, attempts int) (d RowDetail, found bool, err error) {
	err = t.Conn.Query(ctx, t.Statements.OutboxRow, []any{id.String()}, func(s Scanner) error {
		found = true
		var sid, state string
		if err := s.Scan(&sid, &d.Topic, &d.Key, &d.AggregateType, &state, &d.Attempt, &d.MaxAttempts, &d.Sequence,
			&d.CreatedAt, &d.UpdatedAt, &d.ScheduledAt, &d.LastError, &d.Payload, &d.Headers); err != nil {
			return err
		}
		d.State = State(state)
		var err error
		d.ID, err = uuid.Parse(sid)
		return err
	})
	if err != nil || !found {
		return d, found, err
	}
	if attempts <= 0 {
		return d, true, nil
	}
	err = t.Conn.Query(ctx, t.Statements.AttemptsOfRow, []any{id.String(), attempts + 1}, func(s Scanner) error {
		var a RecordedAttempt
		var us int64
		var dest, status, errText, resp, by *string
		var counted bool
		if err := s.Scan(&a.At, &us, &a.Try, &a.Outcome, &dest, &status, &errText, &resp, &a.Probe, &counted, &by); err != nil {
			return err
		}
		a.Duration, a.Uncounted = time.Duration(us)*time.Microsecond, !counted
		a.Destination, a.Status, a.Error, a.Response, a.ReplayedBy = deref(dest), deref(status), deref(errText), deref(resp), deref(by)
		d.Attempts = append(d.Attempts, a)
		return nil
	})
	if err != nil {
		return d, true, fmt.Errorf("reading the attempts of row %s: %w", id, err)
	}
	if len(d.Attempts) > attempts {
		d.Attempts, d.MoreAttempts = d.Attempts[:attempts], true
	}
	// Newest first from the database, oldest first for people.
	for i, j := 0, len(d.Attempts)-1; i < j; i, j = i+1, j-1 {
		d.Attempts[i], d.Attempts[j] = d.Attempts[j], d.Attempts[i]
	}
	placeReplays(d.Attempts)
	return d, true, nil
}

// placeReplays puts each replay right after the attempt that ended the row
// before it, when the clocks ordered them otherwise. Attempts are stamped
// with their relay's clock and replays with the database's, so a relay
// whose clock is behind may stamp the first try after a replay earlier
// than the replay. The order is known all the same: once an attempt is
// written as delivered or dead, the row changes only by a replay, so the
// attempts that follow the first such attempt since the previous replay
// came after the next replay. (A replay is never stamped before the
// attempt that ended the row: the statement stamps it after the row's
// latest attempt.)
func placeReplays(h []RecordedAttempt) {
	from := 0 // the first entry after the previous replay
	for i := range h {
		if h[i].Outcome != OutcomeReplayed {
			continue
		}
		end := -1 // the first attempt since from that ended the row
		for j := from; j < i && end < 0; j++ {
			if h[j].Outcome == OutcomeDelivered.String() || h[j].Outcome == OutcomeDead.String() {
				end = j
			}
		}
		if end >= 0 && end < i-1 {
			r := h[i]
			copy(h[end+2:i+1], h[end+1:i])
			h[end+1] = r
			from = end + 2
		} else {
			from = i + 1
		}
	}
}

func (t AttemptTables) AttemptsPurge(ctx context.Context, olderThan time.Duration, batch int) (int, error) {
	var n int
	err := t.Conn.Query(ctx, t.Statements.AttemptsPurge, []any{t.Age(olderThan), batch}, func(s Scanner) error {
		return s.Scan(&n)
	})
	return n, err
}

// ReplayMark is the parameter of OutboxReplayIDs' record of the replay:
// nil for "" (record nothing), else by cut to the 255 characters its
// column holds.
func ReplayMark(by string) *string {
	if by == "" {
		return nil
	}
	if r := []rune(by); len(r) > 255 {
		by = string(r[:255])
	}
	return &by
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
