package dialects

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Fan-out: a route may send a row to several destinations. The relay
// delivers the row to each of them in one pass, in its own claim of the
// outbox row, and the outbox row is delivered when that pass ends. A
// destination whose delivery did not end well in the pass (it failed and
// is retried, it was held by a pause, an open circuit or a full flow, it
// went dead, or its rows of the key already wait in the copies table) gets
// a copy: a row of QueueBox's own copies table, created by the statement
// that completes the outbox row, in the same transaction. The copy holds
// what delivering it needs (topic, key, payload, headers, aggregate type,
// the row's sequence and creation time), and its own state, attempt,
// max_attempts, schedule, lease and last_error. A second claim path (the
// Copies methods) delivers the copies; each keeps its row's id as the
// message id.
//
// A destination delivered in the pass is told by the row (it is
// delivered) and costs no copy: a fan-out row whose destinations all
// answered costs its outbox row's claim and completion, like any row.
//
// Order. A destination's copies of one key are delivered in the rows'
// sequence order: a copy is claimable only while no copy of the same
// destination and key with a smaller sequence is pending or processing,
// and no outbox row of the key with a smaller sequence is pending or
// processing (its pass may still write an earlier copy). The pass itself
// delivers a destination's rows of a key directly only while that
// destination has no pending or processing copy of the key
// (ClaimParams.Lanes, Claimed.Blocked); otherwise the row's delivery to
// that destination becomes a pending copy at once (CopyBehind).

// Lane is one destination's view of one key: the unit of order of a
// fan-out.
type Lane struct {
	Destination string
	Key         string
}

// CopyOf marks a Row that a copies claim returned: ID is then the copy's
// own id (for the claim, the lease and the completion), and CopyOf says
// which outbox row it copies and where it goes.
type CopyOf struct {
	// RowID is the outbox row's id: the message id every destination gets.
	RowID       uuid.UUID
	Destination string
}

// CopyKind says why a destination of a fan-out row gets a copy.
type CopyKind uint8

// The reasons for a copy.
const (
	// CopyRetry: the delivery failed and is tried again after Delay;
	// attempt = Attempt (the row's attempt + 1), last_error = Error.
	CopyRetry CopyKind = iota + 1
	// CopyDefer: the destination was held (paused, circuit open, flow
	// full); pending, due after Delay, attempt unchanged (Attempt).
	CopyDefer
	// CopyBehind: the destination has earlier copies of this key pending
	// or processing, or its lane stopped earlier in this pass: pending,
	// due now, attempt unchanged.
	CopyBehind
	// CopyDead: the delivery will not be tried again; last_error = Error.
	CopyDead
)

// Copy is one destination's part of a fan-out row, written with the row's
// outcome (Outcome.Copies) when that destination's delivery did not end
// well in the row's pass. An existing copy of the same row and
// destination (a replayed row's) is replaced.
type Copy struct {
	Destination string
	Kind        CopyKind
	// Attempt is the copy's attempt column: failed tries counted so far.
	Attempt int
	// Delay is how long after now (database clock) a pending copy is due.
	Delay time.Duration
	// Error is last_error (redacted and cut); "" leaves it null.
	Error string
}

// CopyListed is a copy as operator commands show it: the row it copies,
// its destination and its own state.
type CopyListed struct {
	ListedRow
	Destination string
	// RowID is the outbox row's id (ListedRow.ID is the copy's).
	RowID       uuid.UUID
	ScheduledAt time.Time
}

// CopyFilter selects copies for listing and replay: Filter's fields as for
// rows (States, Key, Since/Until on the copy's updated_at, ErrorContains,
// IDs of outbox rows), and Destination ("" any).
type CopyFilter struct {
	Filter
	Destination string
}

// CopyListParams are the inputs of one page of CopyList.
type CopyListParams struct {
	Filter CopyFilter
	After  *Cursor
	// AfterDestination is the destination of the copy After stands at:
	// copies of one row share its sequence, and those one completion
	// wrote their updated_at too, so a page goes on after (updated_at,
	// sequence, destination).
	AfterDestination string
	Limit            int
}

// DestinationCount is how many copies of one destination are in one state.
type DestinationCount struct {
	Destination string
	State       State
	Rows        int64
	// OldestDue is how long the oldest due pending copy that is its lane's
	// head has waited (Pending only; 0 when none).
	OldestDue time.Duration
}

// Copies is the fan-out's copies table: the claim path that delivers
// copies (as Relay's Outbox* methods, with the same meaning unless said
// otherwise) and what operators do with copies.
type Copies interface {
	// CopyClaim claims up to p.Limit claimable copies (see the doc above:
	// lane heads that are due, and the copies right behind each head, in
	// sequence order) with p.Token and p.Lease. It honours Limit, MaxHeads,
	// Lease and Token, and may ignore Gate, Walk, After, Continue, Bounds
	// and Settle (copies are written by the relay, in order: no gate is
	// needed). Rows have CopyOf set, Key the row's key, Attempt and
	// MaxAttempts the copy's; they are ordered by destination, key,
	// sequence.
	CopyClaim(ctx context.Context, p ClaimParams) (Claimed, error)
	// CopyRenewLeases is OutboxRenewLeases for copies.
	CopyRenewLeases(ctx context.Context, claims []Claim, lease time.Duration) (lost []Claim, err error)
	// CopyComplete is OutboxComplete for copies (Outcome.Copies is
	// ignored); an Attempt is recorded in the attempt history under the
	// outbox row's id, with the copy's destination.
	CopyComplete(ctx context.Context, outcomes []Outcome) (lost []Claim, err error)
	// CopyReleaseExpired returns up to limit processing copies whose lease
	// has passed to pending, except those in keep.
	CopyReleaseExpired(ctx context.Context, limit int, keep []uuid.UUID) (int, error)
	// CopyProbe reads the copies' change counter (it moves whenever a copy
	// is written pending: created, retried, deferred, released or
	// replayed) and when the earliest pending copy scheduled later comes
	// due (Probe.Last, NextDue and Later; the other fields are zero).
	CopyProbe(ctx context.Context) (Probe, error)
	// CopyPurge deletes up to p.Batch copies in p.State last updated more
	// than p.OlderThan ago.
	CopyPurge(ctx context.Context, p PurgeParams) (int, error)

	// CopyCounts counts copies per destination and state.
	CopyCounts(ctx context.Context) ([]DestinationCount, error)
	// CopyList returns one page of copies matching p.Filter, newest update
	// first (TopicMatch is applied above the dialect); a filter without
	// States selects copies in any state.
	CopyList(ctx context.Context, p CopyListParams) ([]CopyListed, error)
	// CopiesOfRow lists the copies of one outbox row.
	CopiesOfRow(ctx context.Context, rowID uuid.UUID) ([]CopyListed, error)
	// CopyReplay puts the copies of destination for the outbox rows ids
	// that are in one of states back to pending (attempt 0, no error, due
	// now), never a processing one, and records the replay in the history
	// (by, as OutboxReplayIDs). It returns how many it put back.
	CopyReplay(ctx context.Context, destination string, rowIDs []uuid.UUID, states []State, by string) (int, error)
	// CopyBackfill creates a pending copy for destination of each outbox
	// row ids that is delivered and has no copy of that destination (a
	// destination added to a route later), and returns how many it
	// created.
	CopyBackfill(ctx context.Context, destination string, rowIDs []uuid.UUID, by string) (int, error)
}
