package dialects

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
)

// InboxState is the life-cycle position of an inbox row: received, then
// relayed (an outbox row with the same id exists).
type InboxState string

// The states of an inbox row.
const (
	InboxReceived InboxState = "received"
	InboxRelayed  InboxState = "relayed"
)

// InboxMessage is a message as a source received it, ready to be stored.
type InboxMessage struct {
	// Source is the configured source's name; MessageID the sender's id,
	// unique per source.
	Source, MessageID string
	Topic             string
	// AggregateType and AggregateID are nil for a null column; an
	// AggregateID becomes the outbox row's key.
	AggregateType, AggregateID *string
	// Payload is the body, valid JSON.
	Payload []byte
	// Headers is a JSON object of strings; nil stores {}.
	Headers []byte
}

// InboxReceipt is what storing one message did.
type InboxReceipt struct {
	// ID is the inbox row's id: the new row's, or for a duplicate the row
	// that was there already.
	ID uuid.UUID
	// Stored is true when this call stored the message, false when a row
	// of the same source and message id existed (a duplicate: nothing was
	// written).
	Stored bool
}

// InboxRelayParams are the inputs of one relay transaction.
type InboxRelayParams struct {
	// Limit is the most inbox rows to relay.
	Limit int
	// MaxAttempts is the max_attempts of the outbox rows it creates.
	MaxAttempts int
	// Gate, when set, restricts keyed rows (a non-empty aggregate_id) to
	// settled ones, as it does for an outbox claim; nil relays every row, as
	// a database that cannot tell must.
	Gate *Gate
	// After is a sequence below which no inbox row is received: the relay
	// starts its walk past it, and so past every version that earlier
	// relays left behind (see InboxRelayResult.Through). 0 starts from the
	// oldest.
	After int64
}

// InboxRelayResult is the result of one relay transaction.
type InboxRelayResult struct {
	// Busy means another relay (another replica) held this inbox's relay
	// lock: nothing was done, and the caller tries again later.
	Busy bool
	// Relayed counts the inbox rows marked relayed; Created the outbox rows
	// inserted for them. Created is smaller when an outbox row with one of
	// the ids existed already (it is left as it is).
	Relayed, Created int
	// Through is the largest inbox sequence this transaction relayed (0:
	// none). Every received row up to the smaller of Through and the gate's
	// watermark was visible to it, so was relayed: the next relay can start
	// after that (InboxRelayParams.After).
	Through int64
}

// InboxStats summarises the inbox table.
type InboxStats struct {
	// Rows counts rows per state; both states are present.
	Rows map[InboxState]int64
	// OldestReceived is the age of the oldest row not yet relayed (its
	// received_at on the database clock); zero when there is none.
	OldestReceived time.Duration
}

// Inbox is what the inbox's sources use: storing what they receive, once
// per source and message id.
type Inbox interface {
	// InboxReceive stores each message unless a row of the same source and
	// message id exists, in one transaction, and returns one receipt per
	// message, in order. A message repeated within msgs is stored once;
	// its later copies are duplicates.
	InboxReceive(ctx context.Context, msgs []InboxMessage) ([]InboxReceipt, error)
}

// ErrInvalidValue means the database refused a value of a message (a
// JSON escape PostgreSQL's jsonb cannot hold, a value too long for its
// column): storing it again cannot succeed. InboxReceive returns it
// wrapped with the database's reason.
var ErrInvalidValue = errors.New("the database refused a value of the message")

// InboxRelayLockName names the lock that makes relays of one inbox table
// take turns: one relay transaction at a time per schema and table.
func InboxRelayLockName(n Names) string {
	return "queuebox.inbox-relay." + n.Schema + "." + n.Inbox
}

// InboxStatsFrom assembles InboxStats from a dialect's two reads: rows per
// state (a (name, count) query) and the oldest received row's wait. Both
// states are present, counted or not.
func InboxStatsFrom(byState func(each func(string, int64)) error, oldest func() (time.Duration, error)) (InboxStats, error) {
	st := InboxStats{Rows: map[InboxState]int64{InboxReceived: 0, InboxRelayed: 0}}
	if err := byState(func(s string, n int64) { st.Rows[InboxState(s)] = n }); err != nil {
		return st, err
	}
	var err error
	st.OldestReceived, err = oldest()
	return st, err
}
