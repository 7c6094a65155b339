package dialects

import (
	"context"
	"fmt"
	"slices"
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
// replayed it, At when (the database's clock), RowDelivered what the row
// told of its delivery when it was delivered, and the rest is zero.
//
// An entry with FromRow is no recorded attempt but a delivery the row
// tells: the relay records a first try that succeeds in no entry of its
// own (see OutboxRow). Its Try and At (when the delivery was written, the
// database's clock) come from the row; its duration, destination, status
// and response are unknown, and zero.
type RecordedAttempt struct {
	Attempt
	Outcome      string
	ReplayedBy   string
	RowDelivered *RowDelivery
	FromRow      bool
}

// RowDelivery is what a row tells of its delivery: the try it was
// delivered at (attempt + 1) and when the delivery was written
// (updated_at). A replay of a delivered row keeps it in its entry, since
// it sets those columns back.
type RowDelivery struct {
	Try int
	At  time.Time
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
// its attempts, oldest first, with the deliveries the row told (FromRow).
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

// Row is the detail's row as a claim returns it: what a route filter reads.
func (d RowDetail) Row() Row {
	r := Row{Claim: Claim{ID: d.ID}, Topic: d.Topic, Payload: []byte(d.Payload), Headers: []byte(d.Headers),
		AggregateType: d.AggregateType, Attempt: d.Attempt, MaxAttempts: d.MaxAttempts, Sequence: d.Sequence, CreatedAt: d.CreatedAt}
	if d.Key != nil {
		r.Key = *d.Key
	}
	return r
}

// History reads one row with its attempts, and deletes old attempts. The
// relay writes attempts with the outcomes (OutboxComplete).
type History interface {
	// OutboxRow reads the row id with up to attempts of its newest
	// entries; found is false when no row has that id (the attempts of a
	// row that retention deleted are not shown). The entries compose the
	// history with what the row tells: a delivery that no entry records
	// (a first try that succeeded) is shown from the row, marked FromRow,
	// where it happened: last for a delivered row, before the replay that
	// set a delivered row back (RecordedAttempt.RowDelivered).
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
// probe, counted, replayed by, and on a replay of a delivered row the
// try it was delivered at and when (NULL otherwise);
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
		var deliveredTry *int
		var deliveredAt *time.Time
		if err := s.Scan(&a.At, &us, &a.Try, &a.Outcome, &dest, &status, &errText, &resp, &a.Probe, &counted, &by,
			&deliveredTry, &deliveredAt); err != nil {
			return err
		}
		a.Duration, a.Uncounted = time.Duration(us)*time.Microsecond, !counted
		a.Destination, a.Status, a.Error, a.Response, a.ReplayedBy = deref(dest), deref(status), deref(errText), deref(resp), deref(by)
		if deliveredTry != nil && deliveredAt != nil {
			a.RowDelivered = &RowDelivery{Try: *deliveredTry, At: *deliveredAt}
		}
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
	slices.Reverse(d.Attempts)
	d.Attempts = placeReplays(d.Attempts)
	if d.State == Delivered && !deliveredSince(d.Attempts, lastReplay(d.Attempts)+1) {
		// Delivered, and no entry since the last replay says so: the
		// relay recorded no first try that succeeded, which the row tells.
		d.Attempts = append(d.Attempts, told(RowDelivery{Try: d.Attempt + 1, At: d.UpdatedAt}))
	}
	if over := len(d.Attempts) - attempts; over > 0 {
		d.Attempts, d.MoreAttempts = d.Attempts[over:], true
	}
	return d, true, nil
}

// told is the entry of a delivery the row tells and no entry records.
func told(r RowDelivery) RecordedAttempt {
	return RecordedAttempt{Attempt: Attempt{At: r.At, Try: r.Try}, Outcome: OutcomeDelivered.String(), FromRow: true}
}

// lastReplay is the index of the last replay of the row in h, -1 when
// there is none.
func lastReplay(h []RecordedAttempt) int {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].rowReplay() {
			return i
		}
	}
	return -1
}

// rowReplay reports whether a is the entry of a replay of the row. The
// replay of one destination's copy of a fan-out row (CopyReplay,
// CopyBackfill) names its destination: it sets the row back in nothing,
// and is an entry like an attempt.
func (a RecordedAttempt) rowReplay() bool { return a.Outcome == OutcomeReplayed && a.Destination == "" }

// deliveredSince reports whether an entry of h from from on is a delivery.
func deliveredSince(h []RecordedAttempt, from int) bool {
	return slices.ContainsFunc(h[from:], func(a RecordedAttempt) bool { return a.Outcome == OutcomeDelivered.String() })
}

// placeReplays returns h, oldest first, with each replay of the row where
// it happened, and before a replay of a delivered row that delivery, shown
// from the row, when no entry records it. A copy's replay stays where its
// time puts it (see rowReplay).
//
// Attempts are stamped with their relay's clock and replays with the
// database's, so a relay whose clock is behind may stamp the first try
// after a replay earlier than the replay. The order is known all the
// same: once a row is delivered or dead it changes only by a replay, so
// the entries that follow the attempt that ended the row came after the
// next replay. (A replay is never stamped before the attempt that ended the
// row: the statement stamps it after the row's latest attempt.) A replay of
// a delivered row says when the delivery was written (RowDelivered, the
// database's clock): when no entry since the previous replay is a
// delivery, the relay recorded none (a first try that succeeded), the
// row's delivery goes there, and the entries stamped after it came after
// the replay.
func placeReplays(h []RecordedAttempt) []RecordedAttempt {
	out := make([]RecordedAttempt, 0, len(h))
	from := 0 // in out, the first entry after the previous replay
	for _, a := range h {
		if !a.rowReplay() {
			out = append(out, a)
			continue
		}
		seg := out[from:]
		d := a.RowDelivered
		end := slices.IndexFunc(seg, func(e RecordedAttempt) bool {
			return e.Outcome == OutcomeDelivered.String() || (d == nil && e.Outcome == OutcomeDead.String())
		})
		at := len(seg) // where in seg the replay goes
		switch {
		case end >= 0:
			at = end + 1
		case d != nil:
			if i := slices.IndexFunc(seg, func(e RecordedAttempt) bool { return e.At.After(d.At) }); i >= 0 {
				at = i
			}
		}
		after := slices.Clone(seg[at:])
		out = out[:from+at]
		if end < 0 && d != nil {
			out = append(out, told(*d))
		}
		out = append(out, a)
		from = len(out)
		out = append(out, after...)
	}
	return out
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
