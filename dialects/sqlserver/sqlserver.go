// Package sqlserver is the SQL Server dialect, on go-mssqldb.
//
// It implements every method of the seam. Its claims take the same rows in
// the same order as PostgreSQL's: heads then followers, the gate, the keys
// a replica continues first, and each walk (in schedule order, key by key
// after a cursor that travels in ClaimParams.After and comes back in
// Claimed.Cursor, or none). It ignores the relay's bounds
// (dialects.Bounds: the lookback, the floors, the keys' positions) and the
// bound of the look for expired leases. Without row versioning, the ghost
// records that claims and completions leave in its indexes go with the
// ghost cleanup soon after each commit, whatever else runs, and its walks
// do not slow down under a long transaction; with read committed snapshot
// or snapshot isolation on, they wait for the oldest snapshot, and the
// claims walk them, unbounded. So: a continued key's head is its first
// pending or processing row, wherever its run ended; the look for
// stragglers finds none (no row is ever left behind a bound); the floors
// are none (Groups nil); a rewind moves nothing (there is no counter:
// Probe.Rewinds is 0); the claim's report is zero.
//
// Statements with many parameters name them (@limit), bound by name with
// sql.Named from structs whose fields carry the same names
// (dialects.Named); the rest number theirs (@p1).
//
// No SQL Server runs in this project's CI: the statements are unit-tested as
// rendered text, and the conformance suite (dialecttest) runs against a real
// server when QUEUEBOX_TEST_SQLSERVER_URL is set.
package sqlserver

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	mssql "github.com/microsoft/go-mssqldb" // also registers the "sqlserver" driver
	"github.com/microsoft/go-mssqldb/msdsn"

	"github.com/queuebox/queuebox/dialects"
)

//go:embed queries.sql
var queryFS embed.FS

// Quoting quotes SQL Server identifiers and literals.
var Quoting = dialects.Quoting{
	Ident:   func(s string) string { return "[" + strings.ReplaceAll(s, "]", "]]") + "]" },
	Literal: func(s string) string { return "N'" + strings.ReplaceAll(s, "'", "''") + "'" },
	Binding: dialects.ByName,
}

// Options configure a Dialect.
type Options = dialects.ConnectOptions

// Dialect is the SQL Server implementation of dialects.Dialect.
type Dialect struct {
	db    *sql.DB
	names dialects.Names
	q     *Catalog
	// DestinationTables are the destinations' state (destinations.go).
	dialects.DestinationTables
	// AttemptTables are the attempt history's reads and retention.
	dialects.AttemptTables
}

// Catalog holds every statement of queries.sql, rendered for the configured
// names; each field is the statement of the same name. A statement with
// many parameters names them, and its field is a dialects.Named of the
// struct that binds them (the driver binds them by name).
type Catalog struct {
	OutboxClaim  dialects.Named[claimArgs]
	OutboxSelect dialects.Named[selectArgs]
	OutboxList   dialects.Named[listArgs]
	CopyList     dialects.Named[copyListArgs]

	OutboxRenewLeases, OutboxComplete, OutboxReleaseExpired  string
	OutboxCompleteAttempts                                   string
	OutboxReplayIDs, OutboxPurge                             string
	OutboxPurgeWait                                          string
	OutboxCountByState, OutboxDeadByTopic, OutboxInsert      string
	OutboxPendingDue, OutboxCountByTopicState, OutboxNextDue string
	OutboxHorizon, OutboxRowsOf                              string
	OutboxBlockedKeys, OutboxDeadGroups                      string
	OutboxProbe, OutboxWriters, OtherRelays                  string
	FanOutComplete, FanOutBlockedLanes                       string
	CopyClaim, CopyRenewLeases, CopyComplete                 string
	CopyReleaseExpired, CopyProbe, CopyPurge, CopyCounts     string
	CopiesOfRow, CopyReplay, CopyBackfill                    string
	dialects.HistoryStatements
	InboxStatements
	dialects.DestinationStatements
	dialects.AttemptStatements
}

var _ dialects.Dialect = (*Dialect)(nil)

// Queries renders every statement for names.
func Queries(names dialects.Names) (*Catalog, error) {
	c := &Catalog{}
	if err := dialects.Catalog(names, Quoting, queryFS, "queries.sql", c); err != nil {
		return nil, err
	}
	return c, nil
}

// Open renders every statement and opens a connection pool.
func Open(_ context.Context, opts Options) (*Dialect, error) {
	q, err := Queries(opts.Names)
	if err != nil {
		return nil, err
	}
	cfg, err := msdsn.Parse(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("database.url is not a valid SQL Server URL (sqlserver://user:password@host:1433?database=app): %w", err)
	}
	// The sessions are named after QueueBox unless the URL names them
	// ("app name"): operators see whose they are, and OtherRelays counts
	// the other relays by it.
	if cfg.AppName == "go-mssqldb" {
		cfg.AppName = cmp.Or(opts.ApplicationName, dialects.RelayApplicationName)
	}
	db := sql.OpenDB(mssql.NewConnectorConfig(cfg))
	if opts.MaxConnections > 0 {
		db.SetMaxOpenConns(opts.MaxConnections)
		db.SetMaxIdleConns(opts.MaxConnections)
	}
	d := &Dialect{db: db, names: opts.Names, q: q}
	d.DestinationTables = d.destinationTables()
	d.AttemptTables = dialects.AttemptTables{Conn: conn{e: d.db}, Statements: &d.q.AttemptStatements,
		Age: func(t time.Duration) any { return dateaddArg(int64(t / time.Second)) }}
	return d, nil
}

// DB exposes the pool to tests in this module.
func (d *Dialect) DB() *sql.DB { return d.db }

func (d *Dialect) Name() string                   { return "sqlserver" }
func (d *Dialect) Names() dialects.Names          { return d.names }
func (d *Dialect) Quoting() dialects.Quoting      { return Quoting }
func (d *Dialect) Close()                         { _ = d.db.Close() }
func (d *Dialect) Ping(ctx context.Context) error { return MapError(d.db.PingContext(ctx)) }

// MapError maps native errors that a user can act on to the seam's own:
// "Invalid object name" (error 208) to dialects.ErrNoTable, a refused
// login (18456, 4060) to dialects.ErrLoginRefused, a connection that could
// not be opened to dialects.ErrUnreachable.
func MapError(err error) error {
	if err == nil {
		return nil
	}
	var me mssql.Error
	if errors.As(err, &me) {
		switch me.Number {
		case 208: // Invalid object name
			return fmt.Errorf("%w (%s)", dialects.ErrNoTable, me.Message)
		case 297, 300: // The user does not have permission / VIEW SERVER STATE permission was denied
			return fmt.Errorf("%w (%s)", dialects.ErrNotPermitted, me.Message)
		case 18456, 4060: // Login failed / Cannot open database requested by the login
			return dialects.LoginRefused(fmt.Sprintf("%s (error %d)", me.Message, me.Number))
		}
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("%w: %v", dialects.ErrUnreachable, err)
	}
	return err
}

// dateaddArg fits a number for DATEADD, which refuses BIGINT (what the driver
// sends for an int64): an int32, capped.
func dateaddArg(n int64) int32 {
	return int32(min(max(n, -1<<31+1), 1<<31-1))
}

func jsonArg(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// claimArgs are OutboxClaim's parameters.
type claimArgs struct {
	Limit        int    `param:"limit"`
	LeaseMS      int32  `param:"lease_ms"`
	Token        string `param:"token"`
	MaxHeads     int    `param:"max_heads"`
	Settled      any    `param:"settled"`
	ContinueKeys string `param:"continue_keys"`
	Walk         int    `param:"walk"`
	After        string `param:"after"`
}

// ClaimArgs are the arguments of the claim that p describes (exported for
// the rendered-SQL tests). The claim ignores p.Bounds and the positions of
// p.Continue (see the package doc): it takes a continued key's first
// pending or processing row as its head.
func (d *Dialect) ClaimArgs(p dialects.ClaimParams) []any {
	a := claimArgs{Limit: p.Limit, LeaseMS: dateaddArg(p.Lease.Milliseconds()), Token: p.Token.String(), MaxHeads: p.Heads(),
		Walk: int(p.Walk)}
	if p.Gate != nil {
		a.Settled = p.Gate.Settled
	}
	keys := make([]string, len(p.Continue))
	for i, c := range p.Continue {
		keys[i] = c.Key
	}
	a.ContinueKeys = jsonArg(keys)
	if p.Walk == dialects.WalkKeys {
		a.After = p.After
	}
	return d.q.OutboxClaim.Args(a)
}

// OutboxClaim claims in one batch (see the claim in queries.sql). Its
// report (Claimed.Walk) stays zero: it keeps no bounds, so no walk of its
// leaves a row behind.
func (d *Dialect) OutboxClaim(ctx context.Context, p dialects.ClaimParams) (_ dialects.Claimed, err error) {
	defer func() { err = MapError(err) }()
	if p.Limit <= 0 {
		return dialects.Claimed{}, nil
	}
	if p.Walk > dialects.WalkNone {
		return dialects.Claimed{}, fmt.Errorf("claim: unknown walk %d", p.Walk)
	}
	var c dialects.Claimed
	if p.Settle != nil {
		// The probe first, in a statement of its own: the claim's batch
		// runs in a transaction of its own, and SQL Server's reads of the
		// transaction views need no snapshot of the claim's.
		probe, err := d.OutboxProbe(ctx)
		if err != nil {
			return dialects.Claimed{}, err
		}
		c.Probe = &probe
		p.Gate = p.Settle(probe)
	}
	rows, err := d.db.QueryContext(ctx, d.q.OutboxClaim.SQL(), d.ClaimArgs(p)...)
	if err != nil {
		return dialects.Claimed{}, err
	}
	defer rows.Close()
	for rows.Next() {
		var r dialects.Row
		var id, payload, headers string
		var cursor sql.NullString
		if err := rows.Scan(&id, &r.Topic, &r.Key, &payload, &headers, &r.AggregateType,
			&r.Attempt, &r.MaxAttempts, &r.Sequence, &r.CreatedAt, &cursor); err != nil {
			return dialects.Claimed{}, err
		}
		if r.ID, err = uuid.Parse(id); err != nil {
			return dialects.Claimed{}, err
		}
		r.Payload, r.Headers, r.Token = []byte(payload), []byte(headers), p.Token
		r.CreatedAt = r.CreatedAt.UTC()
		c.Rows = append(c.Rows, r)
		c.Cursor = cursor.String
	}
	if err := rows.Err(); err != nil {
		return dialects.Claimed{}, err
	}
	dialects.SortClaimed(c.Rows)
	if p.Lanes {
		c.Blocked, err = d.blockedLanes(ctx, c.Rows)
	}
	return c, err
}

// blockedLanes reads the lanes of the keys of rows that have a pending or
// processing copy, in a statement of its own after the claim's batch:
// read later, it finds no lane that the claim's own snapshot would not
// (a copy of one of the keys is written only by the completion of an
// earlier row of the key, which had ended when the claim took the row).
func (d *Dialect) blockedLanes(ctx context.Context, rows []dialects.Row) ([]dialects.Lane, error) {
	keys := KeysOf(rows)
	if len(keys) == 0 {
		return nil, nil
	}
	res, err := d.db.QueryContext(ctx, d.q.FanOutBlockedLanes, jsonArg(keys))
	if err != nil {
		return nil, err
	}
	defer res.Close()
	var out []dialects.Lane
	for res.Next() {
		var l dialects.Lane
		if err := res.Scan(&l.Destination, &l.Key); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, res.Err()
}

// KeysOf lists the keys of the keyed rows, each once, in the rows' order
// (sorted rows: key order); exported for the rendered-SQL tests.
func KeysOf(rows []dialects.Row) []string {
	var keys []string
	for _, r := range rows {
		if r.Keyed() && (len(keys) == 0 || keys[len(keys)-1] != r.Key) {
			keys = append(keys, r.Key)
		}
	}
	return keys
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

func (d *Dialect) OutboxRenewLeases(ctx context.Context, claims []dialects.Claim, lease time.Duration) (_ []dialects.Claim, err error) {
	defer func() { err = MapError(err) }()
	if len(claims) == 0 {
		return nil, nil
	}
	held, err := d.queryIDs(ctx, d.q.OutboxRenewLeases, jsonArg(renewArgs(claims)), dateaddArg(lease.Milliseconds()))
	if err != nil {
		return nil, err
	}
	return dialects.LostClaims(claims, held), nil
}

// renewArgs are the held claims as OutboxRenewLeases reads them.
func renewArgs(claims []dialects.Claim) []renewArg {
	out := make([]renewArg, len(claims))
	for i, c := range claims {
		out[i] = renewArg{I: c.ID, T: c.Token}
	}
	return out
}

type renewArg struct {
	I uuid.UUID `json:"i"`
	T uuid.UUID `json:"t"`
}

type completeArg struct {
	I uuid.UUID `json:"i"`
	T uuid.UUID `json:"t"`
	S string    `json:"s"`
	A int       `json:"a"`
	D *int64    `json:"d"`
	W int       `json:"w"`
	E string    `json:"e"`
	// The attempt, when the outcome carries one (OutboxCompleteAttempts).
	attemptArg
}

// attemptArg is an attempt as the statements that record attempts read
// it from JSON.
type attemptArg struct {
	At *string `json:"at,omitempty"`
	US int64   `json:"us,omitempty"`
	N  int     `json:"n,omitempty"`
	K  string  `json:"k,omitempty"`
	DS string  `json:"ds,omitempty"`
	ST string  `json:"st,omitempty"`
	ER string  `json:"er,omitempty"`
	RS string  `json:"rs,omitempty"`
	P  int     `json:"p,omitempty"`
	U  int     `json:"u,omitempty"`
}

// attemptArgOf is attempt t, recorded as outcome.
func attemptArgOf(t *dialects.Attempt, outcome string) attemptArg {
	at := t.At.UTC().Format("2006-01-02T15:04:05.9999999")
	a := attemptArg{At: &at, US: t.Duration.Microseconds(), N: t.Try, K: outcome, DS: t.Destination, ST: t.Status, ER: t.Error, RS: t.Response}
	if t.Probe {
		a.P = 1
	}
	if t.Uncounted {
		a.U = 1
	}
	return a
}

// HasAttempts reports whether any outcome carries an attempt for the
// history: OutboxComplete then runs OutboxCompleteAttempts.
func HasAttempts(outcomes []dialects.Outcome) bool {
	for i := range outcomes {
		if outcomes[i].Attempt != nil {
			return true
		}
	}
	return false
}

// CompleteArg renders the JSON parameter of OutboxComplete (exported for the
// rendered-SQL tests), with each outcome's attempt.
func CompleteArg(outcomes []dialects.Outcome) string { return jsonArg(completeArgs(outcomes, true)) }

// completeArgs are the outcomes as the completions read them, with their
// attempt when withAttempt is set.
func completeArgs(outcomes []dialects.Outcome, withAttempt bool) []completeArg {
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
		if t := o.Attempt; t != nil && withAttempt {
			a.attemptArg = attemptArgOf(t, dialects.RecordedOutcome(o.Kind))
		}
		args[i] = a
	}
	return args
}

func (d *Dialect) OutboxComplete(ctx context.Context, outcomes []dialects.Outcome) (_ []dialects.Claim, err error) {
	defer func() { err = MapError(err) }()
	if len(outcomes) == 0 {
		return nil, nil
	}
	var held map[uuid.UUID]struct{}
	switch {
	case dialects.FanOut(outcomes):
		attempts, copies := FanOutArgs(outcomes)
		held, err = d.queryIDs(ctx, d.q.FanOutComplete, jsonArg(completeArgs(outcomes, false)), attempts, copies)
	case HasAttempts(outcomes):
		held, err = d.queryIDs(ctx, d.q.OutboxCompleteAttempts, CompleteArg(outcomes))
	default:
		held, err = d.queryIDs(ctx, d.q.OutboxComplete, CompleteArg(outcomes))
	}
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

// OutboxReleaseExpired looks from the start whatever from says: SQL
// Server's claims keep no bounds, and it reports no oldest row.
func (d *Dialect) OutboxReleaseExpired(ctx context.Context, limit int, keep []uuid.UUID, _ time.Time) (_ dialects.Released, err error) {
	defer func() { err = MapError(err) }()
	if keep == nil {
		keep = []uuid.UUID{}
	}
	n, err := d.scalarInt(ctx, d.q.OutboxReleaseExpired, limit, jsonArg(keep))
	return dialects.Released{Rows: n}, err
}

// filterArgs are the parameters of the fragment Filter, which the
// operator statements share.
type filterArgs struct {
	States    string `param:"states"`
	IDs       any    `param:"ids"`
	Key       any    `param:"key"`
	Since     any    `param:"since"`
	Until     any    `param:"until"`
	ErrorText any    `param:"error_text"`
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
	AfterUpdatedAt any `param:"after_updated_at"`
	AfterSequence  any `param:"after_sequence"`
	Limit          int `param:"limit"`
}

// filter binds an operator filter; NULL stands for what it leaves open.
func filter(f dialects.Filter) filterArgs {
	a := filterArgs{States: jsonArg(f.States)}
	if len(f.IDs) > 0 {
		a.IDs = jsonArg(f.IDs)
	}
	if f.ErrorContains != "" {
		a.ErrorText = f.ErrorContains
	}
	if f.Key != nil {
		a.Key = *f.Key
	}
	if f.Since != nil {
		a.Since = f.Since.UTC()
	}
	if f.Until != nil {
		a.Until = f.Until.UTC()
	}
	return a
}

func (d *Dialect) OutboxSelect(ctx context.Context, p dialects.SelectParams) (_ []dialects.Selected, err error) {
	defer func() { err = MapError(err) }()
	rows, err := d.db.QueryContext(ctx, d.q.OutboxSelect.SQL(), d.q.OutboxSelect.Args(selectArgs{filter(p.Filter), p.AfterSequence, p.Limit})...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dialects.Selected
	for rows.Next() {
		var s dialects.Selected
		var id string
		if err := rows.Scan(&id, &s.Topic, &s.Sequence); err != nil {
			return nil, err
		}
		if s.ID, err = uuid.Parse(id); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func (d *Dialect) OutboxRowsOf(ctx context.Context, ids []uuid.UUID) (_ []dialects.Row, err error) {
	defer func() { err = MapError(err) }()
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := d.db.QueryContext(ctx, d.q.OutboxRowsOf, jsonArg(ids))
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
		r.Payload, r.Headers, r.CreatedAt = []byte(payload), []byte(headers), r.CreatedAt.UTC()
		out = append(out, r)
	}
	return out, rows.Err()
}

func (d *Dialect) OutboxReplayIDs(ctx context.Context, ids []uuid.UUID, states []dialects.State, by string) (_ int, err error) {
	defer func() { err = MapError(err) }()
	return d.scalarInt(ctx, d.q.OutboxReplayIDs, jsonArg(ids), jsonArg(states), dialects.ReplayMark(by))
}

func (d *Dialect) OutboxList(ctx context.Context, p dialects.ListParams) (_ []dialects.ListedRow, err error) {
	defer func() { err = MapError(err) }()
	a := listArgs{filterArgs: filter(p.Filter), Limit: p.Limit}
	if p.After != nil {
		a.AfterUpdatedAt, a.AfterSequence = p.After.UpdatedAt.UTC(), p.After.Sequence
	}
	rows, err := d.db.QueryContext(ctx, d.q.OutboxList.SQL(), d.q.OutboxList.Args(a)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dialects.ListedRow
	for rows.Next() {
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
		out = append(out, r)
	}
	return out, rows.Err()
}

// PurgeStatementRows is the most rows one retention DELETE removes. SQL
// Server escalates a statement's row locks to a lock on the whole table once
// it holds about 5,000 on one table or index, and a table lock on the
// outbox would stall every claim until the delete commits. A batch of
// outbox.retention.batchSize rows (5,000 by default) is therefore deleted in
// several statements, each committed on its own.
const PurgeStatementRows = 1000

func (d *Dialect) OutboxPurge(ctx context.Context, p dialects.PurgeParams) (_ int, err error) {
	defer func() { err = MapError(err) }()
	total := 0
	for total < p.Batch {
		chunk := min(PurgeStatementRows, p.Batch-total)
		n, err := d.scalarInt(ctx, d.q.OutboxPurge, string(p.State), dateaddArg(int64(p.OlderThan/time.Second)), chunk)
		total += n
		if err != nil || n < chunk {
			return total, err
		}
	}
	return total, nil
}

func (d *Dialect) OutboxPurgeWait(ctx context.Context, state dialects.State, olderThan time.Duration) (_ time.Duration, err error) {
	defer func() { err = MapError(err) }()
	var wait int64
	err = d.db.QueryRowContext(ctx, d.q.OutboxPurgeWait, string(state), dateaddArg(int64(olderThan/time.Second))).Scan(&wait)
	return time.Duration(wait) * time.Millisecond, err
}

func (d *Dialect) OutboxStats(ctx context.Context) (_ dialects.Stats, err error) {
	defer func() { err = MapError(err) }()
	return dialects.StatsFrom(
		func(each func(string, int64)) error { return d.eachCount(ctx, d.q.OutboxCountByState, each) },
		func(each func(string, int64)) error { return d.eachCount(ctx, d.q.OutboxDeadByTopic, each) },
		func() (dialects.PendingSummary, error) { return d.OutboxPending(ctx) })
}

func (d *Dialect) OutboxPending(ctx context.Context) (p dialects.PendingSummary, err error) {
	defer func() { err = MapError(err) }()
	var millis int64
	err = d.db.QueryRowContext(ctx, d.q.OutboxPendingDue).Scan(&millis, &p.ScheduledLater)
	p.OldestDue = time.Duration(millis) * time.Millisecond
	return p, err
}

func (d *Dialect) OutboxCountByTopic(ctx context.Context) (_ []dialects.TopicCount, err error) {
	defer func() { err = MapError(err) }()
	rows, err := d.db.QueryContext(ctx, d.q.OutboxCountByTopicState)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dialects.TopicCount
	for rows.Next() {
		var c dialects.TopicCount
		var state string
		if err := rows.Scan(&c.Topic, &state, &c.Rows); err != nil {
			return nil, err
		}
		c.State = dialects.State(state)
		out = append(out, c)
	}
	return out, rows.Err()
}

func (d *Dialect) OutboxBlockedKeys(ctx context.Context, p dialects.BlockedKeysParams) (_ []dialects.BlockedKey, err error) {
	defer func() { err = MapError(err) }()
	rows, err := d.db.QueryContext(ctx, d.q.OutboxBlockedKeys, p.Scan, p.Limit, dialects.BehindCap)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dialects.BlockedKey
	for rows.Next() {
		var k dialects.BlockedKey
		var id string
		var waiting, next int64
		if err := rows.Scan(&k.Key, &id, &k.Topic, &k.Attempt, &k.MaxAttempts, &k.LastError, &waiting, &next, &k.Behind); err != nil {
			return nil, err
		}
		if k.ID, err = uuid.Parse(id); err != nil {
			return nil, err
		}
		k.Waiting, k.NextAttemptIn = time.Duration(waiting)*time.Millisecond, time.Duration(next)*time.Millisecond
		out = append(out, k)
	}
	return out, rows.Err()
}

func (d *Dialect) OutboxDeadGroups(ctx context.Context, newest int) (_ []dialects.DeadGroup, err error) {
	defer func() { err = MapError(err) }()
	rows, err := d.db.QueryContext(ctx, d.q.OutboxDeadGroups, newest, dialects.DeadErrorPrefix)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dialects.DeadGroup
	for rows.Next() {
		var g dialects.DeadGroup
		var ids string
		if err := rows.Scan(&g.Topic, &g.Error, &g.Rows, &g.Newest, &ids); err != nil {
			return nil, err
		}
		for _, s := range strings.Split(ids, ",") {
			id, err := uuid.Parse(s)
			if err != nil {
				return nil, err
			}
			g.IDs = append(g.IDs, id)
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// eachCount runs a query of (name, count) rows.
func (d *Dialect) eachCount(ctx context.Context, query string, f func(string, int64)) error {
	rows, err := d.db.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	return dialects.EachCount(rows, f)
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

func (d *Dialect) OutboxInsert(ctx context.Context, in []dialects.NewRow) (err error) {
	defer func() { err = MapError(err) }()
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
	_, err = d.db.ExecContext(ctx, d.q.OutboxInsert, jsonArg(args))
	return err
}

// OutboxProbe reads the sequence and the transaction views in one batch,
// then when the next row scheduled later comes due.
func (d *Dialect) OutboxProbe(ctx context.Context) (dialects.Probe, error) {
	p, err := d.probe(ctx, d.q.OutboxProbe)
	if err != nil {
		return p, err
	}
	p.NextDue, p.Later, err = d.OutboxNextDue(ctx)
	return p, err
}

// probe runs a probe statement: the sequence, then the transaction views.
func (d *Dialect) probe(ctx context.Context, query string) (p dialects.Probe, err error) {
	defer func() { err = MapError(err) }()
	var writer sql.NullInt64
	if err = d.db.QueryRowContext(ctx, query).Scan(&p.Last, &p.Xmin, &p.Next, &writer); err != nil {
		return p, err
	}
	p.Writer = dialects.NoWriters
	if writer.Valid {
		p.Writer = writer.Int64
	}
	return p, nil
}

// OutboxHorizon reads the oldest open transaction of another session.
func (d *Dialect) OutboxHorizon(ctx context.Context) (h dialects.Horizon, err error) {
	defer func() { err = MapError(err) }()
	h.DeadVersions = -1
	var hh dialects.HorizonHolder
	var since, queryStart sql.NullTime
	err = d.db.QueryRowContext(ctx, d.q.OutboxHorizon).Scan(&hh.Kind, &hh.PID, &since, &queryStart, &hh.State, &hh.Name, &hh.Query, &hh.Transactions, &h.DeadVersions)
	if errors.Is(err, sql.ErrNoRows) {
		return h, nil
	}
	if err != nil {
		return h, err
	}
	hh.Since, hh.QueryStart = since.Time, queryStart.Time
	h.Holder = &hh
	return h, nil
}

// OutboxNextDue says how long until the earliest row scheduled later comes
// due.
func (d *Dialect) OutboxNextDue(ctx context.Context) (time.Duration, bool, error) {
	var in sql.NullInt64
	if err := d.db.QueryRowContext(ctx, d.q.OutboxNextDue).Scan(&in); err != nil || !in.Valid {
		return 0, false, MapError(err)
	}
	return time.Duration(in.Int64) * time.Millisecond, true, nil
}

// OutboxStragglers finds none, without a statement: the claims ignore the
// relay's bounds (see the package doc), so no row is ever left behind one.
func (d *Dialect) OutboxStragglers(context.Context, *dialects.Gate, dialects.Bounds) (time.Duration, bool, error) {
	return 0, false, nil
}

// OutboxRewind does nothing: the claims ignore the relay's bounds, so a row
// that goes back to pending has nothing to set aside, and the dialect keeps
// no rewind counter (Probe.Rewinds stays 0).
func (d *Dialect) OutboxRewind(context.Context) error { return nil }

// OutboxFloors returns none (Groups nil) at the counter the dialect does
// not keep (0), without a statement: the claims ignore floors (see the
// package doc), and a read of every pending and processing row would buy
// nothing.
func (d *Dialect) OutboxFloors(context.Context, int64, dialects.Floors) (dialects.Floors, error) {
	return dialects.Floors{}, nil
}

func (d *Dialect) OutboxWriters(ctx context.Context) ([]dialects.Writer, error) {
	return d.writers(ctx, d.q.OutboxWriters)
}

// writers lists the open transactions that a writers statement finds.
func (d *Dialect) writers(ctx context.Context, query string) (_ []dialects.Writer, err error) {
	defer func() { err = MapError(err) }()
	rows, err := d.db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dialects.Writer
	for rows.Next() {
		var w dialects.Writer
		var since *time.Time
		if err := rows.Scan(&w.PID, &w.Xid, &since, &w.State, &w.Application, &w.Query); err != nil {
			return nil, err
		}
		if since != nil {
			w.Since = *since
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// OtherRelays counts the sessions of other relays on the server: those
// with this pool's program name that another client process opened. A
// login without VIEW SERVER STATE sees only its own sessions: none.
func (d *Dialect) OtherRelays(ctx context.Context) (n int, err error) {
	defer func() { err = MapError(err) }()
	err = d.db.QueryRowContext(ctx, d.q.OtherRelays, os.Getpid()).Scan(&n)
	return n, err
}

func (d *Dialect) MigrationHistory(ctx context.Context) ([]dialects.AppliedMigration, error) {
	return dialects.ReadHistory(ctx, conn{e: d.db, begin: d.db.BeginTx}, d.q.HistoryList)
}

// MigrationSession takes an exclusive session-owned application lock
// (sp_getapplock) on a connection of its own.
func (d *Dialect) MigrationSession(ctx context.Context) (dialects.MigrationSession, error) {
	c, err := d.db.Conn(ctx)
	if err != nil {
		return nil, MapError(err)
	}
	return dialects.OpenMigrationSession(ctx, conn{e: c, begin: c.BeginTx, release: c.Close}, d.q.HistoryStatements, d.names)
}

// execer is what *sql.DB, *sql.Conn and *sql.Tx share.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// conn adapts the pool, one held connection or a transaction to
// dialects.Conn. A transaction has no begin: SQL Server has no nested ones.
type conn struct {
	e       execer
	begin   func(context.Context, *sql.TxOptions) (*sql.Tx, error)
	release func() error
}

func (c conn) Exec(ctx context.Context, q string, args ...any) error {
	_, err := c.e.ExecContext(ctx, q, args...)
	return MapError(err)
}

func (c conn) Query(ctx context.Context, q string, args []any, each func(dialects.Scanner) error) error {
	rows, err := c.e.QueryContext(ctx, q, args...)
	if err != nil {
		return MapError(err)
	}
	defer rows.Close()
	return MapError(dialects.EachRow(rows, each))
}

func (c conn) Tx(ctx context.Context, fn func(dialects.Conn) error) error {
	if c.begin == nil {
		return errors.New("nested transactions are not supported")
	}
	tx, err := c.begin(ctx, nil)
	if err != nil {
		return MapError(err)
	}
	return MapError(dialects.RunTx(ctx, txConn{conn{e: tx}, tx}, fn))
}

// txConn is a transaction as dialects.Tx.
type txConn struct {
	conn
	tx *sql.Tx
}

func (t txConn) Commit(context.Context) error   { return t.tx.Commit() }
func (t txConn) Rollback(context.Context) error { return t.tx.Rollback() }

func (c conn) Release() {
	if c.release != nil {
		_ = c.release()
	}
}
