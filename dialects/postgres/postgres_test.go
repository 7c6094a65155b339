package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/dialecttest"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/migrations"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func open(t testing.TB, upTo int) *postgres.Dialect {
	t.Helper()
	schema, url := testdb.Schema(t)
	d := openAt(t, url, schema)
	if upTo == 0 {
		upTo = 1 << 30
	}
	if _, err := migrations.UpTo(context.Background(), d, upTo); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return d
}

func openAt(t testing.TB, url, schema string) *postgres.Dialect {
	t.Helper()
	names := dialects.DefaultNames()
	names.Schema = schema
	d, err := postgres.Open(context.Background(), postgres.Options{URL: url, Names: names, MaxConnections: 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	// Wake-ups: a registry of its own, as a process of its own has, in a
	// group of the schema's: the dialects of other tests never share its
	// stream, and those of this schema do as separate relays would.
	d.UseWakeupRegistry(postgres.NewWakeupRegistry(schema))
	return d
}

// freePort returns a loopback port where nothing listens.
func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func exec(t *testing.T, d dialects.Dialect, sql string, args ...any) {
	t.Helper()
	pd := pgDialect(d)
	q, err := dialects.Render("exec", sql, dialects.TemplateFuncs(pd.Names(), postgres.Quoting))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.Pool().Exec(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func TestConformance(t *testing.T) {
	dialecttest.Run(t, harness(func(d *postgres.Dialect) dialects.Dialect { return d }))
}

// The conformance suite's claim cases hold for a dialect that ignores the
// relay's bounds as well (SQL Server's claims do, and no SQL Server runs
// here): run against PostgreSQL with its bounds taken away.
func TestConformanceIgnoringBounds(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite a second time")
	}
	dialecttest.Run(t, harness(func(d *postgres.Dialect) dialects.Dialect { return boundless{d} }))
}

// boundless is the PostgreSQL dialect as a dialect that ignores the relay's
// bounds behaves (see the sqlserver package): its claims walk from the
// start, it finds no straggler, reads no floors and keeps no rewind counter,
// and its look for expired leases ignores its bound.
type boundless struct{ *postgres.Dialect }

func (b boundless) OutboxClaim(ctx context.Context, p dialects.ClaimParams) (dialects.Claimed, error) {
	p.Bounds = nil
	c, err := b.Dialect.OutboxClaim(ctx, p)
	c.Walk = dialects.ClaimReport{}
	return c, err
}

func (b boundless) OutboxStragglers(context.Context, *dialects.Gate, dialects.Bounds) (time.Duration, bool, error) {
	return 0, false, nil
}

func (b boundless) OutboxFloors(context.Context, int64, dialects.Floors) (dialects.Floors, error) {
	return dialects.Floors{}, nil
}

func (b boundless) OutboxRewind(context.Context) error { return nil }

func (b boundless) OutboxProbe(ctx context.Context) (dialects.Probe, error) {
	p, err := b.Dialect.OutboxProbe(ctx)
	p.Rewinds = 0
	return p, err
}

func (b boundless) OutboxReleaseExpired(ctx context.Context, limit int, keep []uuid.UUID, _ time.Time) (dialects.Released, error) {
	r, err := b.Dialect.OutboxReleaseExpired(ctx, limit, keep, time.Time{})
	return dialects.Released{Rows: r.Rows}, err
}

// pgDialect is the PostgreSQL dialect under d.
func pgDialect(d dialects.Dialect) *postgres.Dialect {
	if b, ok := d.(boundless); ok {
		return b.Dialect
	}
	return d.(*postgres.Dialect)
}

// harness is the conformance suite's harness, each dialect it opens
// wrapped by wrap.
func harness(wrap func(*postgres.Dialect) dialects.Dialect) dialecttest.Harness {
	return dialecttest.Harness{
		New:  func(t *testing.T, upTo int) dialects.Dialect { return wrap(open(t, upTo)) },
		Exec: exec,
		Empty: func(t *testing.T) dialects.Dialect {
			schema, url := testdb.Schema(t)
			return openAt(t, url, schema)
		},
		Unreachable: func(t *testing.T) dialects.Dialect {
			return openAt(t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?connect_timeout=5", freePort(t)), "")
		},
		Named: func(t *testing.T, app string) dialects.Dialect {
			schema, url := testdb.Schema(t)
			d := openAt(t, testdb.WithParam(url, "application_name", app), schema)
			if _, err := migrations.Up(context.Background(), d); err != nil {
				t.Fatal(err)
			}
			return wrap(d)
		},
		BackdateUpdated: `UPDATE {{t}} SET {{c "updated_at"}} = now() - $2::int * interval '1 hour' WHERE {{c "state"}} = $1`,
		Begin:           begin,
		RefusedLogin: func(t *testing.T) error {
			// A database that does not exist: the server answers, then
			// refuses.
			_, dbURL := testdb.Schema(t)
			u, err := url.Parse(dbURL)
			if err != nil {
				t.Fatal(err)
			}
			u.Path = "/qb_no_such_database"
			d, err := postgres.Open(context.Background(), postgres.Options{URL: u.String(), Names: dialects.DefaultNames()})
			if err != nil {
				return err
			}
			defer d.Close()
			return d.Ping(context.Background())
		},
		RefusedBecause: `database "qb_no_such_database" does not exist`,
	}
}

// heldTx is a transaction a conformance subtest holds open.
type heldTx struct {
	d   *postgres.Dialect
	tx  pgx.Tx
	pid int64
}

func begin(t *testing.T, d dialects.Dialect) dialecttest.Tx {
	pd := pgDialect(d)
	tx, err := pd.Pool().Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h := &heldTx{d: pd, tx: tx}
	if err := tx.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&h.pid); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *heldTx) Exec(sql string, args ...any) error {
	q, err := dialects.Render("exec", sql, dialects.TemplateFuncs(h.d.Names(), postgres.Quoting))
	if err != nil {
		return err
	}
	_, err = h.tx.Exec(context.Background(), q, args...)
	return err
}

func (h *heldTx) Session() int64 { return h.pid }
func (h *heldTx) Commit() error  { return h.tx.Commit(context.Background()) }
func (h *heldTx) Rollback()      { _ = h.tx.Rollback(context.Background()) }

// The statement trigger gives an inserting transaction its id before any
// row draws a sequence value: a test trigger that fires after it sees the
// id assigned and the sequence not yet drawn in this session. Without it,
// the id would come after the value, and a gate could settle a value whose
// transaction was not yet visible as running.
func TestTransactionIDComesBeforeTheSequenceValue(t *testing.T) {
	t.Parallel()
	idBeforeSequence(t, "outbox", `(topic, key, payload) VALUES ('t', 'k', '{}')`)
}

// idBeforeSequence checks the statement trigger of table: an INSERT of
// values, on a fresh connection, has its transaction id assigned and no
// value of table's sequence drawn when a later statement trigger fires.
func idBeforeSequence(t *testing.T, table, values string) {
	t.Helper()
	d := open(t, 0)
	ctx := context.Background()
	schema := d.Names().Schema
	tbl := pgx.Identifier{schema, table}.Sanitize()
	fn := pgx.Identifier{schema, "zz_check"}.Sanitize()
	seq := pgx.Identifier{schema, table + "_sequence_seq"}.Sanitize()
	if _, err := d.Pool().Exec(ctx, `CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE drawn boolean := true;
		BEGIN
			BEGIN
				PERFORM currval('`+seq+`');
			EXCEPTION WHEN object_not_in_prerequisite_state THEN drawn := false;
			END;
			RAISE EXCEPTION 'xid=% drawn=%', pg_current_xact_id_if_assigned() IS NOT NULL, drawn;
		END $$;
		CREATE TRIGGER zz_check BEFORE INSERT ON `+tbl+` FOR EACH STATEMENT EXECUTE FUNCTION `+fn+`()`); err != nil {
		t.Fatal(err)
	}
	// A fresh connection: no sequence value drawn in the session yet.
	conn, err := pgx.Connect(ctx, d.Pool().Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `INSERT INTO `+tbl+` `+values)
	if err == nil || !strings.Contains(err.Error(), "xid=t drawn=f") {
		t.Fatalf("at statement start: %v; want the transaction id assigned and no sequence value drawn", err)
	}
}

// One transaction inserting 100,000 rows with distinct keys succeeds: what
// QueueBox installs takes no lock per key.
func TestBulkInsertDistinctKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("bulk insert of 100,000 rows")
	}
	t.Parallel()
	d := open(t, 0)
	ctx := context.Background()
	tbl := pgx.Identifier{d.Names().Schema, "outbox"}.Sanitize()
	tag, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload)
		SELECT 'bulk', 'key-' || g, jsonb_build_object('n', g) FROM generate_series(1, 100000) AS g`)
	if err != nil {
		t.Fatalf("a 100,000-row insert with distinct keys failed: %v", err)
	}
	if tag.RowsAffected() != 100000 {
		t.Fatalf("inserted %d", tag.RowsAffected())
	}
}

// The claims keep their index plans on a large table with the generic plans
// QueueBox runs them with (the claim pool forces generic plans).
func TestClaimPlanUsesIndexes(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	ctx := context.Background()
	tbl := pgx.Identifier{d.Names().Schema, "outbox"}.Sanitize()
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload, state)
		SELECT 'x', CASE WHEN g % 2 = 0 THEN 'k' || (g % 1000) END, '{}', CASE WHEN g % 10 = 0 THEN 'pending' ELSE 'delivered' END
		  FROM generate_series(1, 50000) AS g`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `ANALYZE `+tbl); err != nil {
		t.Fatal(err)
	}
	conn := claimSession(t, d)
	for _, name := range []string{"claim", "claim_by_key"} {
		rows, err := conn.Query(ctx, `EXPLAIN EXECUTE `+call(t, name, claimArgs(sqlArgs{"settled": "0", "open_last": "ARRAY[10]::bigint[]", "open_next": "ARRAY[5]::bigint[]"})))
		if err != nil {
			t.Fatal(err)
		}
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, "idx_outbox_key_sequence") || (name == "claim" && !strings.Contains(text, "idx_outbox_pending_scheduled")) {
			t.Fatalf("the generic plan of %s does not use the claim indexes:\n%s", name, text)
		}
		if regexp.MustCompile(`Seq Scan on outbox(\s|$)`).MatchString(text) {
			t.Fatalf("the generic plan of %s scans the whole table:\n%s", name, text)
		}
	}
}

// openWithRows opens a dialect on a schema of its own and inserts the
// outbox rows (topic, key, payload) that query selects; it returns the
// dialect and the outbox's quoted name.
func openWithRows(t *testing.T, query string) (*postgres.Dialect, string) {
	t.Helper()
	d := open(t, 0)
	tbl := pgx.Identifier{d.Names().Schema, "outbox"}.Sanitize()
	if _, err := d.Pool().Exec(context.Background(), `INSERT INTO `+tbl+` (topic, key, payload) `+query); err != nil {
		t.Fatal(err)
	}
	return d, tbl
}

// ExplainClaim shows the plan of the claim the relay would send, run for
// real, and claims nothing: the rows are still pending afterwards, with no
// token.
func TestExplainClaimShowsThePlanAndClaimsNothing(t *testing.T) {
	t.Parallel()
	d, tbl := openWithRows(t, `SELECT 'x', 'k' || (g % 10), '{}' FROM generate_series(1, 200) AS g`)
	ctx := context.Background()
	for _, walk := range []dialects.ClaimWalk{dialects.WalkKeys, dialects.WalkSchedule} {
		plan, err := d.ExplainClaim(ctx, dialects.ClaimParams{Limit: 50, Lease: 30 * time.Second, Token: uuid.New(),
			Gate: &dialects.Gate{Settled: 1 << 62}, Walk: walk})
		if err != nil {
			t.Fatalf("walk %s: %v", walk, err)
		}
		if !strings.Contains(plan, "actual time=") || !strings.Contains(plan, "Buffers:") || !strings.Contains(plan, "idx_outbox_key_sequence") {
			t.Fatalf("walk %s: not an analyzed plan of the claim:\n%s", walk, plan)
		}
	}
	var pending, tokened int
	if err := d.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'pending'), count(claim_token) FROM `+tbl).Scan(&pending, &tokened); err != nil {
		t.Fatal(err)
	}
	if pending != 200 || tokened != 0 {
		t.Fatalf("after the explains: %d of 200 rows pending, %d with a claim token; want 200 and 0", pending, tokened)
	}
}

// A claim's report gives the statement's time and the walk's reach when the
// claim took rows; one that took none says so (Empty), so that the relay
// still moves its lookback past what that walk looked at.
func TestAClaimReportsWhetherItTookRows(t *testing.T) {
	t.Parallel()
	d, _ := openWithRows(t, `SELECT 'x', 'k', '{}' FROM generate_series(1, 3)`)
	ctx := context.Background()
	claim := func() ([]dialects.Row, dialects.ClaimReport) {
		c, err := d.OutboxClaim(ctx, dialects.ClaimParams{Limit: 1, Lease: 30 * time.Second, Token: uuid.New(),
			Gate: &dialects.Gate{Settled: 1 << 62}, Bounds: &dialects.Bounds{}})
		if err != nil {
			t.Fatal(err)
		}
		return c.Rows, c.Walk
	}
	rows, rep := claim()
	if len(rows) != 1 || rep.Empty || rep.Now.IsZero() || rep.Earliest.IsZero() {
		t.Fatalf("a claim of the key's head: %d rows, report %+v; want one row, its time and its row's", len(rows), rep)
	}
	// The key's head is processing: the two rows behind it are no heads.
	rows, rep = claim()
	if len(rows) != 0 || !rep.Empty || !rep.Now.IsZero() {
		t.Fatalf("a claim behind a busy head: %d rows, report %+v; want none, and Empty", len(rows), rep)
	}
}

// A look for stragglers over the last seconds starts its walk of the
// pending index at its bound: behind 50,000 pending rows that became due
// long before, it reads a few buffers, not every leaf of the index (a
// statement that locks nothing loses state = 'pending' from the index's
// conditions, and without a condition on the first column a scan starts
// at the first entry).
func TestANarrowLookForStragglersStartsAtItsBound(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	ctx := context.Background()
	tbl := pgx.Identifier{d.Names().Schema, "outbox"}.Sanitize()
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload, scheduled_at)
		SELECT 'x', 'k' || (g % 1000), '{}', now() - interval '2 hours' + g * interval '100 ms'
		  FROM generate_series(1, 50000) AS g`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `ANALYZE `+tbl); err != nil {
		t.Fatal(err)
	}
	q, err := postgres.Queries(d.Names())
	if err != nil {
		t.Fatal(err)
	}
	conn := claimSession(t, d)
	prepare(t, conn, d, "stragglers")
	// Without the bound on the first column each walked every leaf: 193
	// buffers.
	for what, stmt := range map[string]string{
		"a look over the last 10 s": `EXECUTE ` + call(t, "stragglers", sqlArgs{"settled": "NULL", "open_last": "'{}'", "open_next": "'{}'",
			"writers": "NULL", "rewinds": "NULL", "floors": "NULL", "lookback_ms": "0", "within_ms": "10000"}),
		"the look at the next due row": q.OutboxNextDue, // the idle relay's
	} {
		index, buffers := outboxWalk(t, conn, stmt)
		if index != "idx_outbox_pending_scheduled" || buffers > 20 {
			t.Errorf("%s behind 50,000 pending rows already due walked the outbox through %q with %d buffers, want the pending index and a few", what, index, buffers)
		}
	}
}

// outboxWalk runs stmt under EXPLAIN ANALYZE and says which index its
// first scan of the outbox used (the walk; probes of the head rule come
// after it) and how many buffers its scans of the outbox read.
func outboxWalk(t *testing.T, conn *pgxpool.Conn, stmt string) (index string, buffers int) {
	t.Helper()
	var plan []struct {
		Plan planNode `json:"Plan"`
	}
	if err := conn.QueryRow(context.Background(), `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+stmt).Scan(&plan); err != nil || len(plan) != 1 {
		t.Fatalf("explain: %v", err)
	}
	plan[0].Plan.walk(func(n planNode) {
		if n.Relation == "outbox" {
			if index == "" {
				index = n.Index
			}
			buffers += n.SharedHit + n.SharedRead
		}
	})
	return index, buffers
}

// Claims by key take the keys in turns: each goes on after the last key the
// previous one took (its Cursor, handed to the next as After), wrapping
// around, so a key late in the order is not starved by keys before it that
// always have more rows. The dialect keeps no cursor of its own: a claim
// from the start takes the first key again.
func TestClaimsByKeyTakeTurns(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	ctx := context.Background()
	var rows []dialects.NewRow
	for _, k := range []string{"a", "b", "c"} {
		rows = append(rows, testkit.Rows(5, "t", nil, testkit.Key(k))...)
	}
	if err := d.OutboxInsert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	var order []string
	claim := func(after string) dialects.Claimed {
		t.Helper()
		c, err := d.OutboxClaim(ctx, dialects.ClaimParams{Limit: 1, Lease: time.Minute, Token: uuid.New(), Walk: dialects.WalkKeys, After: after})
		if err != nil || len(c.Rows) != 1 || c.Cursor != c.Rows[0].Key {
			t.Fatalf("claim after %q: %+v %v; want one row, and its key as the cursor", after, c, err)
		}
		order = append(order, c.Rows[0].Key)
		if _, err := d.OutboxComplete(ctx, []dialects.Outcome{{Claim: c.Rows[0].Claim, Kind: dialects.OutcomeDelivered}}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	cursor := ""
	for range 6 {
		cursor = claim(cursor).Cursor
	}
	claim("")
	if strings.Join(order, "") != "abcabca" {
		t.Fatalf("keys claimed in the order %v, want them to take turns (a b c a b c), and a claim from the start to take a", order)
	}
}

// A claim session plans its statements once, when they first run: on a new
// deployment that is an empty table. Its statistics then say the table is
// empty, and a plan that is cheapest for an empty table (a hash join or a
// walk of every pending row) would stay in use once a backlog builds, until
// the next ANALYZE: seen draining four times slower than with fresh
// statistics. The claims must keep their per-row index plans whatever the
// statistics said when they were planned.
func TestAClaimPlannedOnAnEmptyTableStaysOnItsIndexes(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	ctx := context.Background()
	tbl := pgx.Identifier{d.Names().Schema, "outbox"}.Sanitize()
	// No autovacuum: an ANALYZE of its own between the insert and the
	// EXPLAIN would make the stale plans fresh.
	if _, err := d.Pool().Exec(ctx, `ALTER TABLE `+tbl+` SET (autovacuum_enabled = off); ANALYZE `+tbl); err != nil {
		t.Fatal(err)
	}
	conn := claimSession(t, d)
	args := claimArgs(sqlArgs{"heads": "10"})
	stmts := []string{"claim", "claim_by_key"}
	for _, name := range stmts {
		// The first run makes the plan, on the empty table.
		if _, err := conn.Exec(ctx, `EXECUTE `+call(t, name, args)); err != nil {
			t.Fatal(err)
		}
	}
	const pending = 20000
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload)
		SELECT 't', 'k' || (g % 100), '{}' FROM generate_series(1, $1::int) AS g`, pending); err != nil {
		t.Fatal(err)
	}
	explain := func(name string) planNode {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		var plan []struct {
			Plan planNode `json:"Plan"`
		}
		if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE `+call(t, name, args)).Scan(&plan); err != nil || len(plan) != 1 {
			t.Fatalf("%s: %v", name, err)
		}
		if plan[0].Plan.ActualRows != 100 {
			t.Errorf("%s claimed %v rows of %d pending over 100 keys; want 100", name, plan[0].Plan.ActualRows, pending)
		}
		return plan[0].Plan
	}
	stale := map[string]planNode{}
	for _, name := range stmts {
		top := explain(name)
		stale[name] = top
		var bad []string
		top.walk(func(n planNode) {
			switch {
			case n.NodeType == "Hash Join" || n.NodeType == "Merge Join" || n.NodeType == "Bitmap Heap Scan" || n.NodeType == "Sort",
				n.NodeType == "Seq Scan" && n.Relation == "outbox":
				bad = append(bad, n.NodeType)
			case n.NodeType == "ModifyTable" && (len(n.Plans) == 0 || n.Plans[len(n.Plans)-1].NodeType != "Tid Scan"):
				bad = append(bad, "an update that does not find its rows by their addresses (Tid Scan)")
			}
		})
		if len(bad) > 0 {
			out, _ := json.MarshalIndent(top, "", " ")
			t.Fatalf("%s, planned on the empty table, runs on %d pending rows with %v:\n%s", name, pending, bad, out)
		}
	}
	// The same statements planned with fresh statistics (ANALYZE makes
	// every session plan them again): the stale plans must cost no more.
	if _, err := d.Pool().Exec(ctx, `ANALYZE `+tbl); err != nil {
		t.Fatal(err)
	}
	for _, name := range stmts {
		fresh := explain(name)
		if old := stale[name]; old.SharedHit > fresh.SharedHit*3/2+50 {
			t.Errorf("%s, planned on the empty table, read %d buffers to claim 100 of %d rows; planned with fresh statistics, %d",
				name, old.SharedHit, pending, fresh.SharedHit)
		}
	}
}

// claimSession is a connection of the claim pool, with its session settings
// (generic plans, the plan types claims never want ruled out), on which
// both claims are prepared as "claim" and "claim_by_key".
func claimSession(t *testing.T, d *postgres.Dialect) *pgxpool.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := d.ClaimPool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	prepare(t, conn, d, "claim")
	prepare(t, conn, d, "claim_by_key")
	return conn
}

// A key's head, found by its key and sequence (the keys a claim continues,
// the keys a claim by key walks), is read from idx_outbox_key_sequence,
// whatever the table looked like when the claim was planned: here no row
// was pending then, and the key index held the entries of 200,000 rows
// claimed and delivered that vacuum had not removed, which made a walk of
// the small pending index with a filter on key and sequence look cheaper
// than a probe of the key index. Once rows pile up, that walk, once per
// key, passes over every pending row and every dead entry that a long
// transaction keeps (seen under a held snapshot: 28 ms per key).
func TestAKeysHeadIsFoundByItsKeyNotByAWalkOfThePending(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	ctx := context.Background()
	tbl := pgx.Identifier{d.Names().Schema, "outbox"}.Sanitize()
	if _, err := d.Pool().Exec(ctx, `ALTER TABLE `+tbl+` SET (autovacuum_enabled = off)`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload, state)
		SELECT 't', 'k' || (g % 1000), '{}', 'processing' FROM generate_series(1, 200000) AS g`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `UPDATE `+tbl+` SET state = 'delivered'; ANALYZE `+tbl); err != nil {
		t.Fatal(err)
	}
	conn := claimSession(t, d)
	var keys, positions []string
	for k := range 50 {
		keys, positions = append(keys, fmt.Sprintf("'k%d'", k)), append(positions, "0")
	}
	// Continuations only: the keys k0..k49 from their start, no walk.
	args := claimArgs(sqlArgs{"rewinds": "0", "lookback_ms": "1000", "continue_keys": `ARRAY[` + strings.Join(keys, ",") + `]::text[]`,
		"continue_after": `ARRAY[` + strings.Join(positions, ",") + `]::bigint[]`, "discover": "false"})
	for _, name := range []string{"claim", "claim_by_key"} {
		// The claim pool's plans are generic, made at the first run: here
		// while few rows are pending.
		if _, err := conn.Exec(ctx, `BEGIN; EXECUTE `+call(t, name, args)+`; ROLLBACK`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload) SELECT 't', 'k' || (g % 50), '{}' FROM generate_series(1, 10000) AS g`); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"claim", "claim_by_key"} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var plan []struct {
			Plan planNode `json:"Plan"`
		}
		err = tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE `+call(t, name, args)).Scan(&plan)
		_ = tx.Rollback(ctx)
		if err != nil || len(plan) != 1 {
			t.Fatalf("%s: %v", name, err)
		}
		top := plan[0].Plan
		if top.ActualRows != 100 {
			t.Errorf("%s claimed %v rows continuing 50 keys of 200 pending rows each; want 100", name, top.ActualRows)
		}
		top.walk(func(n planNode) {
			if n.Index == "idx_outbox_pending_scheduled" && n.Loops > 1 {
				out, _ := json.MarshalIndent(top, "", " ")
				t.Fatalf("%s walks the pending index %v times (filter %s), once per key, to find heads it knows the key and sequence of:\n%s",
					name, n.Loops, n.Filter, out)
			}
		})
	}
}

// planNode is what the test reads of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType   string     `json:"Node Type"`
	Relation   string     `json:"Relation Name,omitempty"`
	Index      string     `json:"Index Name,omitempty"`
	ActualRows float64    `json:"Actual Rows"`
	Loops      float64    `json:"Actual Loops"`
	Filter     string     `json:"Filter,omitempty"`
	SharedHit  int        `json:"Shared Hit Blocks"`
	SharedRead int        `json:"Shared Read Blocks"`
	Plans      []planNode `json:"Plans,omitempty"`
}

func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}

// The claim by key, which the engine runs on a keyed backlog, costs what
// the keys cost and not what waits behind them: with ten hot keys whose
// heads are all in flight, finding nothing to claim reads about as many
// buffers behind 4,000 rows per key as behind 200. (Finding nothing this
// way used to walk every pending row: 100,000 index probes and about a
// second on 100,000 rows.)
func TestClaimByKeyCostDoesNotGrowWithDepthBehindBusyHeads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hits := map[int]int{}
	for _, depth := range []int{200, 4000} {
		d := open(t, 0)
		tbl := pgx.Identifier{d.Names().Schema, "outbox"}.Sanitize()
		if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload)
			SELECT 't', 'k' || (g % 10), '{}' FROM generate_series(1, $1::int) AS g`, 10*depth); err != nil {
			t.Fatal(err)
		}
		// Every key's head is in flight, leased for an hour.
		if _, err := d.Pool().Exec(ctx, `UPDATE `+tbl+` SET state = 'processing', claim_token = gen_random_uuid(),
			claimed_at = now(), lease_expires_at = now() + interval '1 hour', attempt = 1
			WHERE id IN (SELECT DISTINCT ON (key) id FROM `+tbl+` ORDER BY key, sequence)`); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Pool().Exec(ctx, `ANALYZE `+tbl); err != nil {
			t.Fatal(err)
		}
		conn := claimSession(t, d)
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var plan []struct {
			Plan planNode `json:"Plan"`
		}
		err = tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE `+call(t, "claim_by_key", claimArgs(sqlArgs{"limit": "500", "heads": "4"}))).Scan(&plan)
		_ = tx.Rollback(ctx)
		if err != nil || len(plan) != 1 {
			t.Fatalf("explain: %v", err)
		}
		if plan[0].Plan.ActualRows != 0 {
			t.Fatalf("%d rows per key behind busy heads: the claim took %v rows, want none", depth, plan[0].Plan.ActualRows)
		}
		hits[depth] = plan[0].Plan.SharedHit + plan[0].Plan.SharedRead
	}
	if hits[4000] > 2*hits[200]+100 {
		t.Errorf("finding nothing behind ten busy heads read %d buffers over 4,000 rows per key, %d over 200: the claim walks the backlog", hits[4000], hits[200])
	}
	t.Logf("buffers read: %d behind 200 rows per key, %d behind 4,000", hits[200], hits[4000])
}

// While a snapshot is held, no row version that claims and completions
// leave behind can be removed, nor marked dead in the indexes: a claim that
// walks from the start of its indexes reads every one of them. A claim with
// the relay's bounds (a lookback and the floors of the groups of keys)
// reads what arrived since: a fraction of the buffers behind 6,000
// delivered rows over 100 keys (8 times fewer here), for the same ten
// fresh heads.
func TestAClaimUnderAHeldSnapshotReadsWhatItsBoundsAllow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := open(t, 0)
	holdSnapshot(t, d)
	// 6,000 rows over 100 keys, claimed and delivered under the snapshot.
	for round := range 3 {
		insertAndDeliver(t, d, 2000)
		t.Logf("round %d delivered", round)
	}
	lookedAt := time.Now() // where the relay's last walk looked: everything before is claimed
	insertFresh(t, d)
	floors := readFloors(t, d)
	conn := claimSession(t, d)
	buffers := func(bounds sqlArgs) (int, float64) {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var plan []struct {
			Plan planNode `json:"Plan"`
		}
		if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE `+call(t, "claim", claimArgs(bounds))).Scan(&plan); err != nil || len(plan) != 1 {
			t.Fatalf("explain: %v", err)
		}
		return plan[0].Plan.SharedHit + plan[0].Plan.SharedRead, plan[0].Plan.ActualRows
	}
	groups := make([]string, len(floors.Groups))
	for i, f := range floors.Groups {
		groups[i] = strconv.FormatInt(f, 10)
	}
	lookback := (time.Since(lookedAt) + 250*time.Millisecond).Milliseconds()
	bounded, took := buffers(sqlArgs{"rewinds": strconv.FormatInt(floors.Rewinds, 10), "lookback_ms": strconv.FormatInt(lookback, 10),
		"floors": "'{" + strings.Join(groups, ",") + "}'::bigint[]"})
	unbounded, tookAll := buffers(sqlArgs{})
	if took != 10 || tookAll != 10 {
		t.Fatalf("claims took %v (bounded) and %v (unbounded) rows, want the 10 fresh ones", took, tookAll)
	}
	t.Logf("buffers for 10 fresh heads behind 6,000 delivered rows under a held snapshot: %d bounded, %d unbounded", bounded, unbounded)
	// The bounded claim's reads are mostly its own update (ten rows, their
	// new index entries); the unbounded one's grow with the history.
	if bounded*4 > unbounded {
		t.Errorf("the bounded claim read %d buffers, the unbounded one %d: the bounds do not keep the claim off the versions the snapshot keeps", bounded, unbounded)
	}
}

// A read of the floors that starts from the floors read before passes
// over the entries below the lowest of them in the index, without a visit
// to the table for each: under a held snapshot, the entries of every row
// delivered before that read. Here 4,800 rows over 100 keys were
// delivered under the snapshot before the earlier read, and 1,200 after
// it: the read from the start visits the versions of all 6,000, the read
// from the earlier floors those of the last 1,200, and both find the same
// floors.
func TestAFloorsReadFromEarlierFloorsPassesOverTheDeliveredRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := open(t, 0)
	holdSnapshot(t, d)
	var earlier dialects.Floors
	for round := range 5 {
		if round == 4 {
			earlier = readFloors(t, d)
		}
		insertAndDeliver(t, d, 1200)
	}
	insertFresh(t, d)
	p, err := d.OutboxProbe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := d.OutboxFloors(ctx, p.Last, dialects.Floors{})
	if err != nil {
		t.Fatal(err)
	}
	from, err := d.OutboxFloors(ctx, p.Last, earlier)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fresh.Groups, from.Groups) {
		t.Fatal("the floors read from the earlier ones differ from those read from the start")
	}
	// The two reads again, under EXPLAIN, on the claim pool's settings.
	q, err := postgres.Queries(d.Names())
	if err != nil {
		t.Fatal(err)
	}
	conn := claimSession(t, d)
	if _, err := conn.Exec(ctx, `PREPARE floors(int, bigint, bigint, bigint) AS `+q.OutboxFloors); err != nil {
		t.Fatal(err)
	}
	buffers := func(args string) (int, []string) {
		t.Helper()
		var plan []struct {
			Plan planNode `json:"Plan"`
		}
		if err := conn.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE floors(`+args+`)`).Scan(&plan); err != nil || len(plan) != 1 {
			t.Fatalf("explain: %v", err)
		}
		var scans []string
		plan[0].Plan.walk(func(n planNode) {
			if n.Relation == "outbox" {
				scans = append(scans, n.NodeType+" "+n.Index)
			}
		})
		return plan[0].Plan.SharedHit + plan[0].Plan.SharedRead, scans
	}
	lowest, _ := earlier.Lowest()
	all, scans := buffers(fmt.Sprintf("%d, %d, %d, -1", dialects.FloorGroups, p.Last, math.MinInt64))
	bounded, boundedScans := buffers(fmt.Sprintf("%d, %d, %d, %d", dialects.FloorGroups, p.Last, lowest, earlier.Rewinds))
	t.Logf("floors under a held snapshot, 4,800 rows delivered before the earlier read and 1,200 after: %d buffers from the start (%v), %d from earlier floors (%v)", all, scans, bounded, boundedScans)
	if bounded*3 > all {
		t.Errorf("the read from earlier floors read %d buffers, the read from the start %d: the bound does not keep the read off the delivered rows' versions", bounded, all)
	}
}

// Completions and lease renewals find their rows by id, in the primary key,
// whatever the statistics say: here they were taken while no row was
// processing, which made the small processing index, with a filter on the
// ids, look cheaper. Once that index holds the entries of
// many rows claimed since (dead until vacuum, and a long transaction
// elsewhere keeps vacuum away), such a walk reads all of them at every
// completion.
func TestCompletionsAndRenewalsFindTheirRowsByID(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	ctx := context.Background()
	tbl := pgx.Identifier{d.Names().Schema, "outbox"}.Sanitize()
	token := uuid.New()
	if _, err := d.Pool().Exec(ctx, `ALTER TABLE `+tbl+` SET (autovacuum_enabled = off)`); err != nil {
		t.Fatal(err)
	}
	// The statistics: 20,000 rows delivered, none processing; then 64 rows
	// are claimed.
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, payload, state) SELECT 't', '{}', 'delivered' FROM generate_series(1, 20000);
		ANALYZE `+tbl); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload, state, claim_token, claimed_at, lease_expires_at)
		SELECT 't', 'k' || g, '{}', 'processing', $1, now(), now() + interval '1 hour' FROM generate_series(1, 64) AS g`, token); err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	rows, err := d.Pool().Query(ctx, `SELECT id FROM `+tbl+` WHERE state = 'processing'`)
	if err != nil {
		t.Fatal(err)
	}
	if ids, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil || len(ids) != 64 {
		t.Fatalf("ids: %v %v", ids, err)
	}
	q, err := postgres.Queries(d.Names())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := d.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	list := func(n int, v string) string { return strings.TrimSuffix(strings.Repeat(v+",", n), ",") }
	idList := make([]string, len(ids))
	for i, id := range ids {
		idList[i] = "'" + id.String() + "'"
	}
	n, tok := len(ids), "'"+token.String()+"'"
	complete := strings.TrimPrefix(call(t, "complete", sqlArgs{"ids": "ARRAY[" + strings.Join(idList, ",") + "]::uuid[]",
		"tokens": "ARRAY[" + list(n, tok) + "]::uuid[]", "states": "ARRAY[" + list(n, "'delivered'") + "]::text[]",
		"attempt_incs": "ARRAY[" + list(n, "0") + "]::int[]", "delays_ms": "ARRAY[" + list(n, "-1") + "]::bigint[]",
		"errors": "ARRAY[" + list(n, "''") + "]::text[]", "has_errors": "ARRAY[" + list(n, "false") + "]::bool[]"}), "complete")
	stmts := []struct{ name, types, sql, args string }{
		{"complete", "", "", strings.TrimSuffix(strings.TrimPrefix(complete, "("), ")")},
		{"renew", "uuid[], uuid[], bigint", q.OutboxRenewLeases,
			fmt.Sprintf("ARRAY[%s]::uuid[], ARRAY[%s]::uuid[], 60000", strings.Join(idList, ","), list(n, tok))},
	}
	run := func(name, args string, explain bool) planNode {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if !explain {
			if _, err := tx.Exec(ctx, `EXECUTE `+name+`(`+args+`)`); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return planNode{}
		}
		var plan []struct {
			Plan planNode `json:"Plan"`
		}
		if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE `+name+`(`+args+`)`).Scan(&plan); err != nil || len(plan) != 1 {
			t.Fatalf("%s: %v", name, err)
		}
		return plan[0].Plan
	}
	// The pool that completes and renews plans each run with its values.
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_custom_plan`); err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		if s.sql == "" {
			prepare(t, conn, d, s.name)
		} else if _, err := conn.Exec(ctx, `PREPARE `+s.name+`(`+s.types+`) AS `+s.sql); err != nil {
			t.Fatal(err)
		}
		run(s.name, s.args, false)
	}
	// 100,000 rows claimed with them and delivered, after the statistics
	// were taken: their entries stay in the processing index until vacuum.
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, payload, state, claimed_at) SELECT 't', '{}', 'processing', now() FROM generate_series(1, 100000);
		UPDATE `+tbl+` SET state = 'delivered' WHERE claim_token IS NULL`); err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		top := run(s.name, s.args, true)
		if top.ActualRows != 64 {
			t.Errorf("%s updated %v rows, want 64", s.name, top.ActualRows)
		}
		// The rows are read by id in the primary key: no scan of another
		// index with the ids as a filter. Updating 64 rows costs hundreds
		// of buffers (each new version goes into every index); a walk of
		// the dead entries, 100,000 or more.
		var walks []string
		top.walk(func(n planNode) {
			if n.Index != "" && n.Index != "outbox_pkey" && strings.Contains(n.Filter, "id = ANY") {
				walks = append(walks, n.Index)
			}
		})
		if len(walks) > 0 || top.SharedHit > 5000 {
			out, _ := json.MarshalIndent(top, "", " ")
			t.Errorf("%s walked %v with a filter on the ids, %d buffers for 64 rows it knows the ids of:\n%s", s.name, walks, top.SharedHit, out)
		}
	}
}

// Under a held snapshot, floors read long ago leave a head's probe to walk
// back over the versions of every row of its key delivered since; the
// key's position (where the relay finished its last run) stops the probe
// right behind the row. The position only narrows the probe: a row above
// it that is still processing keeps the next row of its key back.
func TestAHeadsProbeStopsAtItsKeysPosition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := open(t, 0)
	tbl := pgx.Identifier{d.Names().Schema, "outbox"}.Sanitize()
	holdSnapshot(t, d)
	// The floors, read while nothing was pending; then 3,000 rows over 10
	// keys, claimed and delivered under the snapshot.
	floors := readFloors(t, d)
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload)
		SELECT 't', 'k' || (g % 10), '{}' FROM generate_series(1, 3000) AS g`); err != nil {
		t.Fatal(err)
	}
	deliverAll(t, d)
	lookedAt := time.Now()
	// Each key's position: its last delivered row. Key k9 gets a row that
	// another replica holds (processing) before its fresh one.
	var keys []string
	var positions []int64
	rows, err := d.Pool().Query(ctx, `SELECT key, max(sequence) FROM `+tbl+` GROUP BY key ORDER BY key COLLATE "C"`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var pos int64
		if err := rows.Scan(&k, &pos); err != nil {
			t.Fatal(err)
		}
		keys, positions = append(keys, "'"+k+"'"), append(positions, pos)
	}
	if rows.Err() != nil || len(keys) != 10 {
		t.Fatalf("positions of %d keys: %v", len(keys), rows.Err())
	}
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload, state, claim_token, claimed_at, lease_expires_at)
		VALUES ('held', 'k9', '{}', 'processing', gen_random_uuid(), now(), now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload) SELECT 'fresh', 'k' || g, '{}' FROM generate_series(0, 9) AS g`); err != nil {
		t.Fatal(err)
	}
	conn := claimSession(t, d)
	claim := func(pos sqlArgs) (int, []string) {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		groups := make([]string, len(floors.Groups))
		for i, f := range floors.Groups {
			groups[i] = strconv.FormatInt(f, 10)
		}
		lookback := (time.Since(lookedAt) + 250*time.Millisecond).Milliseconds()
		pos["rewinds"], pos["lookback_ms"] = strconv.FormatInt(floors.Rewinds, 10), strconv.FormatInt(lookback, 10)
		pos["floors"] = "'{" + strings.Join(groups, ",") + "}'::bigint[]"
		args := call(t, "claim", claimArgs(pos))
		var plan []struct {
			Plan planNode `json:"Plan"`
		}
		if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE `+args).Scan(&plan); err != nil || len(plan) != 1 {
			t.Fatalf("explain: %v", err)
		}
		if _, err := tx.Exec(ctx, `EXECUTE `+args); err != nil {
			t.Fatal(err)
		}
		var taken []string
		r, err := tx.Query(ctx, `SELECT key FROM `+tbl+` WHERE topic = 'fresh' AND state = 'processing' ORDER BY key`)
		if err != nil {
			t.Fatal(err)
		}
		if taken, err = pgx.CollectRows(r, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		return plan[0].Plan.SharedHit + plan[0].Plan.SharedRead, taken
	}
	ps := make([]string, len(positions))
	for i, p := range positions {
		ps[i] = strconv.FormatInt(p, 10)
	}
	withFloors, takenF := claim(sqlArgs{})
	withPositions, takenP := claim(sqlArgs{"position_keys": "ARRAY[" + strings.Join(keys, ",") + "]::text[]",
		"position_after": "ARRAY[" + strings.Join(ps, ",") + "]::bigint[]"})
	want := "k0 k1 k2 k3 k4 k5 k6 k7 k8"
	if got := strings.Join(takenF, " "); got != want {
		t.Errorf("with the floors, the claim took the fresh rows of %s; want %s (k9's waits behind the row held)", got, want)
	}
	if got := strings.Join(takenP, " "); got != want {
		t.Errorf("with the positions, the claim took the fresh rows of %s; want %s (k9's waits behind the row held)", got, want)
	}
	t.Logf("buffers for 9 fresh heads behind 300 delivered rows per key under a held snapshot: %d with old floors, %d with positions", withFloors, withPositions)
	if withPositions*3 > withFloors {
		t.Errorf("the claim with positions read %d buffers, with old floors only %d: the positions do not bound the heads' probes", withPositions, withFloors)
	}
}

// holdSnapshot holds a REPEATABLE READ snapshot of the database, taken now,
// until the test ends: vacuum can remove no version made after it.
func holdSnapshot(t *testing.T, d *postgres.Dialect) {
	t.Helper()
	ctx := context.Background()
	reader, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reader.Rollback(ctx) })
	if _, err := reader.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Exec(ctx, `SELECT 1 FROM pg_class LIMIT 1`); err != nil {
		t.Fatal(err)
	}
}

// deliverAll claims and delivers every claimable row.
func deliverAll(t *testing.T, d *postgres.Dialect) {
	t.Helper()
	ctx := context.Background()
	for {
		rows, err := rowsOf(d.OutboxClaim(ctx, dialects.ClaimParams{Limit: 1000, Lease: time.Minute, Token: uuid.New()}))
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 0 {
			return
		}
		out := make([]dialects.Outcome, len(rows))
		for i, r := range rows {
			out[i] = dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeDelivered}
		}
		if _, err := d.OutboxComplete(ctx, out); err != nil {
			t.Fatal(err)
		}
	}
}

// readFloors reads the floors up to the sequence's last value.
func readFloors(t *testing.T, d *postgres.Dialect) dialects.Floors {
	t.Helper()
	p, err := d.OutboxProbe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	floors, err := d.OutboxFloors(context.Background(), p.Last, dialects.Floors{})
	if err != nil {
		t.Fatal(err)
	}
	return floors
}

// A replay moves the rewind counter with its commit, not before: floors
// read while a replay is under way (its rows updated, not yet committed)
// carry the counter from before it, so a claim after the replay sets them
// aside and takes the replayed row before a later row of its key. Here the
// replay is held between its update of the rows and its commit by a lock
// on the counter's row.
func TestFloorsReadDuringAReplayAreSetAsideAfterIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := open(t, 0)
	if err := d.OutboxInsert(ctx, []dialects.NewRow{testkit.Row("t", testkit.Key("k")), testkit.Row("t", testkit.Key("k"))}); err != nil {
		t.Fatal(err)
	}
	first, err := rowsOf(d.OutboxClaim(ctx, dialects.ClaimParams{Limit: 10, Lease: time.Minute, Token: uuid.New()}))
	if err != nil || len(first) != 2 {
		t.Fatalf("claim: %d rows, %v", len(first), err)
	}
	dead, delivered := first[0], first[1]
	if _, err := d.OutboxComplete(ctx, []dialects.Outcome{
		{Claim: dead.Claim, Kind: dialects.OutcomeDead, Error: "gone"},
		{Claim: delivered.Claim, Kind: dialects.OutcomeDelivered},
	}); err != nil {
		t.Fatal(err)
	}
	if err := d.OutboxInsert(ctx, []dialects.NewRow{testkit.Row("t", testkit.Key("k"))}); err != nil {
		t.Fatal(err)
	}
	before := probe(t, d).Rewinds

	holder := begin(t, d)
	defer holder.Rollback()
	if err := holder.Exec(`SELECT counter FROM {{rewinds}} FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	replayed := make(chan error, 1)
	go func() {
		n, err := d.OutboxReplayIDs(ctx, []uuid.UUID{dead.ID}, []dialects.State{dialects.Dead}, "")
		if err == nil && n != 1 {
			err = fmt.Errorf("replayed %d rows, want 1", n)
		}
		replayed <- err
	}()
	// The holder locks the counter's row and nothing else: a session it
	// blocks is the replay, waiting for that row. (pg_blocking_pids rather
	// than the statement's text: pg_stat_activity cuts the text at
	// track_activity_query_size.)
	testkit.Eventually(t, "the replay waits for the counter's row, its row updated", 0, func() error {
		var waiting bool
		err := d.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE $1::int = ANY(pg_blocking_pids(pid)) AND query LIKE '%may be replayed%')`, holder.Session()).Scan(&waiting)
		if err == nil && !waiting {
			err = fmt.Errorf("not waiting yet")
		}
		return err
	})
	floors := readFloors(t, d)
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-replayed; err != nil {
		t.Fatal(err)
	}
	after := probe(t, d).Rewinds
	if floors.Rewinds != before || after == before {
		t.Fatalf("counter %d before the replay, %d after; the floors read during it carry %d, want %d", before, after, floors.Rewinds, before)
	}
	rows, err := rowsOf(d.OutboxClaim(ctx, dialects.ClaimParams{Limit: 10, Lease: time.Minute, Token: uuid.New(),
		Bounds: &dialects.Bounds{Rewinds: floors.Rewinds, Floors: floors.Groups}}))
	if err != nil || len(rows) == 0 || rows[0].ID != dead.ID {
		t.Fatalf("the claim after the replay took %v (%v), want the replayed row %s first", rows, err, dead.ID)
	}
}

// rowsOf is the rows of a claim.
func rowsOf(c dialects.Claimed, err error) ([]dialects.Row, error) { return c.Rows, err }

func probe(t *testing.T, d *postgres.Dialect) dialects.Probe {
	t.Helper()
	p, err := d.OutboxProbe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A producer with an open savepoint holds a lock on its subtransaction's
// id too, newer than its own and than the horizon of a probe before the
// savepoint. Its own id is the one that must hold its key back: a later
// row of the key, committed before that probe, is not claimed before its
// row.
func TestAProducerWithASubtransactionStillHoldsItsKeyBack(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	exec(t, d, `CREATE TABLE {{q (obj "orders") | qualify}} (id INT PRIMARY KEY)`)
	first := begin(t, d)
	defer first.Rollback()
	if err := first.Exec(`INSERT INTO {{t}} ({{c "topic"}}, {{c "key"}}, {{c "payload"}}) VALUES ('first', 'k', '{}')`); err != nil {
		t.Fatal(err)
	}
	exec(t, d, `INSERT INTO {{t}} ({{c "topic"}}, {{c "key"}}, {{c "payload"}}) VALUES ('second', 'k', '{}')`)
	var w dialects.Watermark
	w.Observe(probe(t, d), time.Now())
	// A subtransaction, still open, with an id newer than that probe's Next.
	for _, q := range []string{`SAVEPOINT s`, `INSERT INTO {{q (obj "orders") | qualify}} (id) VALUES (1)`} {
		if err := first.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		p := probe(t, d)
		w.Observe(p, time.Now())
		if len(p.Writers) != 1 {
			t.Fatalf("probe %+v: want the open producer as the one writer", p)
		}
		rows, err := rowsOf(d.OutboxClaim(context.Background(), dialects.ClaimParams{Limit: 10, Lease: time.Minute, Token: uuid.New(), Gate: w.Gate()}))
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) > 0 {
			t.Fatalf("claimed %s of key k while the producer of its earlier row is open (writers %v, settled %d)", rows[0].Topic, p.Writers, w.Settled())
		}
	}
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	w.Observe(probe(t, d), time.Now())
	rows, err := rowsOf(d.OutboxClaim(context.Background(), dialects.ClaimParams{Limit: 10, Lease: time.Minute, Token: uuid.New(), Gate: w.Gate()}))
	if err != nil || len(rows) != 2 || rows[0].Topic != "first" {
		t.Fatalf("after the commit: %d rows (%v), want first then second", len(rows), err)
	}
}

// insertAndDeliver inserts n rows over 100 keys and delivers them all.
func insertAndDeliver(t *testing.T, d *postgres.Dialect, n int) {
	t.Helper()
	tbl := pgx.Identifier{d.Names().Schema, "outbox"}.Sanitize()
	if _, err := d.Pool().Exec(context.Background(), `INSERT INTO `+tbl+` (topic, key, payload)
		SELECT 't', 'k' || (g % 100), '{}' FROM generate_series(1, $1::int) AS g`, n); err != nil {
		t.Fatal(err)
	}
	deliverAll(t, d)
}

// insertFresh inserts ten pending rows of ten keys, topic 'fresh'.
func insertFresh(t *testing.T, d *postgres.Dialect) {
	t.Helper()
	tbl := pgx.Identifier{d.Names().Schema, "outbox"}.Sanitize()
	if _, err := d.Pool().Exec(context.Background(), `INSERT INTO `+tbl+` (topic, key, payload) SELECT 'fresh', 'k' || g, '{}' FROM generate_series(1, 10) AS g`); err != nil {
		t.Fatal(err)
	}
}

// The horizon's holder is never a statement that a relay's own session is
// running (each is bounded by a timeout; a replica that took another's
// slow probe for a long transaction behaved as under one for nothing),
// while another application's open transaction is named.
func TestHorizonLeavesOutTheRelaysOwnStatements(t *testing.T) {
	t.Parallel()
	schema, url := testdb.Schema(t)
	d := openAt(t, url, schema)
	ctx := context.Background()
	if _, err := migrations.UpTo(ctx, d, 1<<30); err != nil {
		t.Fatal(err)
	}
	relay, err := d.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Release()
	var relayPID int64
	if err := relay.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&relayPID); err != nil {
		t.Fatal(err)
	}
	sleeping := make(chan error, 1)
	go func() {
		_, err := relay.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT pg_current_xact_id(), pg_sleep(4); COMMIT")
		sleeping <- err
	}()
	time.Sleep(500 * time.Millisecond) // the relay's statement is open first, and older
	report, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer report.Close(ctx)
	if _, err := report.Exec(ctx, "SET application_name = 'nightly-report'"); err != nil {
		t.Fatal(err)
	}
	tx, err := report.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var reportPID int64
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid() FROM (SELECT pg_current_xact_id()) AS x").Scan(&reportPID); err != nil {
		t.Fatal(err)
	}
	h, err := d.OutboxHorizon(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Holder == nil {
		t.Fatal("no holder named while another application's transaction is open")
	}
	if h.Holder.PID == relayPID {
		t.Fatalf("the holder is the relay's own statement (pid %d): %+v", relayPID, *h.Holder)
	}
	if err := <-sleeping; err != nil {
		t.Fatal(err)
	}
}

// Sessions that took their snapshots while a transaction ran share its
// xmin: the holder named is the transaction that began first, never one
// of those bystanders.
func TestHorizonNamesTheTransactionThatBeganFirst(t *testing.T) {
	t.Parallel()
	schema, url := testdb.Schema(t)
	d := openAt(t, url, schema)
	ctx := context.Background()
	if _, err := migrations.UpTo(ctx, d, 1<<30); err != nil {
		t.Fatal(err)
	}
	begin := func(name, first string) (pgx.Tx, int64) {
		t.Helper()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		if _, err := c.Exec(ctx, "SET application_name = '"+name+"'"); err != nil {
			t.Fatal(err)
		}
		tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		var pid int64
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid() FROM ("+first+") AS x").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		return tx, pid
	}
	_, holder := begin("nightly-report", "SELECT pg_current_xact_id()")
	bystanders := map[int64]bool{}
	for i := range 5 {
		time.Sleep(20 * time.Millisecond) // each begins after the holder
		_, pid := begin(fmt.Sprintf("dashboard-%d", i), "SELECT 1")
		bystanders[pid] = true
	}
	h, err := d.OutboxHorizon(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Holder == nil {
		t.Fatal("no holder named while a transaction is open")
	}
	if bystanders[h.Holder.PID] {
		t.Fatalf("the holder named is a session that began after the transaction holding it (pid %d): %+v", holder, *h.Holder)
	}
}
