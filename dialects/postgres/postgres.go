// Package postgres is the PostgreSQL dialect, on pgx.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
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
type Options struct {
	URL            string
	Names          dialects.Names
	MaxConnections int
}

// Dialect is the PostgreSQL implementation of dialects.Dialect.
type Dialect struct {
	pool  *pgxpool.Pool
	names dialects.Names
	q     map[string]string
	cfg   *pgxpool.Config
}

var _ dialects.Dialect = (*Dialect)(nil)

// Open renders every statement for opts.Names and opens a connection pool. It
// does not wait for the database: the pool connects on first use.
func Open(ctx context.Context, opts Options) (*Dialect, error) {
	if ps := opts.Names.Validate(); len(ps) > 0 {
		return nil, fmt.Errorf("%s: %s", ps[0].Key, ps[0].Reason)
	}
	q, err := Queries(opts.Names)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("database.url is not a valid PostgreSQL URL (postgres://user:password@host:5432/database): %w", err)
	}
	if opts.MaxConnections > 0 {
		cfg.MaxConns = int32(opts.MaxConnections)
	}
	if _, set := cfg.ConnConfig.RuntimeParams["application_name"]; !set {
		cfg.ConnConfig.RuntimeParams["application_name"] = "queuebox"
	}
	// Custom plans for every statement: a generic plan cannot see how many
	// ids an array holds, and statistics of the small, transient set of
	// processing rows are always stale. A generic plan of OutboxComplete ran
	// 30 times slower than the custom one (docs/internals.md). Planning
	// costs about a millisecond per statement, once per batch.
	if _, set := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !set {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Dialect{pool: pool, names: opts.Names, q: q, cfg: cfg}, nil
}

// Queries renders the named statements for names.
func Queries(names dialects.Names) (map[string]string, error) {
	return dialects.LoadQueries(queryFS, "queries.sql", dialects.TemplateFuncs(names, Quoting))
}

// Pool exposes the pool to tests in this module.
func (d *Dialect) Pool() *pgxpool.Pool { return d.pool }

func (d *Dialect) Name() string          { return "postgresql" }
func (d *Dialect) Names() dialects.Names { return d.names }
func (d *Dialect) Close()                { d.pool.Close() }

func (d *Dialect) Ping(ctx context.Context) error { return noTable(d.pool.Ping(ctx)) }

func ms(d time.Duration) int64 { return d.Milliseconds() }

func (d *Dialect) OutboxClaim(ctx context.Context, p dialects.ClaimParams) (_ []dialects.Row, err error) {
	defer func() { err = noTable(err) }()
	if p.Limit <= 0 {
		return nil, nil
	}
	var window *int32
	if p.Window > 0 {
		w := int32(p.Window)
		window = &w
	}
	rows, err := d.pool.Query(ctx, d.q["OutboxClaim"], p.Limit, ms(p.Lease), p.Token, p.Heads(), window)
	if err != nil {
		return nil, err
	}
	out := make([]dialects.Row, 0, p.Limit)
	for rows.Next() {
		var r dialects.Row
		if err := rows.Scan(&r.ID, &r.Topic, &r.Key, &r.Payload, &r.Headers, &r.AggregateType,
			&r.Attempt, &r.MaxAttempts, &r.Sequence, &r.CreatedAt); err != nil {
			rows.Close()
			return nil, err
		}
		r.Token = p.Token
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	dialects.SortClaimed(out)
	return out, nil
}

func (d *Dialect) OutboxRenewLeases(ctx context.Context, claims []dialects.Claim, lease time.Duration) ([]dialects.Claim, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	tokens := dialects.Tokens(claims)
	rows, err := d.pool.Query(ctx, d.q["OutboxRenewLeases"], tokens, ms(lease))
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
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		held[id] = struct{}{}
	}
	return held, rows.Err()
}

func (d *Dialect) OutboxComplete(ctx context.Context, outcomes []dialects.Outcome) ([]dialects.Claim, error) {
	if len(outcomes) == 0 {
		return nil, nil
	}
	n := len(outcomes)
	ids := make([]uuid.UUID, n)
	tokens := make([]uuid.UUID, n)
	states := make([]string, n)
	inc := make([]int32, n)
	delays := make([]*int64, n)
	errs := make([]*string, n)
	claims := make([]dialects.Claim, n)
	for i, o := range outcomes {
		w := dialects.WriteOf(o)
		ids[i], tokens[i], claims[i] = o.ID, o.Token, o.Claim
		states[i] = string(w.State)
		inc[i] = int32(w.AttemptIncrement)
		if w.Reschedule {
			v := ms(o.Delay)
			delays[i] = &v
		}
		if w.WriteError {
			e := o.Error
			errs[i] = &e
		}
	}
	rows, err := d.pool.Query(ctx, d.q["OutboxComplete"], ids, tokens, states, inc, delays, errs)
	if err != nil {
		return nil, err
	}
	held, err := collectIDs(rows, n)
	if err != nil {
		return nil, err
	}
	return dialects.LostClaims(claims, held), nil
}

func (d *Dialect) OutboxReleaseExpired(ctx context.Context, limit int, keep []uuid.UUID) (int, error) {
	if keep == nil {
		keep = []uuid.UUID{}
	}
	tag, err := d.pool.Exec(ctx, d.q["OutboxReleaseExpired"], limit, keep)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

// filterArgs binds the common filter parameters ($1..$6).
func filterArgs(f dialects.Filter, defaultStates []dialects.State) []any {
	states := f.States
	if len(states) == 0 {
		states = defaultStates
	}
	ss := make([]string, len(states))
	for i, s := range states {
		ss[i] = string(s)
	}
	var ids []uuid.UUID
	if len(f.IDs) > 0 {
		ids = f.IDs
	}
	var errText *string
	if f.ErrorContains != "" {
		errText = &f.ErrorContains
	}
	return []any{ss, ids, f.Key, f.Since, f.Until, errText}
}

const selectChunk = 5000

func (d *Dialect) OutboxReplay(ctx context.Context, f dialects.Filter, dryRun bool) (_ int, err error) {
	defer func() { err = noTable(err) }()
	args := filterArgs(f, dialects.ReplayDefaultStates(f))
	states := args[0]
	total := 0
	after := int64(-1 << 62)
	for {
		rows, err := d.pool.Query(ctx, d.q["OutboxSelect"], append(args, after, selectChunk)...)
		if err != nil {
			return total, err
		}
		var ids []uuid.UUID
		n := 0
		for rows.Next() {
			var id uuid.UUID
			var topic string
			if err := rows.Scan(&id, &topic, &after); err != nil {
				rows.Close()
				return total, err
			}
			n++
			if f.TopicMatch == nil || f.TopicMatch(topic) {
				ids = append(ids, id)
			}
		}
		if err := rows.Err(); err != nil {
			return total, err
		}
		if dryRun {
			total += len(ids)
		} else if len(ids) > 0 {
			tag, err := d.pool.Exec(ctx, d.q["OutboxReplay"], ids, states)
			if err != nil {
				return total, err
			}
			total += int(tag.RowsAffected())
		}
		if n < selectChunk {
			return total, nil
		}
	}
}

func (d *Dialect) OutboxList(ctx context.Context, f dialects.Filter, limit int) (_ []dialects.ListedRow, err error) {
	defer func() { err = noTable(err) }()
	args := filterArgs(f, []dialects.State{dialects.Dead})
	// Topic patterns are matched in Go: read in pages until limit rows match.
	var out []dialects.ListedRow
	rows, err := d.pool.Query(ctx, d.q["OutboxList"], append(args, 1<<31-1)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() && len(out) < limit {
		var r dialects.ListedRow
		var state string
		if err := rows.Scan(&r.ID, &r.Topic, &r.Key, &r.AggregateType, &state, &r.Attempt, &r.MaxAttempts,
			&r.Sequence, &r.CreatedAt, &r.UpdatedAt, &r.LastError); err != nil {
			return nil, err
		}
		r.State = dialects.State(state)
		if f.TopicMatch == nil || f.TopicMatch(r.Topic) {
			out = append(out, r)
		}
	}
	return out, rows.Err()
}

func (d *Dialect) OutboxPurge(ctx context.Context, state dialects.State, olderThan time.Duration, batch int) (int, error) {
	tag, err := d.pool.Exec(ctx, d.q["OutboxPurge"], string(state), ms(olderThan), batch)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

func (d *Dialect) KeyLocksPrune(ctx context.Context, after string, limit int) (int, string, error) {
	var deleted int
	var next *string
	if err := d.pool.QueryRow(ctx, d.q["KeyLocksPrune"], after, limit).Scan(&deleted, &next); err != nil {
		return 0, "", err
	}
	if next == nil {
		return deleted, "", nil
	}
	return deleted, *next, nil
}

// noTable maps native errors that a user can act on to the seam's own:
// "relation does not exist" to dialects.ErrNoTable, a failed connection to
// dialects.ErrUnreachable (with the driver's last line, which names the
// address and the reason).
func noTable(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fmt.Errorf("%w (%s)", dialects.ErrNoTable, pgErr.Message)
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		lines := strings.Split(strings.TrimSpace(ce.Error()), "\n")
		return fmt.Errorf("%w: %s", dialects.ErrUnreachable, strings.TrimSpace(lines[len(lines)-1]))
	}
	return err
}

func (d *Dialect) OutboxStats(ctx context.Context) (st dialects.Stats, err error) {
	defer func() { err = noTable(err) }()
	st = dialects.Stats{Rows: map[dialects.State]int64{}, DeadByTopic: map[string]int64{}}
	for _, s := range dialects.States {
		st.Rows[s] = 0
	}
	rows, err := d.pool.Query(ctx, d.q["OutboxCountByState"])
	if err != nil {
		return st, err
	}
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			rows.Close()
			return st, err
		}
		st.Rows[dialects.State(s)] = n
	}
	if err := rows.Err(); err != nil {
		return st, err
	}
	var secs float64
	if err := d.pool.QueryRow(ctx, d.q["OutboxOldestPending"]).Scan(&secs); err != nil {
		return st, err
	}
	st.OldestPending = time.Duration(secs * float64(time.Second))
	rows, err = d.pool.Query(ctx, d.q["OutboxDeadByTopic"])
	if err != nil {
		return st, err
	}
	for rows.Next() {
		var t string
		var n int64
		if err := rows.Scan(&t, &n); err != nil {
			rows.Close()
			return st, err
		}
		st.DeadByTopic[t] = n
	}
	return st, rows.Err()
}

func (d *Dialect) OutboxInsert(ctx context.Context, in []dialects.NewRow) error {
	if len(in) == 0 {
		return nil
	}
	n := len(in)
	ids := make([]*uuid.UUID, n)
	topics := make([]string, n)
	keys := make([]*string, n)
	payloads := make([]string, n)
	headers := make([]*string, n)
	aggs := make([]*string, n)
	maxes := make([]*int32, n)
	sched := make([]*time.Time, n)
	for i, r := range in {
		ids[i] = r.ID
		topics[i] = r.Topic
		keys[i] = r.Key
		payloads[i] = string(r.Payload)
		if r.Headers != nil {
			h := string(r.Headers)
			headers[i] = &h
		}
		aggs[i] = r.AggregateType
		if r.MaxAttempts != nil {
			m := int32(*r.MaxAttempts)
			maxes[i] = &m
		}
		sched[i] = r.ScheduledAt
	}
	_, err := d.pool.Exec(ctx, d.q["OutboxInsert"], ids, topics, keys, payloads, headers, aggs, maxes, sched)
	return err
}

// Listen holds one connection outside the pool, LISTENs on the channel that
// the notify trigger (migration V13) uses, and calls wake for every
// notification about this outbox table.
func (d *Dialect) Listen(ctx context.Context, wake func()) error {
	conn, err := pgx.ConnectConfig(ctx, d.cfg.ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN queuebox"); err != nil {
		return err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if d.isOurs(n.Payload) {
			wake()
		}
	}
}

func (d *Dialect) isOurs(payload string) bool {
	schema, table, ok := strings.Cut(payload, ".")
	if !ok || table != d.names.Outbox {
		return false
	}
	return d.names.Schema == "" || schema == d.names.Schema
}

func (d *Dialect) MigrationHistory(ctx context.Context) ([]dialects.AppliedMigration, error) {
	var out []dialects.AppliedMigration
	rows, err := d.pool.Query(ctx, d.q["HistoryList"])
	if err == nil {
		out, err = pgx.CollectRows(rows, scanApplied)
	}
	if err = noTable(err); errors.Is(err, dialects.ErrNoTable) {
		return nil, nil // no history table: nothing applied
	}
	return out, err
}

func scanApplied(r pgx.CollectableRow) (dialects.AppliedMigration, error) {
	var m dialects.AppliedMigration
	err := r.Scan(&m.Version, &m.Name, &m.Checksum, &m.AppliedAt)
	return m, err
}

// MigrationSession takes a session-level advisory lock on a connection of its
// own; a second migrator waits for it.
func (d *Dialect) MigrationSession(ctx context.Context) (dialects.MigrationSession, error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, noTable(err)
	}
	lockKey := "queuebox.migrate." + d.names.Schema + "." + d.names.Outbox
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", lockKey); err != nil {
		conn.Release()
		return nil, err
	}
	return &migrationSession{d: d, conn: conn, lockKey: lockKey}, nil
}

type migrationSession struct {
	d       *Dialect
	conn    *pgxpool.Conn
	lockKey string
}

func (s *migrationSession) Applied(ctx context.Context) ([]dialects.AppliedMigration, error) {
	if s.d.names.Schema != "" {
		if _, err := s.conn.Exec(ctx, s.d.q["SchemaCreate"]); err != nil {
			return nil, err
		}
	}
	if _, err := s.conn.Exec(ctx, s.d.q["HistoryCreate"]); err != nil {
		return nil, err
	}
	rows, err := s.conn.Query(ctx, s.d.q["HistoryList"])
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanApplied)
}

func (s *migrationSession) Apply(ctx context.Context, version int, name, checksum string, batches []string) error {
	return pgx.BeginFunc(ctx, s.conn, func(tx pgx.Tx) error {
		for _, b := range batches {
			// The simple protocol runs a batch of several statements.
			if _, err := tx.Exec(ctx, b, pgx.QueryExecModeSimpleProtocol); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, s.d.q["HistoryInsert"], version, name, checksum)
		return err
	})
}

func (s *migrationSession) Close(ctx context.Context) error {
	defer s.conn.Release()
	_, err := s.conn.Exec(ctx, "SELECT pg_advisory_unlock(hashtext($1))", s.lockKey)
	return err
}
