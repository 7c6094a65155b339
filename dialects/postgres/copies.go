package postgres

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects"
)

// The copies table of fan-out routes (dialects.Copies; statements in
// queries.sql, after FanOutComplete).

// fanOutArgs binds the outcomes c of a completion that writes copies or
// more attempts (FanOutComplete): every attempt of every outcome,
// recorded with its destination's end (dialects.RecordedOutcomeOf), and
// the copies of the delivered rows.
func fanOutArgs(c completeArgs, outcomes []dialects.Outcome) completeCopiesArgs {
	a := completeCopiesArgs{completeArgs: c, attemptRecords: newAttemptRecords(0), ProbeNs: []int32{}, UncountedNs: []int32{},
		copyArrays: copyArrays{CopyIDs: [][16]byte{}, CopyDestinations: []string{}, CopyStates: []string{}, CopyAttempts: []int32{},
			CopyDelaysMS: []int64{}, CopyErrors: []string{}}}
	for i := range outcomes {
		o := &outcomes[i]
		for _, t := range o.FanAttempts() {
			a.add(o.ID, &t, dialects.RecordedOutcomeOf(*o, t))
			n := int32(len(a.AttemptIDs))
			if t.Probe {
				a.ProbeNs = append(a.ProbeNs, n)
			}
			if t.Uncounted {
				a.UncountedNs = append(a.UncountedNs, n)
			}
		}
		for _, cp := range o.WrittenCopies() {
			a.CopyIDs = append(a.CopyIDs, o.ID)
			a.CopyDestinations = append(a.CopyDestinations, cp.Destination)
			a.CopyStates = append(a.CopyStates, string(cp.Kind.State()))
			a.CopyAttempts = append(a.CopyAttempts, int32(cp.Attempt))
			a.CopyDelaysMS = append(a.CopyDelaysMS, max(ms(cp.Delay), 0))
			a.CopyErrors = append(a.CopyErrors, cp.Error)
		}
	}
	return a
}

// CopyClaim claims copies in one statement, on the main pool: a copy's
// claim plans for the table as it stands (custom plans), which is empty
// most of the time.
func (d *Dialect) CopyClaim(ctx context.Context, p dialects.ClaimParams) (c dialects.Claimed, err error) {
	defer func() { err = mapError(err) }()
	if p.Limit <= 0 {
		return c, nil
	}
	rows, err := d.pool.Query(ctx, d.q.CopyClaim, p.Limit, p.Heads(), ms(p.Lease), [16]byte(p.Token))
	if err != nil {
		return c, err
	}
	c.Rows, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (dialects.Row, error) {
		r := dialects.Row{CopyOf: &dialects.CopyOf{}}
		err := row.Scan((*[16]byte)(&r.ID), (*[16]byte)(&r.CopyOf.RowID), &r.CopyOf.Destination, &r.Topic, &r.Key, &r.Payload,
			&r.Headers, &r.AggregateType, &r.Attempt, &r.MaxAttempts, &r.Sequence, &r.CreatedAt)
		r.Token, r.TypedJSON = p.Token, true
		return r, err
	})
	if err != nil {
		return dialects.Claimed{}, err
	}
	sortCopies(c.Rows)
	return c, nil
}

// sortCopies orders claimed copies by destination, key, then sequence:
// each lane's copies form one run in sequence order.
func sortCopies(rows []dialects.Row) {
	slices.SortFunc(rows, func(a, b dialects.Row) int {
		return cmp.Or(cmp.Compare(a.CopyOf.Destination, b.CopyOf.Destination), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Sequence, b.Sequence))
	})
}

func (d *Dialect) CopyRenewLeases(ctx context.Context, claims []dialects.Claim, lease time.Duration) ([]dialects.Claim, error) {
	return d.renew(ctx, d.q.CopyRenewLeases, claims, lease)
}

// CopyComplete writes the outcomes of copies and their attempts in one
// statement. An outcome's Copies and Attempts are not read: a copy's
// delivery tries one destination.
func (d *Dialect) CopyComplete(ctx context.Context, outcomes []dialects.Outcome) (_ []dialects.Claim, err error) {
	defer func() { err = mapError(err) }()
	if len(outcomes) == 0 {
		return nil, nil
	}
	c, claims := completeArgsOf(outcomes)
	a := attemptArrays(outcomes)
	if a == nil {
		a = &attempts{attemptRecords: newAttemptRecords(0), ProbeIDs: [][16]byte{}, UncountedIDs: [][16]byte{}}
	}
	rows, err := d.pool.Query(ctx, d.q.CopyComplete.SQL(), d.q.CopyComplete.Args(completeAttemptsArgs{c, *a})...)
	if err != nil {
		return nil, err
	}
	held, err := collectIDs(rows, len(outcomes))
	if err != nil {
		return nil, err
	}
	return dialects.LostClaims(claims, held), nil
}

func (d *Dialect) CopyReleaseExpired(ctx context.Context, limit int, keep []uuid.UUID) (n int, err error) {
	defer func() { err = mapError(err) }()
	if keep == nil {
		keep = []uuid.UUID{}
	}
	err = d.pool.QueryRow(ctx, d.q.CopyReleaseExpired, limit, keep).Scan(&n)
	return n, err
}

// CopyProbe reads the change counter and when the next copy scheduled
// later comes due, in one statement.
func (d *Dialect) CopyProbe(ctx context.Context) (p dialects.Probe, err error) {
	defer func() { err = mapError(err) }()
	var in *int64
	if err = d.pool.QueryRow(ctx, d.q.CopyProbe).Scan(&p.Last, &in); err != nil {
		return p, err
	}
	if in != nil {
		p.NextDue, p.Later = time.Duration(*in)*time.Millisecond, true
	}
	return p, nil
}

func (d *Dialect) CopyPurge(ctx context.Context, p dialects.PurgeParams) (int, error) {
	return d.purge(ctx, d.q.CopyPurge, p)
}

func (d *Dialect) CopyCounts(ctx context.Context) (_ []dialects.DestinationCount, err error) {
	defer func() { err = mapError(err) }()
	rows, err := d.pool.Query(ctx, d.q.CopyCounts)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (dialects.DestinationCount, error) {
		var c dialects.DestinationCount
		var state string
		var oldest int64
		err := r.Scan(&c.Destination, &state, &c.Rows, &oldest)
		c.State, c.OldestDue = dialects.State(state), time.Duration(oldest)*time.Millisecond
		return c, err
	})
}

// CopyList returns one page of copies; a filter without states selects
// copies in any state.
func (d *Dialect) CopyList(ctx context.Context, p dialects.CopyListParams) (_ []dialects.CopyListed, err error) {
	defer func() { err = mapError(err) }()
	f := filter(p.Filter.Filter)
	a := copyListArgs{States: f.States, IDs: f.IDs, Key: f.Key, Since: f.Since, Until: f.Until, ErrorText: f.ErrorText, Limit: p.Limit}
	if p.Filter.Destination != "" {
		a.Destination = &p.Filter.Destination
	}
	if p.After != nil {
		a.AfterUpdatedAt, a.AfterSequence, a.AfterDestination = &p.After.UpdatedAt, &p.After.Sequence, &p.AfterDestination
	}
	rows, err := d.pool.Query(ctx, d.q.CopyList.SQL(), d.q.CopyList.Args(a)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanCopy)
}

func (d *Dialect) CopiesOfRow(ctx context.Context, rowID uuid.UUID) (_ []dialects.CopyListed, err error) {
	defer func() { err = mapError(err) }()
	rows, err := d.pool.Query(ctx, d.q.CopiesOfRow, [16]byte(rowID))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanCopy)
}

// scanCopy reads a copy as CopyList and CopiesOfRow return it.
func scanCopy(row pgx.CollectableRow) (dialects.CopyListed, error) {
	var c dialects.CopyListed
	var state string
	err := row.Scan((*[16]byte)(&c.ID), &c.Topic, &c.Key, &c.AggregateType, &state, &c.Attempt, &c.MaxAttempts,
		&c.Sequence, &c.CreatedAt, &c.UpdatedAt, &c.LastError, &c.Destination, (*[16]byte)(&c.RowID), &c.ScheduledAt)
	c.State = dialects.State(state)
	return c, err
}

func (d *Dialect) CopyReplay(ctx context.Context, destination string, rowIDs []uuid.UUID, states []dialects.State, by string) (n int, err error) {
	defer func() { err = mapError(err) }()
	ss := make([]string, len(states))
	for i, s := range states {
		ss[i] = string(s)
	}
	err = d.pool.QueryRow(ctx, d.q.CopyReplay, destination, rowIDs, ss, dialects.ReplayMark(by)).Scan(&n)
	return n, err
}

func (d *Dialect) CopyBackfill(ctx context.Context, destination string, rowIDs []uuid.UUID, by string) (n int, err error) {
	defer func() { err = mapError(err) }()
	err = d.pool.QueryRow(ctx, d.q.CopyBackfill, destination, rowIDs, dialects.ReplayMark(by)).Scan(&n)
	return n, err
}
