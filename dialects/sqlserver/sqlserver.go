// Package sqlserver is the SQL Server dialect, on go-mssqldb.
//
// No SQL Server runs in this project's CI: the statements are unit-tested as
// rendered text, and the conformance suite (dialecttest) runs against a real
// server when QUEUEBOX_TEST_SQLSERVER_URL is set.
package sqlserver

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	_ "github.com/microsoft/go-mssqldb" // registers the "sqlserver" driver

	"github.com/queuebox/queuebox/dialects"
)

//go:embed queries.sql
var queryFS embed.FS

// Quoting quotes SQL Server identifiers and literals.
var Quoting = dialects.Quoting{
	Ident:   func(s string) string { return "[" + strings.ReplaceAll(s, "]", "]]") + "]" },
	Literal: func(s string) string { return "N'" + strings.ReplaceAll(s, "'", "''") + "'" },
}

// Options configure a Dialect.
type Options struct {
	URL            string
	Names          dialects.Names
	MaxConnections int
}

// Dialect is the SQL Server implementation of dialects.Dialect.
type Dialect struct {
	db    *sql.DB
	names dialects.Names
	q     map[string]string
}

var _ dialects.Dialect = (*Dialect)(nil)

// Queries renders the named statements for names.
func Queries(names dialects.Names) (map[string]string, error) {
	return dialects.LoadQueries(queryFS, "queries.sql", dialects.TemplateFuncs(names, Quoting))
}

// Open renders every statement and opens a connection pool.
func Open(_ context.Context, opts Options) (*Dialect, error) {
	if ps := opts.Names.Validate(); len(ps) > 0 {
		return nil, fmt.Errorf("%s: %s", ps[0].Key, ps[0].Reason)
	}
	q, err := Queries(opts.Names)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlserver", opts.URL)
	if err != nil {
		return nil, fmt.Errorf("database.url is not a valid SQL Server URL (sqlserver://user:password@host:1433?database=app): %w", err)
	}
	if opts.MaxConnections > 0 {
		db.SetMaxOpenConns(opts.MaxConnections)
		db.SetMaxIdleConns(opts.MaxConnections)
	}
	return &Dialect{db: db, names: opts.Names, q: q}, nil
}

// DB exposes the pool to tests in this module.
func (d *Dialect) DB() *sql.DB { return d.db }

func (d *Dialect) Name() string                   { return "sqlserver" }
func (d *Dialect) Names() dialects.Names          { return d.names }
func (d *Dialect) Close()                         { _ = d.db.Close() }
func (d *Dialect) Ping(ctx context.Context) error { return d.db.PingContext(ctx) }

// dateaddArg fits a number for DATEADD, which refuses BIGINT (what the driver
// sends for an int64): an int32, capped.
func dateaddArg(n int64) int32 {
	return int32(min(max(n, -1<<31+1), 1<<31-1))
}

func jsonArg(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func (d *Dialect) OutboxClaim(ctx context.Context, p dialects.ClaimParams) ([]dialects.Row, error) {
	if p.Limit <= 0 {
		return nil, nil
	}
	rows, err := d.db.QueryContext(ctx, d.q["OutboxClaim"], p.Limit, dateaddArg(p.Lease.Milliseconds()), p.Token.String(), p.Heads())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dialects.Row
	for rows.Next() {
		var r dialects.Row
		var id, payload, headers string
		if err := rows.Scan(&id, &r.Topic, &r.Key, &payload, &headers, &r.AggregateType,
			&r.Attempt, &r.MaxAttempts, &r.Sequence, &r.CreatedAt); err != nil {
			return nil, err
		}
		if r.ID, err = uuid.Parse(id); err != nil {
			return nil, err
		}
		r.Payload, r.Headers, r.Token = []byte(payload), []byte(headers), p.Token
		r.CreatedAt = r.CreatedAt.UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	dialects.SortClaimed(out)
	return out, nil
}

func (d *Dialect) queryIDs(ctx context.Context, query string, args ...any) (map[uuid.UUID]struct{}, error) {
	rows, err := d.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	held := map[uuid.UUID]struct{}{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		id, err := uuid.Parse(s)
		if err != nil {
			return nil, err
		}
		held[id] = struct{}{}
	}
	return held, rows.Err()
}

func (d *Dialect) OutboxRenewLeases(ctx context.Context, claims []dialects.Claim, lease time.Duration) ([]dialects.Claim, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	held, err := d.queryIDs(ctx, d.q["OutboxRenewLeases"], jsonArg(dialects.Tokens(claims)), dateaddArg(lease.Milliseconds()))
	if err != nil {
		return nil, err
	}
	return dialects.LostClaims(claims, held), nil
}

type completeArg struct {
	I uuid.UUID `json:"i"`
	T uuid.UUID `json:"t"`
	S string    `json:"s"`
	A int       `json:"a"`
	D *int64    `json:"d"`
	W int       `json:"w"`
	E string    `json:"e"`
}

// CompleteArg renders the JSON parameter of OutboxComplete (exported for the
// rendered-SQL tests).
func CompleteArg(outcomes []dialects.Outcome) string {
	args := make([]completeArg, len(outcomes))
	for i, o := range outcomes {
		w := dialects.WriteOf(o)
		a := completeArg{I: o.ID, T: o.Token, S: string(w.State), A: w.AttemptIncrement}
		if w.Reschedule {
			v := o.Delay.Milliseconds()
			a.D = &v
		}
		if w.WriteError {
			a.W, a.E = 1, o.Error
		}
		args[i] = a
	}
	return jsonArg(args)
}

func (d *Dialect) OutboxComplete(ctx context.Context, outcomes []dialects.Outcome) ([]dialects.Claim, error) {
	if len(outcomes) == 0 {
		return nil, nil
	}
	held, err := d.queryIDs(ctx, d.q["OutboxComplete"], CompleteArg(outcomes))
	if err != nil {
		return nil, err
	}
	claims := make([]dialects.Claim, len(outcomes))
	for i, o := range outcomes {
		claims[i] = o.Claim
	}
	return dialects.LostClaims(claims, held), nil
}

func (d *Dialect) scalarInt(ctx context.Context, query string, args ...any) (int, error) {
	var n int
	err := d.db.QueryRowContext(ctx, query, args...).Scan(&n)
	return n, err
}

func (d *Dialect) OutboxReleaseExpired(ctx context.Context, limit int, keep []uuid.UUID) (int, error) {
	if keep == nil {
		keep = []uuid.UUID{}
	}
	return d.scalarInt(ctx, d.q["OutboxReleaseExpired"], limit, jsonArg(keep))
}

func filterArgs(f dialects.Filter, defaults []dialects.State) []any {
	states := f.States
	if len(states) == 0 {
		states = defaults
	}
	var ids, errText any
	if len(f.IDs) > 0 {
		ids = jsonArg(f.IDs)
	}
	if f.ErrorContains != "" {
		errText = f.ErrorContains
	}
	var key, since, until any
	if f.Key != nil {
		key = *f.Key
	}
	if f.Since != nil {
		since = f.Since.UTC()
	}
	if f.Until != nil {
		until = f.Until.UTC()
	}
	return []any{jsonArg(states), ids, key, since, until, errText}
}

func (d *Dialect) OutboxReplay(ctx context.Context, f dialects.Filter, dryRun bool) (int, error) {
	args := filterArgs(f, dialects.ReplayDefaultStates(f))
	total := 0
	after := int64(-1 << 62)
	const chunk = 5000
	for {
		rows, err := d.db.QueryContext(ctx, d.q["OutboxSelect"], append(args, after, chunk)...)
		if err != nil {
			return total, err
		}
		var ids []string
		n := 0
		for rows.Next() {
			var id, topic string
			if err := rows.Scan(&id, &topic, &after); err != nil {
				rows.Close()
				return total, err
			}
			n++
			if f.TopicMatch == nil || f.TopicMatch(topic) {
				ids = append(ids, id)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return total, err
		}
		if dryRun {
			total += len(ids)
		} else if len(ids) > 0 {
			c, err := d.scalarInt(ctx, d.q["OutboxReplay"], jsonArg(ids), args[0])
			if err != nil {
				return total, err
			}
			total += c
		}
		if n < chunk {
			return total, nil
		}
	}
}

func (d *Dialect) OutboxList(ctx context.Context, f dialects.Filter, limit int) ([]dialects.ListedRow, error) {
	args := filterArgs(f, []dialects.State{dialects.Dead})
	rows, err := d.db.QueryContext(ctx, d.q["OutboxList"], append(args, 1<<31-1)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dialects.ListedRow
	for rows.Next() && len(out) < limit {
		var r dialects.ListedRow
		var id, state string
		if err := rows.Scan(&id, &r.Topic, &r.Key, &r.AggregateType, &state, &r.Attempt, &r.MaxAttempts,
			&r.Sequence, &r.CreatedAt, &r.UpdatedAt, &r.LastError); err != nil {
			return nil, err
		}
		if r.ID, err = uuid.Parse(id); err != nil {
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
	return d.scalarInt(ctx, d.q["OutboxPurge"], string(state), dateaddArg(int64(olderThan/time.Second)), batch)
}

func (d *Dialect) OutboxStats(ctx context.Context) (dialects.Stats, error) {
	st := dialects.Stats{Rows: map[dialects.State]int64{}, DeadByTopic: map[string]int64{}}
	for _, s := range dialects.States {
		st.Rows[s] = 0
	}
	if err := d.eachCount(ctx, d.q["OutboxCountByState"], func(k string, n int64) { st.Rows[dialects.State(k)] = n }); err != nil {
		return st, err
	}
	var millis int64
	if err := d.db.QueryRowContext(ctx, d.q["OutboxOldestPending"]).Scan(&millis); err != nil {
		return st, err
	}
	st.OldestPending = time.Duration(millis) * time.Millisecond
	err := d.eachCount(ctx, d.q["OutboxDeadByTopic"], func(k string, n int64) { st.DeadByTopic[k] = n })
	return st, err
}

func (d *Dialect) eachCount(ctx context.Context, query string, f func(string, int64)) error {
	rows, err := d.db.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return err
		}
		f(k, n)
	}
	return rows.Err()
}

type insertArg struct {
	I       *uuid.UUID `json:"i,omitempty"`
	Topic   string     `json:"topic"`
	K       *string    `json:"k,omitempty"`
	Payload string     `json:"payload"`
	Headers *string    `json:"headers,omitempty"`
	Agg     *string    `json:"agg,omitempty"`
	Max     *int       `json:"max,omitempty"`
	At      *string    `json:"at,omitempty"`
}

func (d *Dialect) OutboxInsert(ctx context.Context, in []dialects.NewRow) error {
	if len(in) == 0 {
		return nil
	}
	args := make([]insertArg, len(in))
	for i, r := range in {
		a := insertArg{I: r.ID, Topic: r.Topic, K: r.Key, Payload: string(r.Payload), Agg: r.AggregateType, Max: r.MaxAttempts}
		if r.Headers != nil {
			h := string(r.Headers)
			a.Headers = &h
		}
		if r.ScheduledAt != nil {
			s := r.ScheduledAt.UTC().Format("2006-01-02T15:04:05.9999999")
			a.At = &s
		}
		args[i] = a
	}
	_, err := d.db.ExecContext(ctx, d.q["OutboxInsert"], jsonArg(args))
	return err
}

// KeyLocksPrune is not available: SQL Server has no producer-ordering lock
// table.
func (d *Dialect) KeyLocksPrune(context.Context, string, int) (int, string, error) {
	return 0, "", dialects.ErrNotSupported
}

// Listen is not available: SQL Server has no LISTEN/NOTIFY; the claimer polls.
func (d *Dialect) Listen(context.Context, func()) error { return dialects.ErrNotSupported }

func (d *Dialect) MigrationHistory(ctx context.Context) ([]dialects.AppliedMigration, error) {
	rows, err := d.db.QueryContext(ctx, d.q["HistoryListIfExists"])
	if err != nil {
		return nil, err
	}
	return scanApplied(rows)
}

func scanApplied(rows *sql.Rows) ([]dialects.AppliedMigration, error) {
	defer rows.Close()
	var out []dialects.AppliedMigration
	for rows.Next() {
		var m dialects.AppliedMigration
		if err := rows.Scan(&m.Version, &m.Name, &m.Checksum, &m.AppliedAt); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// MigrationSession takes an exclusive session-owned application lock
// (sp_getapplock) on a connection of its own.
func (d *Dialect) MigrationSession(ctx context.Context) (dialects.MigrationSession, error) {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	res := "queuebox.migrate." + d.names.Schema + "." + d.names.Outbox
	if _, err := conn.ExecContext(ctx, d.q["MigrationLock"], res); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return &migrationSession{d: d, conn: conn, resource: res}, nil
}

type migrationSession struct {
	d        *Dialect
	conn     *sql.Conn
	resource string
}

func (s *migrationSession) Applied(ctx context.Context) ([]dialects.AppliedMigration, error) {
	if s.d.names.Schema != "" {
		if _, err := s.conn.ExecContext(ctx, s.d.q["SchemaCreate"]); err != nil {
			return nil, err
		}
	}
	if _, err := s.conn.ExecContext(ctx, s.d.q["HistoryCreate"]); err != nil {
		return nil, err
	}
	rows, err := s.conn.QueryContext(ctx, s.d.q["HistoryList"])
	if err != nil {
		return nil, err
	}
	return scanApplied(rows)
}

func (s *migrationSession) Apply(ctx context.Context, version int, name, checksum string, batches []string) error {
	tx, err := s.conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	for _, b := range batches {
		if _, err := tx.ExecContext(ctx, b); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, s.d.q["HistoryInsert"], version, name, checksum); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func (s *migrationSession) Close(ctx context.Context) error {
	defer s.conn.Close()
	_, err := s.conn.ExecContext(ctx, s.d.q["MigrationUnlock"], s.resource)
	return err
}
