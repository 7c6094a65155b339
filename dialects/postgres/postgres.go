package postgres

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/dialects"
)

//go:embed queries.sql
var queryFS embed.FS

// Quoting quotes PostgreSQL identifiers and literals.
var Quoting = dialects.Quoting{
	Ident:   func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` },
	Literal: func(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` },
}

// Options configure a Dialect.
type Options = dialects.ConnectOptions

// Dialect is the PostgreSQL implementation of dialects.Dialect.
type Dialect struct {
	// pool runs statements with custom plans; claimPool the claim and the
	// probe, with generic plans (see Open).
	pool      *pgxpool.Pool
	claimPool *pgxpool.Pool
	names     dialects.Names
	q         *Catalog
	cfg       *pgxpool.Config
	// own are the process ids of this dialect's sessions, which OtherRelays
	// does not count.
	own ownSessions
	// wake is the registry of the wake-up hubs (wakehub.go); nil: the
	// process's.
	wake *wakeRegistry
	// boundsText is the text form of the claims' floors and positions,
	// kept for the next claim that carries the same slices (see
	// dialects.Bounds): the one thing a claim leaves behind in the dialect.
	boundsText boundsText
	// DestinationTables are the destinations' state (destinations.go).
	dialects.DestinationTables
	// AttemptTables are the attempt history's reads and retention (attempts.go).
	dialects.AttemptTables
}

// Catalog holds every statement of queries.sql, rendered for the configured
// names; each field is the statement of the same name. A statement with
// many parameters names them, and its field is a dialects.Named of the
// struct that binds them (args.go).
type Catalog struct {
	OutboxClaim            dialects.Named[scheduleClaimArgs]
	OutboxClaimByKey       dialects.Named[keysClaimArgs]
	OutboxStragglers       dialects.Named[stragglersArgs]
	OutboxComplete         dialects.Named[completeArgs]
	OutboxCompleteAttempts dialects.Named[completeAttemptsArgs]
	OutboxSelect           dialects.Named[selectArgs]
	OutboxList             dialects.Named[listArgs]
	OutboxInsert           dialects.Named[insertArgs]
	FanOutComplete         dialects.Named[completeCopiesArgs]
	CopyComplete           dialects.Named[completeAttemptsArgs]
	CopyList               dialects.Named[copyListArgs]

	OutboxRenewLeases, OutboxReleaseExpired, OutboxReplayIDs, OutboxPurge string
	OutboxPurgeWait, OutboxCountByState, OutboxDeadByTopic                string
	OutboxPendingDue, OutboxCountByTopicState                             string
	OutboxBlockedKeys, OutboxDeadGroups                                   string
	OutboxProbeSequence, OutboxProbeSnapshot, OutboxWriters               string
	OutboxFloors, OutboxRewind, OutboxNextDue                             string
	OutboxHorizon, OutboxRowsOf                                           string
	OtherRelays                                                           string
	FanOutBlockedLanes, CopyClaim, CopyRenewLeases, CopyReleaseExpired    string
	CopyProbe, CopyPurge, CopyCounts, CopiesOfRow, CopyReplay             string
	CopyBackfill                                                          string
	dialects.HistoryStatements
	InboxStatements
	dialects.DestinationStatements
	dialects.AttemptStatements
}

var _ dialects.Dialect = (*Dialect)(nil)

// Open renders every statement for opts.Names and opens a connection pool. It
// does not wait for the database: the pool connects on first use.
func Open(ctx context.Context, opts Options) (*Dialect, error) {
	q, err := Queries(opts.Names)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("database.url is not a valid PostgreSQL URL (postgres://user:password@host:5432/database): %w", err)
	}
	if _, set := cfg.ConnConfig.RuntimeParams["application_name"]; !set {
		cfg.ConnConfig.RuntimeParams["application_name"] = cmp.Or(opts.ApplicationName, dialects.RelayApplicationName)
	}
	// No JIT (see the package doc).
	if _, set := cfg.ConnConfig.RuntimeParams["jit"]; !set {
		cfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	// Two pools, because the statements want opposite plans (see the
	// package doc).
	total := int32(10)
	if opts.MaxConnections > 0 {
		total = int32(opts.MaxConnections)
	}
	claimCfg := cfg.Copy()
	claimCfg.MaxConns = max(1, min(3, total/3))
	cfg.MaxConns = max(1, total-claimCfg.MaxConns)
	if _, set := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !set {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	}
	if _, set := claimCfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !set {
		claimCfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	}
	// A claim commits without waiting for its WAL to reach the disk (see
	// the package doc, "Claims commit asynchronously").
	if _, set := claimCfg.ConnConfig.RuntimeParams["synchronous_commit"]; !set {
		claimCfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	}
	// A claim session plans once, often on an empty table: it rules out
	// every plan shape a claim never wants (see the package doc).
	for _, k := range []string{"enable_seqscan", "enable_bitmapscan", "enable_sort", "enable_hashjoin", "enable_mergejoin"} {
		if _, set := claimCfg.ConnConfig.RuntimeParams[k]; !set {
			claimCfg.ConnConfig.RuntimeParams[k] = "off"
		}
	}
	d := &Dialect{names: opts.Names, q: q, cfg: cfg}
	for _, c := range []*pgxpool.Config{cfg, claimCfg} {
		// pgx pings a connection that sat idle for a second before handing
		// it out: on an idle relay, a transaction for every probe. A
		// connection that died is found by the statement itself, which the
		// engine retries; ping only those idle for a minute.
		c.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration > time.Minute }
		c.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
			d.own.add(conn.PgConn().PID())
			return nil
		}
		c.BeforeClose = func(conn *pgx.Conn) { d.own.remove(conn.PgConn().PID()) }
	}
	if d.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, err
	}
	if d.claimPool, err = pgxpool.NewWithConfig(ctx, claimCfg); err != nil {
		d.pool.Close()
		return nil, err
	}
	d.DestinationTables = d.destinationTables()
	d.AttemptTables = dialects.AttemptTables{Conn: poolConn(d.pool), Statements: &d.q.AttemptStatements, Age: func(t time.Duration) any { return ms(t) }}
	return d, nil
}

// ownSessions is a set of backend process ids.
type ownSessions struct {
	mu sync.Mutex
	// pids counts the sessions of each process id: a closed session's id
	// may come back for a new one before remove forgets it.
	pids map[uint32]int
}

func (o *ownSessions) add(pid uint32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pids == nil {
		o.pids = map[uint32]int{}
	}
	o.pids[pid]++
}

// remove forgets pid a few seconds later: the server lists a session
// for a moment after its client closed it.
func (o *ownSessions) remove(pid uint32) {
	time.AfterFunc(5*time.Second, func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.pids[pid]--; o.pids[pid] <= 0 {
			delete(o.pids, pid)
		}
	})
}

func (o *ownSessions) list() []int32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]int32, 0, len(o.pids))
	for pid := range o.pids {
		out = append(out, int32(pid))
	}
	return out
}

// OtherRelays counts the sessions of other relays on the server: those
// with this dialect's application name that are not its own.
// A server that does not let the user read pg_stat_activity answers
// ErrNotPermitted.
func (d *Dialect) OtherRelays(ctx context.Context) (n int, err error) {
	err = d.pool.QueryRow(ctx, d.q.OtherRelays, d.own.list()).Scan(&n)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return 0, fmt.Errorf("%w (%s)", dialects.ErrNotPermitted, pgErr.Message)
	}
	return n, mapError(err)
}

// Queries renders every statement for names.
func Queries(names dialects.Names) (*Catalog, error) {
	c := &Catalog{}
	if err := dialects.Catalog(names, Quoting, queryFS, "queries.sql", c); err != nil {
		return nil, err
	}
	return c, nil
}

// Pool exposes the pool to tests in this module.
func (d *Dialect) Pool() *pgxpool.Pool { return d.pool }

// ClaimPool is the pool the claims and probes run on, whose sessions plan
// them once (generic plans; see Open).
func (d *Dialect) ClaimPool() *pgxpool.Pool { return d.claimPool }

func (d *Dialect) Name() string              { return "postgresql" }
func (d *Dialect) Names() dialects.Names     { return d.names }
func (d *Dialect) Quoting() dialects.Quoting { return Quoting }
func (d *Dialect) Close()                    { d.pool.Close(); d.claimPool.Close() }

func (d *Dialect) Ping(ctx context.Context) error { return mapError(d.pool.Ping(ctx)) }

func ms(d time.Duration) int64 { return d.Milliseconds() }

func (d *Dialect) OutboxClaim(ctx context.Context, p dialects.ClaimParams) (c dialects.Claimed, err error) {
	defer func() { err = mapError(err) }()
	if p.Limit <= 0 {
		return c, nil
	}
	if p.Walk > dialects.WalkNone {
		return c, fmt.Errorf("claim: unknown walk %d", p.Walk)
	}
	if p.Settle == nil && !p.Lanes {
		stmt, args := d.claimArgs(p)
		rows, err := d.claimPool.Query(ctx, stmt, args...)
		if err != nil {
			return c, err
		}
		return scanClaim(rows, p, c)
	}
	// The probe or the read of the blocked lanes, and the claim, in one
	// transaction on one session.
	conn, err := d.claimPool.Acquire(ctx)
	if err != nil {
		return c, err
	}
	// A session left in a transaction by an error is closed by the pool
	// rather than handed out again.
	defer conn.Release()
	b := &pgx.Batch{}
	if p.Settle != nil {
		// The probe, then the claim: BEGIN and the probe's reads in one
		// round trip, the claim and COMMIT in the next. Each statement
		// still reads its own snapshot, so the claim's is taken after the
		// probe's reads.
		probe, err := d.probe(ctx, conn, true, outboxProbe(d.q))
		if err != nil {
			return c, err
		}
		c.Probe = &probe
		p.Gate = p.Settle(probe)
	} else {
		b.Queue("BEGIN")
	}
	stmt, args := d.claimArgs(p)
	b.Queue(stmt, args...)
	if p.Lanes {
		// In the claim's transaction, whose now() is the claimed rows'
		// claimed_at (see the statement).
		b.Queue(d.q.FanOutBlockedLanes, [16]byte(p.Token))
	}
	b.Queue("COMMIT")
	br := conn.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			c, err = dialects.Claimed{}, cerr
		}
	}()
	if p.Settle == nil {
		if _, err := br.Exec(); err != nil {
			return c, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return c, err
	}
	if c, err = scanClaim(rows, p, c); err != nil || !p.Lanes {
		return c, err
	}
	rows, err = br.Query()
	if err != nil {
		return dialects.Claimed{}, err
	}
	c.Blocked, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (dialects.Lane, error) {
		var l dialects.Lane
		err := r.Scan(&l.Destination, &l.Key)
		return l, err
	})
	if err != nil {
		return dialects.Claimed{}, err
	}
	return c, nil
}

// scanClaim reads the rows of a claim into c, with what its walk tells.
func scanClaim(rows pgx.Rows, p dialects.ClaimParams, c dialects.Claimed) (dialects.Claimed, error) {
	c.Rows = make([]dialects.Row, 0, p.Limit)
	for rows.Next() {
		var r dialects.Row
		var cursor *string
		var reach *time.Time
		var now time.Time
		var earliest *time.Time
		if err := rows.Scan((*[16]byte)(&r.ID), &r.Topic, &r.Key, &r.Payload, &r.Headers, &r.AggregateType,
			&r.Attempt, &r.MaxAttempts, &r.Sequence, &r.CreatedAt, &cursor, &reach, &now, &earliest); err != nil {
			rows.Close()
			return dialects.Claimed{}, err
		}
		if len(c.Rows) == 0 {
			if cursor != nil {
				c.Cursor = *cursor
			}
			c.Walk.Now, c.Walk.Cut = now, reach != nil
			if reach != nil {
				c.Walk.Reach = *reach
			}
			if earliest != nil {
				c.Walk.Earliest = *earliest
			}
		}
		r.Token, r.TypedJSON = p.Token, true
		c.Rows = append(c.Rows, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return dialects.Claimed{}, err
	}
	c.Walk.Empty = len(c.Rows) == 0
	dialects.SortClaimed(c.Rows)
	return c, nil
}

// claimArgs is the claim statement for p and its arguments. WalkNone runs
// the claim by key without its walk over the keys.
func (d *Dialect) claimArgs(p dialects.ClaimParams) (string, []any) {
	a := claimArgs{Limit: p.Limit, LeaseMS: ms(p.Lease), Token: p.Token, Heads: p.Heads(), gateArgs: gate(p.Gate),
		Floors: []int64(nil), PositionKeys: []string(nil), PositionAfter: []int64(nil),
		ContinueKeys: make([]string, len(p.Continue)), ContinueAfter: make([]int64, len(p.Continue))}
	var lookback *int64
	if b := p.Bounds; b != nil {
		a.Rewinds = &b.Rewinds
		if b.Lookback > 0 {
			lb := ms(b.Lookback)
			lookback = &lb
		}
		a.Floors = d.boundsText.floorsArg(b.Floors)
		a.PositionKeys, a.PositionAfter = d.boundsText.positionsArgs(b.Positions)
	}
	for i, c := range p.Continue {
		a.ContinueKeys[i], a.ContinueAfter[i] = c.Key, c.After
	}
	if p.Walk == dialects.WalkSchedule {
		return d.q.OutboxClaim.SQL(), d.q.OutboxClaim.Args(scheduleClaimArgs{claimArgs: a, LookbackMS: lookback})
	}
	k := keysClaimArgs{claimArgs: a, Discover: p.Walk != dialects.WalkNone}
	if p.Walk == dialects.WalkKeys {
		k.After = p.After
	}
	return d.q.OutboxClaimByKey.SQL(), d.q.OutboxClaimByKey.Args(k)
}

// ExplainClaim runs the claim that p describes under EXPLAIN (ANALYZE,
// BUFFERS) in a transaction that it rolls back, and returns the plan: for
// the bench's notes and for a closer look at a slow claim. It runs on the
// claim pool, whose sessions plan the claim as the relay's do (a generic
// plan). It claims nothing.
func (d *Dialect) ExplainClaim(ctx context.Context, p dialects.ClaimParams) (_ string, err error) {
	defer func() { err = mapError(err) }()
	stmt, args := d.claimArgs(p)
	tx, err := d.claimPool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "+stmt, args...)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}

func (d *Dialect) OutboxRenewLeases(ctx context.Context, claims []dialects.Claim, lease time.Duration) ([]dialects.Claim, error) {
	return d.renew(ctx, d.q.OutboxRenewLeases, claims, lease)
}

// renew runs a renewal statement (OutboxRenewLeases, CopyRenewLeases: ids,
// tokens and the lease, returning the ids it renewed) and returns the
// claims it did not renew.
func (d *Dialect) renew(ctx context.Context, sql string, claims []dialects.Claim, lease time.Duration) (_ []dialects.Claim, err error) {
	defer func() { err = mapError(err) }()
	if len(claims) == 0 {
		return nil, nil
	}
	ids, tokens := make([][16]byte, len(claims)), make([][16]byte, len(claims))
	for i, c := range claims {
		ids[i], tokens[i] = c.ID, c.Token
	}
	rows, err := d.pool.Query(ctx, sql, ids, tokens, ms(lease))
	if err != nil {
		return nil, err
	}
	held, err := collectIDs(rows, len(claims))
	if err != nil {
		return nil, err
	}
	return dialects.LostClaims(claims, held), nil
}

func collectIDs(rows pgx.Rows, n int) (map[uuid.UUID]struct{}, error) {
	held := make(map[uuid.UUID]struct{}, n)
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan((*[16]byte)(&id)); err != nil {
			rows.Close()
			return nil, err
		}
		held[id] = struct{}{}
	}
	return held, rows.Err()
}

// completeArgsOf binds the outcomes of OutboxComplete and CopyComplete,
// and returns their claims in the same order.
func completeArgsOf(outcomes []dialects.Outcome) (completeArgs, []dialects.Claim) {
	n := len(outcomes)
	c := completeArgs{IDs: make([][16]byte, n), Tokens: make([][16]byte, n), States: make([]string, n),
		AttemptIncs: make([]int32, n), DelaysMS: make([]int64, n), Errors: make([]string, n), HasErrors: make([]bool, n)}
	claims := make([]dialects.Claim, n)
	for i, o := range outcomes {
		w := dialects.WriteOf(o)
		c.IDs[i], c.Tokens[i], claims[i] = o.ID, o.Token, o.Claim
		c.States[i] = string(w.State)
		c.AttemptIncs[i] = int32(w.AttemptIncrement)
		c.DelaysMS[i] = -1
		if w.Reschedule {
			c.DelaysMS[i] = max(ms(o.Delay), 0)
		}
		if w.WriteError {
			c.Errors[i], c.HasErrors[i] = o.Error, true
		}
	}
	return c, claims
}

func (d *Dialect) OutboxComplete(ctx context.Context, outcomes []dialects.Outcome) (_ []dialects.Claim, err error) {
	defer func() { err = mapError(err) }()
	if len(outcomes) == 0 {
		return nil, nil
	}
	c, claims := completeArgsOf(outcomes)
	var rows pgx.Rows
	if dialects.FanOut(outcomes) {
		rows, err = d.pool.Query(ctx, d.q.FanOutComplete.SQL(), d.q.FanOutComplete.Args(fanOutArgs(c, outcomes))...)
	} else if a := attemptArrays(outcomes); a != nil {
		rows, err = d.pool.Query(ctx, d.q.OutboxCompleteAttempts.SQL(), d.q.OutboxCompleteAttempts.Args(completeAttemptsArgs{c, *a})...)
	} else {
		rows, err = d.pool.Query(ctx, d.q.OutboxComplete.SQL(), d.q.OutboxComplete.Args(c)...)
	}
	if err != nil {
		return nil, err
	}
	held, err := collectIDs(rows, len(outcomes))
	if err != nil {
		return nil, err
	}
	return dialects.LostClaims(claims, held), nil
}

func (d *Dialect) OutboxReleaseExpired(ctx context.Context, limit int, keep []uuid.UUID, from time.Time) (r dialects.Released, err error) {
	defer func() { err = mapError(err) }()
	if keep == nil {
		keep = []uuid.UUID{}
	}
	var since, oldest *time.Time
	if !from.IsZero() {
		since = &from
	}
	var counter *int64
	err = d.pool.QueryRow(ctx, d.q.OutboxReleaseExpired, limit, keep, since).Scan(&r.Rows, &counter, &oldest, &r.At)
	if oldest != nil {
		r.Oldest = *oldest
	}
	return r, err
}

// OutboxStragglers finds the oldest due head that a walk looking back
// b.Lookback would not see.
func (d *Dialect) OutboxStragglers(ctx context.Context, g *dialects.Gate, b dialects.Bounds) (_ time.Duration, _ bool, err error) {
	defer func() { err = mapError(err) }()
	a := stragglersArgs{gateArgs: gate(g), Rewinds: b.Rewinds, Floors: d.boundsText.floorsArg(b.Floors), LookbackMS: ms(b.Lookback)}
	if b.Within > 0 {
		w := ms(b.Within)
		a.WithinMS = &w
	}
	var ago int64
	err = d.claimPool.QueryRow(ctx, d.q.OutboxStragglers.SQL(), d.q.OutboxStragglers.Args(a)...).Scan(&ago)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return time.Duration(ago) * time.Millisecond, err == nil, err
}

// OutboxHorizon reads what holds the horizon back.
func (d *Dialect) OutboxHorizon(ctx context.Context) (h dialects.Horizon, err error) {
	defer func() { err = mapError(err) }()
	var kind, state, name, query *string
	var pid, xage *int64
	var since, queryStart *time.Time
	if err = d.pool.QueryRow(ctx, d.q.OutboxHorizon).Scan(&kind, &pid, &since, &queryStart, &state, &name, &query, &xage, &h.DeadVersions); err != nil {
		return h, err
	}
	if kind != nil {
		h.Holder = &dialects.HorizonHolder{Kind: *kind, PID: deref(pid), State: deref(state), Name: deref(name), Query: deref(query), Transactions: deref(xage)}
		if since != nil {
			h.Holder.Since = *since
		}
		if queryStart != nil {
			h.Holder.QueryStart = *queryStart
		}
	}
	return h, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// OutboxNextDue says how long until the earliest row scheduled later comes
// due.
func (d *Dialect) OutboxNextDue(ctx context.Context) (time.Duration, bool, error) {
	var in *int64
	if err := d.pool.QueryRow(ctx, d.q.OutboxNextDue).Scan(&in); err != nil || in == nil {
		return 0, false, mapError(err)
	}
	return time.Duration(*in) * time.Millisecond, true, nil
}

// OutboxRewind moves the rewind counter (see dialects.Bounds).
func (d *Dialect) OutboxRewind(ctx context.Context) error {
	_, err := d.pool.Exec(ctx, d.q.OutboxRewind)
	return mapError(err)
}

func (d *Dialect) OutboxSelect(ctx context.Context, p dialects.SelectParams) (_ []dialects.Selected, err error) {
	defer func() { err = mapError(err) }()
	rows, err := d.pool.Query(ctx, d.q.OutboxSelect.SQL(), d.q.OutboxSelect.Args(selectArgs{filter(p.Filter), p.AfterSequence, p.Limit})...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (dialects.Selected, error) {
		var s dialects.Selected
		err := r.Scan(&s.ID, &s.Topic, &s.Sequence)
		return s, err
	})
}

func (d *Dialect) OutboxRowsOf(ctx context.Context, ids []uuid.UUID) (_ []dialects.Row, err error) {
	defer func() { err = mapError(err) }()
	if len(ids) == 0 {
		return nil, nil
	}
	b := make([][16]byte, len(ids))
	for i, id := range ids {
		b[i] = id
	}
	rows, err := d.pool.Query(ctx, d.q.OutboxRowsOf, b)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (dialects.Row, error) {
		var r dialects.Row
		var payload, headers string
		err := row.Scan((*[16]byte)(&r.ID), &r.Topic, &r.Key, &payload, &headers, &r.AggregateType,
			&r.Attempt, &r.MaxAttempts, &r.Sequence, &r.CreatedAt)
		r.Payload, r.Headers, r.TypedJSON = []byte(payload), []byte(headers), true
		return r, err
	})
}

func (d *Dialect) OutboxReplayIDs(ctx context.Context, ids []uuid.UUID, states []dialects.State, by string) (_ int, err error) {
	defer func() { err = mapError(err) }()
	ss := make([]string, len(states))
	for i, s := range states {
		ss[i] = string(s)
	}
	var n int
	var counter *int64
	err = d.pool.QueryRow(ctx, d.q.OutboxReplayIDs, ids, ss, dialects.ReplayMark(by)).Scan(&n, &counter)
	return n, err
}

func (d *Dialect) OutboxList(ctx context.Context, p dialects.ListParams) (_ []dialects.ListedRow, err error) {
	defer func() { err = mapError(err) }()
	a := listArgs{filterArgs: filter(p.Filter), Limit: p.Limit}
	if p.After != nil {
		a.AfterUpdatedAt, a.AfterSequence = &p.After.UpdatedAt, &p.After.Sequence
	}
	rows, err := d.pool.Query(ctx, d.q.OutboxList.SQL(), d.q.OutboxList.Args(a)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (dialects.ListedRow, error) {
		var r dialects.ListedRow
		var state string
		err := row.Scan(&r.ID, &r.Topic, &r.Key, &r.AggregateType, &state, &r.Attempt, &r.MaxAttempts,
			&r.Sequence, &r.CreatedAt, &r.UpdatedAt, &r.LastError)
		r.State = dialects.State(state)
		return r, err
	})
}

func (d *Dialect) OutboxPurge(ctx context.Context, p dialects.PurgeParams) (int, error) {
	return d.purge(ctx, d.q.OutboxPurge, p)
}

// purge runs a retention delete (OutboxPurge, CopyPurge: the state, the
// age in milliseconds and the batch) and returns how many rows it deleted.
func (d *Dialect) purge(ctx context.Context, sql string, p dialects.PurgeParams) (_ int, err error) {
	defer func() { err = mapError(err) }()
	tag, err := d.pool.Exec(ctx, sql, string(p.State), ms(p.OlderThan), p.Batch)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

func (d *Dialect) OutboxPurgeWait(ctx context.Context, state dialects.State, olderThan time.Duration) (_ time.Duration, err error) {
	defer func() { err = mapError(err) }()
	var wait int64
	err = d.pool.QueryRow(ctx, d.q.OutboxPurgeWait, string(state), ms(olderThan)).Scan(&wait)
	return time.Duration(wait) * time.Millisecond, err
}

// OutboxProbe reads the sequence, then a snapshot, as two statements (the
// snapshot must be taken after the read), then when the next row
// scheduled later comes due, in one round trip and one transaction.
func (d *Dialect) OutboxProbe(ctx context.Context) (dialects.Probe, error) {
	return d.probe(ctx, d.claimPool, false, outboxProbe(d.q))
}

// probeStatements are one table's probe: its sequence read (with the
// rewind counter for the outbox), its snapshot read, and for the outbox
// the next due read.
type probeStatements struct {
	sequence, snapshot, nextDue string
	rewinds                     bool
}

func outboxProbe(q *Catalog) probeStatements {
	return probeStatements{sequence: q.OutboxProbeSequence, snapshot: q.OutboxProbeSnapshot, nextDue: q.OutboxNextDue, rewinds: true}
}

// batcher is a pool or one connection of it.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// unpairedRetries is how many times a probe reads the snapshot again when
// a writer's id was not seen beside its lock.
const unpairedRetries = 2

// probe runs the statements of a probe in one round trip on q; begin opens
// a transaction first, which the caller ends (the claim that settles its
// rows with this probe, in the same transaction).
func (d *Dialect) probe(ctx context.Context, q batcher, begin bool, s probeStatements) (p dialects.Probe, err error) {
	defer func() { err = mapError(err) }()
	b := &pgx.Batch{}
	if begin {
		b.Queue("BEGIN")
	}
	b.Queue(s.sequence).QueryRow(func(r pgx.Row) error {
		if s.rewinds {
			return r.Scan(&p.Last, &p.Rewinds)
		}
		return r.Scan(&p.Last)
	})
	b.Queue(s.snapshot).QueryRow(func(r pgx.Row) error { return r.Scan(&p.Xmin, &p.Next, &p.Writers) })
	if s.nextDue != "" {
		b.Queue(s.nextDue).QueryRow(func(r pgx.Row) error {
			var in *int64
			if err := r.Scan(&in); err != nil || in == nil {
				return err
			}
			p.NextDue, p.Later = time.Duration(*in)*time.Millisecond, true
			return nil
		})
	}
	if err = q.SendBatch(ctx, b).Close(); err != nil {
		return p, err
	}
	// A writer whose id was not seen beside its lock is most often one that
	// was ending while pg_locks was read (its relation lock, taken by the
	// fast path, is read before the lock on its id, which it had released
	// by then). The snapshot read again, still after the sequence's, most
	// often no longer sees it; a probe that knows the writers lets the
	// claims settle rows past a transaction that holds xmin back (one that
	// wrote only other tables), and one that does not leaves them to the
	// next probe.
	for retry := 0; retry < unpairedRetries && len(p.Writers) > 0 && p.Writers[0] < 0; retry++ {
		if err = q.QueryRow(ctx, s.snapshot).Scan(&p.Xmin, &p.Next, &p.Writers); err != nil {
			return p, err
		}
	}
	switch {
	case len(p.Writers) == 0:
		p.Writer, p.Writers = dialects.NoWriters, []int64{}
	case p.Writers[0] < 0:
		// A writer whose id was not seen: only xmin settles.
		p.Writer, p.Writers = 0, nil
	default:
		p.Writer = p.Writers[0]
	}
	return p, nil
}

// OutboxFloors reads the floors of the groups of keys, on the claim pool
// (a generic plan: the statement is the same every time).
func (d *Dialect) OutboxFloors(ctx context.Context, settled int64, prev dialects.Floors) (f dialects.Floors, err error) {
	defer func() { err = mapError(err) }()
	from, at := int64(math.MinInt64), int64(-1)
	if lowest, ok := prev.Lowest(); ok {
		from, at = lowest, prev.Rewinds
	}
	err = d.claimPool.QueryRow(ctx, d.q.OutboxFloors, dialects.FloorGroups, settled, from, at).Scan(&f.Rewinds, &f.Groups)
	return f, err
}

func (d *Dialect) OutboxWriters(ctx context.Context) ([]dialects.Writer, error) {
	return d.writers(ctx, d.q.OutboxWriters)
}

// writers lists the open transactions that a writers statement finds.
func (d *Dialect) writers(ctx context.Context, query string) (_ []dialects.Writer, err error) {
	defer func() { err = mapError(err) }()
	rows, err := d.pool.Query(ctx, query)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (dialects.Writer, error) {
		var w dialects.Writer
		var since *time.Time
		err := r.Scan(&w.PID, &w.Xid, &since, &w.State, &w.Application, &w.Query)
		if since != nil {
			w.Since = *since
		}
		return w, err
	})
}

// mapError maps native errors that a user can act on to the seam's own:
// "relation does not exist" to dialects.ErrNoTable, a failed connection to
// dialects.ErrUnreachable (with the driver's last line, which names the
// address and the reason).
func mapError(err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fmt.Errorf("%w (%s)", dialects.ErrNoTable, pgErr.Message)
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) && errors.As(err, &pgErr) && loginRefused(pgErr.Code) {
		// The server answered: a wrong user, password or database. (A
		// server that is starting, stopping or full answers too, with
		// other codes: that is an outage, below.)
		return dialects.LoginRefused(fmt.Sprintf("%s (SQLSTATE %s)", pgErr.Message, pgErr.Code))
	}
	if errors.As(err, &ce) {
		lines := strings.Split(strings.TrimSpace(ce.Error()), "\n")
		return fmt.Errorf("%w: %s", dialects.ErrUnreachable, strings.TrimSpace(lines[len(lines)-1]))
	}
	return err
}

// loginRefused tells the codes of a refused login: invalid authorization
// (class 28), a database that does not exist, no permission to connect.
func loginRefused(code string) bool {
	return strings.HasPrefix(code, "28") || code == "3D000" || code == "42501"
}

func (d *Dialect) OutboxStats(ctx context.Context) (st dialects.Stats, err error) {
	defer func() { err = mapError(err) }()
	return dialects.StatsFrom(
		func(each func(string, int64)) error { return d.counts(ctx, d.q.OutboxCountByState, each) },
		func(each func(string, int64)) error { return d.counts(ctx, d.q.OutboxDeadByTopic, each) },
		func() (dialects.PendingSummary, error) { return d.OutboxPending(ctx) })
}

// counts runs a query of (name, count) rows.
func (d *Dialect) counts(ctx context.Context, query string, each func(string, int64)) error {
	rows, err := d.pool.Query(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	return dialects.EachCount(rows, each)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func (d *Dialect) OutboxPending(ctx context.Context) (p dialects.PendingSummary, err error) {
	defer func() { err = mapError(err) }()
	var secs float64
	err = d.pool.QueryRow(ctx, d.q.OutboxPendingDue).Scan(&secs, &p.ScheduledLater)
	p.OldestDue = seconds(secs)
	return p, err
}

func (d *Dialect) OutboxCountByTopic(ctx context.Context) (_ []dialects.TopicCount, err error) {
	defer func() { err = mapError(err) }()
	rows, err := d.pool.Query(ctx, d.q.OutboxCountByTopicState)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (dialects.TopicCount, error) {
		var c dialects.TopicCount
		var state string
		err := r.Scan(&c.Topic, &state, &c.Rows)
		c.State = dialects.State(state)
		return c, err
	})
}

func (d *Dialect) OutboxBlockedKeys(ctx context.Context, p dialects.BlockedKeysParams) (_ []dialects.BlockedKey, err error) {
	defer func() { err = mapError(err) }()
	rows, err := d.pool.Query(ctx, d.q.OutboxBlockedKeys, p.Scan, p.Limit, dialects.BehindCap)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (dialects.BlockedKey, error) {
		var k dialects.BlockedKey
		var waiting, next float64
		err := r.Scan(&k.Key, &k.ID, &k.Topic, &k.Attempt, &k.MaxAttempts, &k.LastError, &waiting, &next, &k.Behind)
		k.Waiting, k.NextAttemptIn = seconds(waiting), seconds(next)
		return k, err
	})
}

func (d *Dialect) OutboxDeadGroups(ctx context.Context, newest int) (_ []dialects.DeadGroup, err error) {
	defer func() { err = mapError(err) }()
	rows, err := d.pool.Query(ctx, d.q.OutboxDeadGroups, newest, dialects.DeadErrorPrefix)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (dialects.DeadGroup, error) {
		var g dialects.DeadGroup
		err := r.Scan(&g.Topic, &g.Error, &g.Rows, &g.Newest, &g.IDs)
		return g, err
	})
}

func (d *Dialect) OutboxInsert(ctx context.Context, in []dialects.NewRow) (err error) {
	defer func() { err = mapError(err) }()
	if len(in) == 0 {
		return nil
	}
	n := len(in)
	a := insertArgs{IDs: make([]*uuid.UUID, n), Topics: make([]string, n), Keys: make([]*string, n), Payloads: make([]string, n),
		Headers: make([]*string, n), AggregateTypes: make([]*string, n), MaxAttempts: make([]*int32, n), ScheduledAt: make([]*time.Time, n)}
	for i, r := range in {
		a.IDs[i] = r.ID
		a.Topics[i] = r.Topic
		a.Keys[i] = r.Key
		a.Payloads[i] = string(r.Payload)
		if r.Headers != nil {
			h := string(r.Headers)
			a.Headers[i] = &h
		}
		a.AggregateTypes[i] = r.AggregateType
		if r.MaxAttempts != nil {
			m := int32(*r.MaxAttempts)
			a.MaxAttempts[i] = &m
		}
		a.ScheduledAt[i] = r.ScheduledAt
	}
	_, err = d.pool.Exec(ctx, d.q.OutboxInsert.SQL(), d.q.OutboxInsert.Args(a)...)
	return err
}

func (d *Dialect) MigrationHistory(ctx context.Context) ([]dialects.AppliedMigration, error) {
	return dialects.ReadHistory(ctx, poolConn(d.pool), d.q.HistoryList)
}

// MigrationSession takes the migration lock on a connection of its own.
func (d *Dialect) MigrationSession(ctx context.Context) (dialects.MigrationSession, error) {
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, mapError(err)
	}
	return dialects.OpenMigrationSession(ctx, heldConn(c), d.q.HistoryStatements, d.names)
}

// querier is what a pool, a connection and a transaction share in pgx.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// conn adapts a pool, one held connection or a transaction to
// dialects.Conn.
type conn struct {
	q       querier
	begin   func(context.Context) (pgx.Tx, error)
	release func()
}

func poolConn(p *pgxpool.Pool) conn { return conn{q: p, begin: p.Begin, release: func() {}} }

func heldConn(c *pgxpool.Conn) conn { return conn{q: c, begin: c.Begin, release: c.Release} }

// Exec runs a statement. Migration batches hold several statements: the
// simple protocol runs them, and pgx uses it only without parameters.
func (c conn) Exec(ctx context.Context, query string, args ...any) error {
	if len(args) == 0 {
		args = []any{pgx.QueryExecModeSimpleProtocol}
	}
	_, err := c.q.Exec(ctx, query, args...)
	return mapError(err)
}

func (c conn) Query(ctx context.Context, query string, args []any, each func(dialects.Scanner) error) error {
	rows, err := c.q.Query(ctx, query, args...)
	if err == nil {
		defer rows.Close()
		err = dialects.EachRow(rows, each)
	}
	return mapError(err)
}

func (c conn) Tx(ctx context.Context, fn func(dialects.Conn) error) error {
	tx, err := c.begin(ctx)
	if err != nil {
		return mapError(err)
	}
	return mapError(dialects.RunTx(ctx, txConn{conn{q: tx, begin: tx.Begin, release: func() {}}, tx}, fn))
}

// txConn is a transaction as dialects.Tx.
type txConn struct {
	conn
	tx pgx.Tx
}

func (t txConn) Commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t txConn) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

func (c conn) Release() { c.release() }
