package postgres_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/dialecttest"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testdb"
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
	pd := d.(*postgres.Dialect)
	q, err := dialects.Render("exec", sql, dialects.TemplateFuncs(pd.Names(), postgres.Quoting))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.Pool().Exec(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func TestConformance(t *testing.T) {
	dialecttest.Run(t, dialecttest.Harness{
		New:  func(t *testing.T, upTo int) dialects.Dialect { return open(t, upTo) },
		Exec: exec,
		Empty: func(t *testing.T) dialects.Dialect {
			schema, url := testdb.Schema(t)
			return openAt(t, url, schema)
		},
		Unreachable: func(t *testing.T) dialects.Dialect {
			return openAt(t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?connect_timeout=5", freePort(t)), "")
		},
		BackdateUpdated: `UPDATE {{t}} SET {{c "updated_at"}} = now() - $2::int * interval '1 hour' WHERE {{c "state"}} = $1`,
	})
}

// Two transactions insert rows of one key at once. The second must wait for
// the first, so that sequence order equals commit order: without the
// trigger, the second could commit first with the larger sequence value,
// and a relay would deliver it before the first.
func TestProducerOrderingPerKey(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	ctx := context.Background()
	tbl := pgx.Identifier{d.Names().Schema, "outbox"}.Sanitize()
	t1, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer t1.Rollback(ctx)
	var seq1 int64
	if err := t1.QueryRow(ctx, `INSERT INTO `+tbl+` (topic, key, payload) VALUES ('a', 'k', '{"n":1}') RETURNING sequence`).Scan(&seq1); err != nil {
		t.Fatal(err)
	}
	var pid2 int
	t2, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer t2.Rollback(ctx)
	if err := t2.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid2); err != nil {
		t.Fatal(err)
	}
	seq2c := make(chan int64, 1)
	errc := make(chan error, 1)
	go func() {
		var s int64
		err := t2.QueryRow(ctx, `INSERT INTO `+tbl+` (topic, key, payload) VALUES ('a', 'k', '{"n":2}') RETURNING sequence`).Scan(&s)
		if err == nil {
			err = t2.Commit(ctx)
		}
		seq2c <- s
		errc <- err
	}()
	// Wait until the second insert is blocked on a lock held by the first.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting bool
		if err := d.Pool().QueryRow(ctx, `SELECT COALESCE(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid2).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case <-seq2c:
			t.Fatal("the second transaction inserted a row of the same key without waiting for the first")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the second insert never waited for the key lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// An insert of another key is not blocked by the lock.
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload) VALUES ('a', 'other', '{}')`); err != nil {
		t.Fatal(err)
	}
	if err := t1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	seq2 := <-seq2c
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if seq2 <= seq1 {
		t.Fatalf("the row committed second has sequence %d, not after the first's %d", seq2, seq1)
	}
}

// One transaction inserting 100,000 rows with distinct keys succeeds: the
// producer lock is a row lock, not an advisory lock from the shared table.
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

// The hot statements keep their index plans on a large table (the generic
// plan of a prepared statement included).
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
	q, err := postgres.Queries(d.Names())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := d.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `PREPARE claim(int, bigint, uuid, int, int) AS `+q.OutboxClaim); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE claim(100, 30000, gen_random_uuid(), 100, NULL)`)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		_ = rows.Scan(&line)
		plan = append(plan, line)
	}
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "idx_outbox_pending_scheduled") || !strings.Contains(text, "idx_outbox_key_sequence") {
		t.Fatalf("the generic claim plan does not use the claim indexes:\n%s", text)
	}
	if strings.Contains(text, "Seq Scan on outbox") {
		t.Fatalf("the generic claim plan scans the whole table:\n%s", text)
	}
}

// The lock table of producer ordering keeps only keys with pending or
// processing rows after a prune; a producer that finds its key pruned
// re-creates it.
func TestKeyLocksPrune(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	ctx := context.Background()
	schema := d.Names().Schema
	tbl := pgx.Identifier{schema, "outbox"}.Sanitize()
	locks := pgx.Identifier{schema, "outbox_key_locks"}.Sanitize()
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload, state) SELECT 't', 'done-' || g, '{}', 'pending' FROM generate_series(1, 25) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload) SELECT 't', 'live-' || g, '{}' FROM generate_series(1, 5) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `UPDATE `+tbl+` SET state = 'delivered' WHERE key LIKE 'done-%'`); err != nil {
		t.Fatal(err)
	}
	after, total := "", 0
	for {
		n, next, err := d.KeyLocksPrune(ctx, after, 7)
		if err != nil {
			t.Fatal(err)
		}
		total += n
		if next == "" {
			break
		}
		after = next
	}
	var left []string
	rows, _ := d.Pool().Query(ctx, `SELECT key FROM `+locks+` ORDER BY key`)
	left, _ = pgx.CollectRows(rows, pgx.RowTo[string])
	if total != 25 || len(left) != 5 || !strings.HasPrefix(left[0], "live-") {
		t.Fatalf("pruned %d, left %v", total, left)
	}
	// A producer of a pruned key still takes the lock (the row comes back).
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload) VALUES ('t', 'done-1', '{}')`); err != nil {
		t.Fatal(err)
	}
	var n int
	_ = d.Pool().QueryRow(ctx, `SELECT count(*) FROM `+locks+` WHERE key = 'done-1'`).Scan(&n)
	if n != 1 {
		t.Fatal("the pruned key was not re-created by its next insert")
	}
}
