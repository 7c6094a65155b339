package postgres

import (
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
)

// The arguments of the statements that name their parameters (see
// dialects.Named): one struct per statement, whose fields carry the names
// the statement uses. The catalog checks both sides when the dialect opens.

// gateArgs are the parameters of the fragment Gate.
type gateArgs struct {
	Settled  *int64  `param:"settled"`
	OpenLast []int64 `param:"open_last"`
	OpenNext []int64 `param:"open_next"`
	Writers  []int64 `param:"writers"`
}

// gate binds a gate: the watermark (NULL: no gate), the open epochs, and
// the writers of the last probe (NULL: not known).
func gate(g *dialects.Gate) gateArgs {
	a := gateArgs{OpenLast: []int64{}, OpenNext: []int64{}}
	if g != nil {
		a.Settled = &g.Settled
		for _, e := range g.Open {
			a.OpenLast, a.OpenNext = append(a.OpenLast, e.Last), append(a.OpenNext, e.Next)
		}
		a.Writers = g.Writers
	}
	return a
}

// claimArgs are the parameters that both claims share.
type claimArgs struct {
	Limit   int      `param:"limit"`
	LeaseMS int64    `param:"lease_ms"`
	Token   [16]byte `param:"token"`
	Heads   int      `param:"heads"`
	gateArgs
	Rewinds       *int64   `param:"rewinds"`
	Floors        any      `param:"floors"`
	PositionKeys  any      `param:"position_keys"`
	PositionAfter any      `param:"position_after"`
	ContinueKeys  []string `param:"continue_keys"`
	ContinueAfter []int64  `param:"continue_after"`
}

// scheduleClaimArgs are OutboxClaim's.
type scheduleClaimArgs struct {
	claimArgs
	LookbackMS *int64 `param:"lookback_ms"`
}

// keysClaimArgs are OutboxClaimByKey's.
type keysClaimArgs struct {
	claimArgs
	After    string `param:"after"`
	Discover bool   `param:"discover"`
}

// stragglersArgs are OutboxStragglers'.
type stragglersArgs struct {
	gateArgs
	Rewinds    int64  `param:"rewinds"`
	Floors     any    `param:"floors"`
	LookbackMS int64  `param:"lookback_ms"`
	WithinMS   *int64 `param:"within_ms"`
}

// completeArgs are OutboxComplete's: one element of each array per
// outcome. Plain arrays of plain types: pgx encodes them without
// reflection or a driver.Valuer per element (uuid.UUID is one), which was a
// quarter of the relay's CPU on a drain.
type completeArgs struct {
	IDs         [][16]byte `param:"ids"`
	Tokens      [][16]byte `param:"tokens"`
	States      []string   `param:"states"`
	AttemptIncs []int32    `param:"attempt_incs"`
	DelaysMS    []int64    `param:"delays_ms"`
	Errors      []string   `param:"errors"`
	HasErrors   []bool     `param:"has_errors"`
}

// completeAttemptsArgs are OutboxCompleteAttempts': the outcomes, and one
// element of each of the attempts' arrays per attempt.
type completeAttemptsArgs struct {
	completeArgs
	attempts
}

// attempts are the arrays of OutboxCompleteAttempts: one element per
// outcome that carries an attempt. (Its fields' Go names differ from
// completeArgs', which it sits beside: an ambiguous name would hide both.)
type attempts struct {
	attemptRecords
	// The rows whose attempt was a probe, or a failure not counted: never
	// nil (a NULL array would make every mark NULL).
	ProbeIDs     [][16]byte `param:"probe_ids"`
	UncountedIDs [][16]byte `param:"uncounted_ids"`
}

// attemptRecords are the arrays of the attempts a completion records, one
// element per attempt.
type attemptRecords struct {
	AttemptIDs   [][16]byte  `param:"attempt_ids"`
	At           []time.Time `param:"attempted_at"`
	DurationsUS  []int64     `param:"durations_us"`
	Tries        []int32     `param:"tries"`
	Outcomes     []string    `param:"outcomes"`
	Destinations []string    `param:"destinations"`
	Statuses     []string    `param:"statuses"`
	AttemptErrs  []string    `param:"attempt_errors"`
	Responses    []string    `param:"responses"`
}

// add appends attempt t of row id, recorded as outcome.
func (a *attemptRecords) add(id [16]byte, t *dialects.Attempt, outcome string) {
	a.AttemptIDs = append(a.AttemptIDs, id)
	a.At = append(a.At, t.At)
	a.DurationsUS = append(a.DurationsUS, t.Duration.Microseconds())
	a.Tries = append(a.Tries, int32(t.Try))
	a.Outcomes = append(a.Outcomes, outcome)
	a.Destinations = append(a.Destinations, t.Destination)
	a.Statuses = append(a.Statuses, t.Status)
	a.AttemptErrs = append(a.AttemptErrs, t.Error)
	a.Responses = append(a.Responses, t.Response)
}

// completeCopiesArgs are OutboxCompleteCopies': the outcomes, their
// attempts (marked by ordinal: an outcome may carry several), and the
// copies of the delivered rows.
type completeCopiesArgs struct {
	completeArgs
	attemptRecords
	ProbeNs     []int32 `param:"probe_ns"`
	UncountedNs []int32 `param:"uncounted_ns"`
	copyArrays
}

// copyArrays are the copies OutboxCompleteCopies writes, one element per
// copy.
type copyArrays struct {
	CopyIDs          [][16]byte `param:"copy_ids"`
	CopyDestinations []string   `param:"copy_destinations"`
	CopyStates       []string   `param:"copy_states"`
	CopyAttempts     []int32    `param:"copy_attempts"`
	CopyDelaysMS     []int64    `param:"copy_delays_ms"`
	CopyErrors       []string   `param:"copy_errors"`
}

// copyListArgs are CopyList's.
type copyListArgs struct {
	States           []string    `param:"states"`
	IDs              []uuid.UUID `param:"ids"`
	Key              *string     `param:"key"`
	Since            *time.Time  `param:"since"`
	Until            *time.Time  `param:"until"`
	ErrorText        *string     `param:"error_text"`
	Destination      *string     `param:"destination"`
	AfterUpdatedAt   *time.Time  `param:"after_updated_at"`
	AfterSequence    *int64      `param:"after_sequence"`
	AfterDestination *string     `param:"after_destination"`
	Limit            int         `param:"limit"`
}

// filterArgs are the parameters of the fragment Filter, which every
// operator statement shares.
type filterArgs struct {
	States    []string    `param:"states"`
	IDs       []uuid.UUID `param:"ids"`
	Key       *string     `param:"key"`
	Since     *time.Time  `param:"since"`
	Until     *time.Time  `param:"until"`
	ErrorText *string     `param:"error_text"`
}

// filter binds an operator filter.
func filter(f dialects.Filter) filterArgs {
	a := filterArgs{States: make([]string, len(f.States)), Key: f.Key, Since: f.Since, Until: f.Until}
	for i, s := range f.States {
		a.States[i] = string(s)
	}
	if len(f.IDs) > 0 {
		a.IDs = f.IDs
	}
	if f.ErrorContains != "" {
		a.ErrorText = &f.ErrorContains
	}
	return a
}

// selectArgs are OutboxSelect's.
type selectArgs struct {
	filterArgs
	AfterSequence int64 `param:"after_sequence"`
	Limit         int   `param:"limit"`
}

// listArgs are OutboxList's.
type listArgs struct {
	filterArgs
	AfterUpdatedAt *time.Time `param:"after_updated_at"`
	AfterSequence  *int64     `param:"after_sequence"`
	Limit          int        `param:"limit"`
}

// insertArgs are OutboxInsert's: one element of each array per row.
type insertArgs struct {
	IDs            []*uuid.UUID `param:"ids"`
	Topics         []string     `param:"topics"`
	Keys           []*string    `param:"keys"`
	Payloads       []string     `param:"payloads"`
	Headers        []*string    `param:"headers"`
	AggregateTypes []*string    `param:"aggregate_types"`
	MaxAttempts    []*int32     `param:"max_attempts"`
	ScheduledAt    []*time.Time `param:"scheduled_at"`
}

// receiveArgs are InboxReceive's: one element of each array per message.
type receiveArgs struct {
	Sources        []string  `param:"sources"`
	MessageIDs     []string  `param:"message_ids"`
	Topics         []string  `param:"topics"`
	AggregateTypes []*string `param:"aggregate_types"`
	AggregateIDs   []*string `param:"aggregate_ids"`
	Payloads       []string  `param:"payloads"`
	Headers        []*string `param:"headers"`
}

// inboxRelayArgs are InboxRelay's.
type inboxRelayArgs struct {
	Limit int `param:"limit"`
	gateArgs
	MaxAttempts int   `param:"max_attempts"`
	After       int64 `param:"after"`
}
