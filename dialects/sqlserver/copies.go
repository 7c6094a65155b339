package sqlserver

import (
	"cmp"
	"context"
	"database/sql"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
)

// The copies table of fan-out routes (dialects.Copies; statements in
// queries.sql, after FanOutComplete).

// fanAttempt is an attempt of a fan-out row's pass, by the row's id.
type fanAttempt struct {
	I uuid.UUID `json:"i"`
	attemptArg
}

// copyArg is a copy as FanOutComplete reads it.
type copyArg struct {
	I  uuid.UUID `json:"i"`
	DS string    `json:"ds"`
	S  string    `json:"s"`
	A  int       `json:"a"`
	D  int32     `json:"d"`
	E  string    `json:"e"`
}

// FanOutArgs renders the attempts and the copies parameters of
// FanOutComplete (exported for the rendered-SQL tests): every
// attempt of every outcome, recorded with its destination's end
// (dialects.RecordedOutcomeOf), and the copies of the delivered rows.
func FanOutArgs(outcomes []dialects.Outcome) (attempts, copies string) {
	as, cs := []fanAttempt{}, []copyArg{}
	for i := range outcomes {
		o := &outcomes[i]
		for _, t := range o.FanAttempts() {
			as = append(as, fanAttempt{I: o.ID, attemptArg: attemptArgOf(&t, dialects.RecordedOutcomeOf(*o, t))})
		}
		for _, c := range o.WrittenCopies() {
			cs = append(cs, copyArg{I: o.ID, DS: c.Destination, S: string(c.Kind.State()), A: c.Attempt,
				D: dateaddArg(max(c.Delay.Milliseconds(), 0)), E: c.Error})
		}
	}
	return jsonArg(as), jsonArg(cs)
}

func (d *Dialect) CopyClaim(ctx context.Context, p dialects.ClaimParams) (_ dialects.Claimed, err error) {
	defer func() { err = MapError(err) }()
	if p.Limit <= 0 {
		return dialects.Claimed{}, nil
	}
	rows, err := d.db.QueryContext(ctx, d.q.CopyClaim, p.Limit, p.Heads(), dateaddArg(p.Lease.Milliseconds()), p.Token.String())
	if err != nil {
		return dialects.Claimed{}, err
	}
	defer rows.Close()
	var c dialects.Claimed
	for rows.Next() {
		r := dialects.Row{CopyOf: &dialects.CopyOf{}}
		var id, rowID, payload, headers string
		if err := rows.Scan(&id, &rowID, &r.CopyOf.Destination, &r.Topic, &r.Key, &payload, &headers, &r.AggregateType,
			&r.Attempt, &r.MaxAttempts, &r.Sequence, &r.CreatedAt); err != nil {
			return dialects.Claimed{}, err
		}
		if r.ID, err = uuid.Parse(id); err != nil {
			return dialects.Claimed{}, err
		}
		if r.CopyOf.RowID, err = uuid.Parse(rowID); err != nil {
			return dialects.Claimed{}, err
		}
		r.Payload, r.Headers, r.Token, r.CreatedAt = []byte(payload), []byte(headers), p.Token, r.CreatedAt.UTC()
		c.Rows = append(c.Rows, r)
	}
	if err := rows.Err(); err != nil {
		return dialects.Claimed{}, err
	}
	slices.SortFunc(c.Rows, func(a, b dialects.Row) int {
		return cmp.Or(cmp.Compare(a.CopyOf.Destination, b.CopyOf.Destination), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Sequence, b.Sequence))
	})
	return c, nil
}

func (d *Dialect) CopyRenewLeases(ctx context.Context, claims []dialects.Claim, lease time.Duration) (_ []dialects.Claim, err error) {
	defer func() { err = MapError(err) }()
	if len(claims) == 0 {
		return nil, nil
	}
	held, err := d.queryIDs(ctx, d.q.CopyRenewLeases, jsonArg(renewArgs(claims)), dateaddArg(lease.Milliseconds()))
	if err != nil {
		return nil, err
	}
	return dialects.LostClaims(claims, held), nil
}

// CopyComplete writes the outcomes of copies and their attempts in one
// transaction. An outcome's Copies and Attempts are not read: a copy's
// delivery tries one destination.
func (d *Dialect) CopyComplete(ctx context.Context, outcomes []dialects.Outcome) (_ []dialects.Claim, err error) {
	defer func() { err = MapError(err) }()
	if len(outcomes) == 0 {
		return nil, nil
	}
	held, err := d.queryIDs(ctx, d.q.CopyComplete, CompleteArg(outcomes))
	if err != nil {
		return nil, err
	}
	claims := make([]dialects.Claim, len(outcomes))
	for i, o := range outcomes {
		claims[i] = o.Claim
	}
	return dialects.LostClaims(claims, held), nil
}

func (d *Dialect) CopyReleaseExpired(ctx context.Context, limit int, keep []uuid.UUID) (_ int, err error) {
	defer func() { err = MapError(err) }()
	if keep == nil {
		keep = []uuid.UUID{}
	}
	return d.scalarInt(ctx, d.q.CopyReleaseExpired, limit, jsonArg(keep))
}

func (d *Dialect) CopyProbe(ctx context.Context) (p dialects.Probe, err error) {
	defer func() { err = MapError(err) }()
	var in sql.NullInt64
	if err = d.db.QueryRowContext(ctx, d.q.CopyProbe).Scan(&p.Last, &in); err != nil {
		return p, err
	}
	if in.Valid {
		p.NextDue, p.Later = time.Duration(in.Int64)*time.Millisecond, true
	}
	return p, nil
}

// CopyPurge deletes in statements of PurgeStatementRows, as OutboxPurge.
func (d *Dialect) CopyPurge(ctx context.Context, p dialects.PurgeParams) (_ int, err error) {
	defer func() { err = MapError(err) }()
	total := 0
	for total < p.Batch {
		chunk := min(PurgeStatementRows, p.Batch-total)
		n, err := d.scalarInt(ctx, d.q.CopyPurge, string(p.State), dateaddArg(int64(p.OlderThan/time.Second)), chunk)
		total += n
		if err != nil || n < chunk {
			return total, err
		}
	}
	return total, nil
}

func (d *Dialect) CopyCounts(ctx context.Context) (_ []dialects.DestinationCount, err error) {
	defer func() { err = MapError(err) }()
	rows, err := d.db.QueryContext(ctx, d.q.CopyCounts)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dialects.DestinationCount
	for rows.Next() {
		var c dialects.DestinationCount
		var state string
		var oldest int64
		if err := rows.Scan(&c.Destination, &state, &c.Rows, &oldest); err != nil {
			return nil, err
		}
		c.State, c.OldestDue = dialects.State(state), time.Duration(oldest)*time.Millisecond
		out = append(out, c)
	}
	return out, rows.Err()
}

// copyListArgs are CopyList's.
type copyListArgs struct {
	filterArgs
	Destination      any `param:"destination"`
	AfterUpdatedAt   any `param:"after_updated_at"`
	AfterSequence    any `param:"after_sequence"`
	AfterDestination any `param:"after_destination"`
	Limit            int `param:"limit"`
}

// CopyListArgs are the arguments of the page of copies that p describes
// (exported for the rendered-SQL tests); a filter without states selects
// copies in any state.
func (d *Dialect) CopyListArgs(p dialects.CopyListParams) []any {
	a := copyListArgs{filterArgs: filter(p.Filter.Filter), Limit: p.Limit}
	if len(p.Filter.States) == 0 {
		a.States = "[]"
	}
	if p.Filter.Destination != "" {
		a.Destination = p.Filter.Destination
	}
	if p.After != nil {
		a.AfterUpdatedAt, a.AfterSequence, a.AfterDestination = p.After.UpdatedAt.UTC(), p.After.Sequence, p.AfterDestination
	}
	return d.q.CopyList.Args(a)
}

func (d *Dialect) CopyList(ctx context.Context, p dialects.CopyListParams) (_ []dialects.CopyListed, err error) {
	defer func() { err = MapError(err) }()
	return d.copies(ctx, d.q.CopyList.SQL(), d.CopyListArgs(p)...)
}

func (d *Dialect) CopiesOfRow(ctx context.Context, rowID uuid.UUID) (_ []dialects.CopyListed, err error) {
	defer func() { err = MapError(err) }()
	return d.copies(ctx, d.q.CopiesOfRow, rowID.String())
}

// copies runs a statement that returns copies as operators read them.
func (d *Dialect) copies(ctx context.Context, query string, args ...any) ([]dialects.CopyListed, error) {
	rows, err := d.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dialects.CopyListed
	for rows.Next() {
		var c dialects.CopyListed
		var id, rowID, state string
		if err := rows.Scan(&id, &c.Topic, &c.Key, &c.AggregateType, &state, &c.Attempt, &c.MaxAttempts, &c.Sequence,
			&c.CreatedAt, &c.UpdatedAt, &c.LastError, &c.Destination, &rowID, &c.ScheduledAt); err != nil {
			return nil, err
		}
		if c.ID, err = uuid.Parse(id); err != nil {
			return nil, err
		}
		if c.RowID, err = uuid.Parse(rowID); err != nil {
			return nil, err
		}
		c.State = dialects.State(state)
		out = append(out, c)
	}
	return out, rows.Err()
}

func (d *Dialect) CopyReplay(ctx context.Context, destination string, rowIDs []uuid.UUID, states []dialects.State, by string) (_ int, err error) {
	defer func() { err = MapError(err) }()
	return d.scalarInt(ctx, d.q.CopyReplay, destination, jsonArg(rowIDs), jsonArg(states), dialects.ReplayMark(by))
}

func (d *Dialect) CopyBackfill(ctx context.Context, destination string, rowIDs []uuid.UUID, by string) (_ int, err error) {
	defer func() { err = MapError(err) }()
	return d.scalarInt(ctx, d.q.CopyBackfill, destination, jsonArg(rowIDs), dialects.ReplayMark(by))
}
