package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queuebox/queuebox/dialects"
)

// InboxStatements are the inbox's statements of queries.sql (the section
// "The inbox"); Catalog embeds them.
type InboxStatements struct {
	InboxReceive                                           dialects.Named[receiveArgs]
	InboxRelay                                             dialects.Named[inboxRelayArgs]
	InboxRelayLock, InboxProbeSequence, InboxProbeSnapshot string
	InboxWriters, InboxCountByState, InboxOldestReceived   string
}

// receiveAttempts bounds how often InboxReceive asks again for the ids of
// duplicates whose first copy another transaction committed meanwhile; each
// new statement sees more of them, so a second attempt normally suffices.
const receiveAttempts = 5

func (d *Dialect) InboxReceive(ctx context.Context, msgs []dialects.InboxMessage) (_ []dialects.InboxReceipt, err error) {
	defer func() { err = mapError(err) }()
	out := make([]dialects.InboxReceipt, len(msgs))
	todo := make([]int, len(msgs)) // indexes of msgs still without an id
	for i := range todo {
		todo[i] = i
	}
	for attempt := 0; len(todo) > 0; attempt++ {
		if attempt == receiveAttempts {
			return nil, fmt.Errorf("storing %d inbox messages: their (source, message_id) exists, but no row could be read %d times in a row", len(todo), receiveAttempts)
		}
		n := len(todo)
		a := receiveArgs{Sources: make([]string, n), MessageIDs: make([]string, n), Topics: make([]string, n),
			AggregateTypes: make([]*string, n), AggregateIDs: make([]*string, n), Payloads: make([]string, n), Headers: make([]*string, n)}
		for j, i := range todo {
			m := &msgs[i]
			a.Sources[j], a.MessageIDs[j], a.Topics[j] = m.Source, m.MessageID, m.Topic
			a.AggregateTypes[j], a.AggregateIDs[j], a.Payloads[j] = m.AggregateType, m.AggregateID, string(m.Payload)
			if m.Headers != nil {
				h := string(m.Headers)
				a.Headers[j] = &h
			}
		}
		var again []int
		for deadlocks := 0; ; deadlocks++ {
			again, err = d.receive(ctx, todo, out, a)
			if !isDeadlock(err) || deadlocks == receiveAttempts {
				break
			}
			// Two batches that share messages in different orders (a
			// broker that redelivers while the first copy is being
			// stored) can each wait on the other's uncommitted insert:
			// the server rolls one back, which stored nothing, and it
			// tries again after a moment.
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Duration(1+rand.IntN(10)) * time.Millisecond):
			}
		}
		if err != nil {
			return nil, invalidValue(err)
		}
		todo = again
	}
	return out, nil
}

// receive runs InboxReceive once for the messages todo, fills out with the
// ids it learnt, and returns the messages to ask for again.
func (d *Dialect) receive(ctx context.Context, todo []int, out []dialects.InboxReceipt, a receiveArgs) ([]int, error) {
	rows, err := d.pool.Query(ctx, d.q.InboxReceive.SQL(), d.q.InboxReceive.Args(a)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var again []int
	for rows.Next() {
		var ord int64
		var id *uuid.UUID
		var stored bool
		if err := rows.Scan(&ord, &id, &stored); err != nil {
			return nil, err
		}
		i := todo[ord-1]
		if id == nil {
			again = append(again, i)
			continue
		}
		out[i] = dialects.InboxReceipt{ID: *id, Stored: stored}
	}
	return again, rows.Err()
}

// isDeadlock tells a statement that the server rolled back to end a
// deadlock (SQLSTATE 40P01).
func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}

// invalidValue marks a data exception (SQLSTATE class 22: a JSON escape
// jsonb refuses, a value too long, bad UTF-8) as dialects.ErrInvalidValue.
func invalidValue(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22") {
		if pgErr.Detail != "" {
			return fmt.Errorf("%w: %s: %s", dialects.ErrInvalidValue, pgErr.Message, pgErr.Detail)
		}
		return fmt.Errorf("%w: %s", dialects.ErrInvalidValue, pgErr.Message)
	}
	return err
}

// InboxRelay runs one relay transaction: the lock, then the relay
// statement, each with a snapshot of its own (see InboxRelayLock).
func (d *Dialect) InboxRelay(ctx context.Context, p dialects.InboxRelayParams) (res dialects.InboxRelayResult, err error) {
	defer func() { err = mapError(err) }()
	if p.Limit <= 0 {
		return res, nil
	}
	args := d.q.InboxRelay.Args(inboxRelayArgs{Limit: p.Limit, gateArgs: gate(p.Gate), MaxAttempts: p.MaxAttempts, After: p.After})
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var locked bool
		if err := tx.QueryRow(ctx, d.q.InboxRelayLock, dialects.InboxRelayLockName(d.names)).Scan(&locked); err != nil {
			return err
		}
		if !locked {
			res.Busy = true
			return nil
		}
		rows, err := tx.Query(ctx, d.q.InboxRelay.SQL(), args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id uuid.UUID
			var created bool
			var seq int64
			if err := rows.Scan(&id, &created, &seq); err != nil {
				rows.Close()
				return err
			}
			res.Relayed++
			res.Through = max(res.Through, seq)
			if created {
				res.Created++
			}
		}
		return rows.Err()
	})
	if err != nil {
		return dialects.InboxRelayResult{}, err
	}
	return res, nil
}

// InboxProbe reads the inbox sequence, then a snapshot, in one round trip.
func (d *Dialect) InboxProbe(ctx context.Context) (dialects.Probe, error) {
	return d.probe(ctx, d.claimPool, false, probeStatements{sequence: d.q.InboxProbeSequence, snapshot: d.q.InboxProbeSnapshot})
}

func (d *Dialect) InboxWriters(ctx context.Context) ([]dialects.Writer, error) {
	return d.writers(ctx, d.q.InboxWriters)
}

func (d *Dialect) InboxStats(ctx context.Context) (st dialects.InboxStats, err error) {
	defer func() { err = mapError(err) }()
	return dialects.InboxStatsFrom(func(each func(string, int64)) error { return d.counts(ctx, d.q.InboxCountByState, each) },
		func() (time.Duration, error) { return d.InboxOldestReceived(ctx) })
}

func (d *Dialect) InboxOldestReceived(ctx context.Context) (_ time.Duration, err error) {
	defer func() { err = mapError(err) }()
	var secs float64
	if err := d.pool.QueryRow(ctx, d.q.InboxOldestReceived).Scan(&secs); err != nil {
		return 0, err
	}
	return time.Duration(secs * float64(time.Second)), nil
}
