package sqlserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	mssql "github.com/microsoft/go-mssqldb"

	"github.com/queuebox/queuebox/dialects"
)

// InboxStatements are the inbox's statements of queries.sql (the section
// "The inbox"); Catalog embeds them. InboxProbe and InboxWriters are the
// outbox's Probe and Writers templates over the inbox's sequence and table:
// the writers are the open transactions that hold a lock on the inbox.
type InboxStatements struct {
	InboxReceive, InboxRelayLock, InboxRelay, InboxProbe, InboxWriters string
	InboxCountByState, InboxOldestReceived                             string
}

type receiveArg struct {
	S  string  `json:"s"`
	M  string  `json:"m"`
	T  string  `json:"t"`
	AT *string `json:"at,omitempty"`
	AI *string `json:"ai,omitempty"`
	P  string  `json:"p"`
	H  *string `json:"h,omitempty"`
}

// ReceiveArg renders the JSON parameter of InboxReceive (exported for the
// rendered-SQL tests).
func ReceiveArg(msgs []dialects.InboxMessage) string {
	args := make([]receiveArg, len(msgs))
	for i, m := range msgs {
		a := receiveArg{S: m.Source, M: m.MessageID, T: m.Topic, AT: m.AggregateType, AI: m.AggregateID, P: string(m.Payload)}
		if m.Headers != nil {
			h := string(m.Headers)
			a.H = &h
		}
		args[i] = a
	}
	return jsonArg(args)
}

// deadlockAttempts bounds the retries of a receive chosen as a deadlock
// victim: two batches that hold key ranges of the unique index can wait on
// each other, and SQL Server then ends one of them.
const deadlockAttempts = 3

func (d *Dialect) InboxReceive(ctx context.Context, msgs []dialects.InboxMessage) (_ []dialects.InboxReceipt, err error) {
	defer func() { err = MapError(err) }()
	if len(msgs) == 0 {
		return nil, nil
	}
	arg := ReceiveArg(msgs)
	for attempt := 1; ; attempt++ {
		out, err := d.receive(ctx, arg, len(msgs))
		var me mssql.Error
		if err != nil && errors.As(err, &me) {
			switch me.Number {
			case 1205: // chosen as a deadlock victim
				if attempt < deadlockAttempts {
					continue
				}
			case 2628, 8152, 8115, 245, 13609: // too long, overflow, conversion, bad JSON
				return nil, fmt.Errorf("%w: %s", dialects.ErrInvalidValue, me.Message)
			}
		}
		return out, err
	}
}

func (d *Dialect) receive(ctx context.Context, arg string, n int) ([]dialects.InboxReceipt, error) {
	rows, err := d.db.QueryContext(ctx, d.q.InboxReceive, arg)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]dialects.InboxReceipt, n)
	got := 0
	for rows.Next() {
		var ord int
		var id string
		var stored int
		if err := rows.Scan(&ord, &id, &stored); err != nil {
			return nil, err
		}
		if ord < 0 || ord >= n {
			return nil, fmt.Errorf("InboxReceive returned ordinal %d for %d messages", ord, n)
		}
		u, err := uuid.Parse(id)
		if err != nil {
			return nil, err
		}
		out[ord] = dialects.InboxReceipt{ID: u, Stored: stored == 1}
		got++
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if got != n {
		return nil, fmt.Errorf("InboxReceive returned %d receipts for %d messages", got, n)
	}
	return out, nil
}

// InboxRelay runs one relay transaction: the application lock, then the
// relay batch.
func (d *Dialect) InboxRelay(ctx context.Context, p dialects.InboxRelayParams) (res dialects.InboxRelayResult, err error) {
	defer func() { err = MapError(err) }()
	if p.Limit <= 0 {
		return res, nil
	}
	var settled any
	if p.Gate != nil {
		settled = p.Gate.Settled
	}
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return res, err
	}
	defer func() { _ = tx.Rollback() }()
	var locked int
	if err := tx.QueryRowContext(ctx, d.q.InboxRelayLock, dialects.InboxRelayLockName(d.names)).Scan(&locked); err != nil {
		return res, err
	}
	if locked != 1 {
		return dialects.InboxRelayResult{Busy: true}, nil
	}
	rows, err := tx.QueryContext(ctx, d.q.InboxRelay, p.Limit, settled, p.MaxAttempts, p.After)
	if err != nil {
		return res, err
	}
	for rows.Next() {
		var id string
		var created int
		var seq int64
		if err := rows.Scan(&id, &created, &seq); err != nil {
			rows.Close()
			return dialects.InboxRelayResult{}, err
		}
		res.Relayed++
		res.Created += created
		res.Through = max(res.Through, seq)
	}
	if err := rows.Err(); err != nil {
		return dialects.InboxRelayResult{}, err
	}
	if err := tx.Commit(); err != nil {
		return dialects.InboxRelayResult{}, err
	}
	return res, nil
}

func (d *Dialect) InboxProbe(ctx context.Context) (dialects.Probe, error) {
	return d.probe(ctx, d.q.InboxProbe)
}

// InboxWriters lists the open transactions that wrote inbox rows, as
// OutboxWriters does for the outbox.
func (d *Dialect) InboxWriters(ctx context.Context) ([]dialects.Writer, error) {
	return d.writers(ctx, d.q.InboxWriters)
}

func (d *Dialect) InboxStats(ctx context.Context) (_ dialects.InboxStats, err error) {
	defer func() { err = MapError(err) }()
	return dialects.InboxStatsFrom(func(each func(string, int64)) error { return d.eachCount(ctx, d.q.InboxCountByState, each) },
		func() (time.Duration, error) { return d.InboxOldestReceived(ctx) })
}

func (d *Dialect) InboxOldestReceived(ctx context.Context) (_ time.Duration, err error) {
	defer func() { err = MapError(err) }()
	var millis int64
	if err := d.db.QueryRowContext(ctx, d.q.InboxOldestReceived).Scan(&millis); err != nil {
		return 0, err
	}
	return time.Duration(millis) * time.Millisecond, nil
}
