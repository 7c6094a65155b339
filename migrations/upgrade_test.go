package migrations_test

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/migrations"
)

// oldRow is a row as it stood before V14: its state and claim columns are
// written as they were, and claimable says whether a claim after the
// upgrade must take it.
type oldRow struct {
	topic     string
	key       *string
	state     dialects.State
	attempt   int
	due       bool          // scheduled_at in the past (else an hour ahead)
	lease     time.Duration // processing rows: lease_expires_at - now
	lastError *string
	claimable bool
}

func strp(s string) *string { return &s }

// The rows before the upgrade, in two transactions that each interleave
// several keys (so that V12's trigger locks several keys in one
// transaction). Per key: k1 only pending due rows; k2 delivered and dead
// rows before pending due ones (they do not block it); k3 an in-flight row
// with a live lease, k5 one whose lease has passed, and k4 a row waiting
// for a retry, each before a pending due row that it blocks; unkeyed rows
// (NULL and empty key) in every state.
var oldRows = [][]oldRow{{
	{topic: "k2.delivered", key: strp("k2"), state: dialects.Delivered, attempt: 1, due: true},
	{topic: "k1.p1", key: strp("k1"), state: dialects.Pending, due: true, claimable: true},
	{topic: "k3.inflight", key: strp("k3"), state: dialects.Processing, attempt: 0, due: true, lease: time.Hour},
	{topic: "null.p1", state: dialects.Pending, due: true, claimable: true},
	{topic: "k2.dead", key: strp("k2"), state: dialects.Dead, attempt: 5, due: true, lastError: strp("HTTP 500")},
	{topic: "k1.p2", key: strp("k1"), state: dialects.Pending, due: true, claimable: true},
	{topic: "null.later", state: dialects.Pending, attempt: 2, due: false, lastError: strp("HTTP 503")},
	{topic: "k4.retry", key: strp("k4"), state: dialects.Pending, attempt: 1, due: false, lastError: strp("timeout")},
	{topic: "k3.p1", key: strp("k3"), state: dialects.Pending, due: true},
}, {
	{topic: "k4.p1", key: strp("k4"), state: dialects.Pending, due: true},
	{topic: "k2.p1", key: strp("k2"), state: dialects.Pending, due: true, claimable: true},
	{topic: "null.inflight", state: dialects.Processing, attempt: 1, due: true, lease: time.Hour},
	{topic: "k5.expired", key: strp("k5"), state: dialects.Processing, due: true, lease: -time.Minute},
	{topic: "k1.p3", key: strp("k1"), state: dialects.Pending, due: true, claimable: true},
	{topic: "empty.p1", key: strp(""), state: dialects.Pending, due: true, claimable: true},
	{topic: "null.delivered", state: dialects.Delivered, due: true},
	{topic: "k5.p1", key: strp("k5"), state: dialects.Pending, due: true},
	{topic: "k2.p2", key: strp("k2"), state: dialects.Pending, due: true, claimable: true},
	{topic: "null.dead", state: dialects.Dead, attempt: 3, due: true, lastError: strp("no route")},
	{topic: "null.p2", state: dialects.Pending, due: true, claimable: true},
}}

// V14 to V16 keep every row of a table that V13 filled, in every state,
// drop V12's key locks and V13's notify trigger, and the claim then takes
// the due pending rows per key in sequence order, through the gate; V16
// publishes the inserts.
func TestUpgradeFromV13KeepsRowsAndClaimsInOrder(t *testing.T) {
	t.Parallel()
	for _, byKey := range []bool{false, true} {
		name := "schedule order"
		if byKey {
			name = "by key"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			upgradeFromV13(t, byKey)
		})
	}
}

func upgradeFromV13(t *testing.T, byKey bool) {
	d, schema, _ := fresh(t, dialects.DefaultNames())
	names := d.Names()
	ctx := context.Background()
	pool := d.Pool()
	if _, err := migrations.UpTo(ctx, d, 13); err != nil {
		t.Fatal(err)
	}
	tbl := pgx.Identifier{schema, names.Outbox}.Sanitize()
	itbl := pgx.Identifier{schema, names.Inbox}.Sanitize()
	locks := pgx.Identifier{schema, names.Object("key_locks")}.Sanitize()

	// V12's trigger locks keys in its table, V13's notifies per statement.
	listener, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(ctx)
	if _, err := listener.Exec(ctx, `LISTEN queuebox`); err != nil {
		t.Fatal(err)
	}
	for _, batch := range oldRows {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		for _, r := range batch {
			sched, lease := -time.Minute, (*time.Duration)(nil)
			if !r.due {
				sched = time.Hour
			}
			var token *string
			if r.state == dialects.Processing {
				token, lease = strp(uuid.NewString()), &r.lease
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload, headers, aggregate_type, state, attempt, max_attempts,
				scheduled_at, created_at, updated_at, claimed_at, claim_token, lease_expires_at, last_error)
				VALUES ($1::text, $2, jsonb_build_object('topic', $1::text), '{"h":"v"}', 'agg', $3, $4, 5,
				        now() + make_interval(secs => $5), now() - interval '2 minutes', now() - interval '1 minute',
				        CASE WHEN $6::uuid IS NULL THEN NULL ELSE now() - interval '30 seconds' END, $6,
				        now() + make_interval(secs => $7), $8)`,
				r.topic, r.key, string(r.state), r.attempt, sched.Seconds(), token, secondsOrNil(lease), r.lastError); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Inbox rows, one received and one relayed, for V15.
	if _, err := pool.Exec(ctx, `INSERT INTO `+itbl+` (source, message_id, topic, aggregate_id, payload, state, relayed_at)
		VALUES ('src', 'm1', 'in.a', 'agg-1', '{}', 'received', NULL), ('src', 'm2', 'in.b', NULL, '{"x":1}', 'relayed', now())`); err != nil {
		t.Fatal(err)
	}
	// The leftovers exist before the upgrade: every key was locked, and
	// the inserts notified.
	var lockedKeys []string
	if err := pool.QueryRow(ctx, `SELECT array_agg(key ORDER BY key) FROM `+locks).Scan(&lockedKeys); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(lockedKeys, []string{"k1", "k2", "k3", "k4", "k5"}) {
		t.Fatalf("V12's key locks hold %v, want k1 to k5", lockedKeys)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	for {
		n, err := listener.WaitForNotification(wctx)
		if err != nil {
			cancel()
			t.Fatalf("no notification from V13's trigger: %v", err)
		}
		if n.Payload == schema+"."+names.Outbox {
			break
		}
	}
	cancel()
	wantObjects := []string{names.Object("notify"), names.Object("order_key")}
	if got := objects(t, pool, schema, names.Outbox); !slices.Equal(got.triggers, wantObjects) || !slices.Equal(got.functions, wantObjects) ||
		!slices.Contains(got.tables, names.Object("key_locks")) {
		t.Fatalf("at V13: %+v", got)
	}

	before := snapshot(t, pool, tbl)
	ibefore := snapshot(t, pool, itbl)
	if len(before) != len(oldRows[0])+len(oldRows[1]) || len(ibefore) != 2 {
		t.Fatalf("%d outbox rows and %d inbox rows before the upgrade", len(before), len(ibefore))
	}
	applied, err := migrations.Up(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	all, err := migrations.Load("postgresql")
	if err != nil {
		t.Fatal(err)
	}
	if want := len(slices.DeleteFunc(all, func(m migrations.Migration) bool { return m.Version <= 13 })); len(applied) != want {
		t.Fatalf("the upgrade applied %+v", applied)
	}

	// Every row is still there, every column unchanged.
	for what, pair := range map[string][2]map[string]string{"outbox": {before, snapshot(t, pool, tbl)}, "inbox": {ibefore, snapshot(t, pool, itbl)}} {
		was, now := pair[0], pair[1]
		if len(now) != len(was) {
			t.Errorf("%s: %d rows after the upgrade, %d before", what, len(now), len(was))
		}
		for id, row := range was {
			if now[id] != row {
				t.Errorf("%s row %s changed:\n was %s\n now %s", what, id, row, now[id])
			}
		}
	}
	// V16's publication of the inserts is there, for logical wake-ups.
	checkPublication(t, d, schema, names)
	// What V14 drops is gone; the xid_first triggers are all that is left.
	got := objects(t, pool, schema, names.Outbox)
	if !slices.Equal(got.triggers, []string{names.Object("xid_first")}) ||
		!slices.Equal(got.functions, []string{names.Inbox + "_xid_first", names.Object("xid_first")}) ||
		slices.Contains(got.tables, names.Object("key_locks")) {
		t.Errorf("after the upgrade: %+v", got)
	}

	// New rows continue the sequence and join their keys' runs.
	for _, k := range []string{"k1", "k6"} {
		if _, err := pool.Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload) VALUES ($1, $2, '{}')`, k+".new", k); err != nil {
			t.Fatalf("an insert after the upgrade: %v", err)
		}
	}

	// The claim, as the claimer makes it: a probe, the writers, the gate.
	var wm dialects.Watermark
	p, err := d.OutboxProbe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wm.Observe(p, time.Now())
	writers, err := d.OutboxWriters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oldest := int64(math.MaxInt64)
	for _, w := range writers {
		oldest = min(oldest, w.Xid)
	}
	wm.SettleBelow(oldest, time.Now())
	if wm.Settled() < p.Last {
		t.Fatalf("nothing writes to the outbox, yet the watermark %d is below %d", wm.Settled(), p.Last)
	}
	walk := dialects.WalkSchedule
	if byKey {
		walk = dialects.WalkKeys
	}
	claimed, err := d.OutboxClaim(ctx, dialects.ClaimParams{Limit: 100, Lease: time.Minute, Token: uuid.New(), Gate: wm.Gate(), Walk: walk})
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[string]int64{}
	if err := pool.QueryRow(ctx, `SELECT jsonb_object_agg(topic, sequence) FROM `+tbl).Scan(&seqs); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"k1": {"k1.p1", "k1.p2", "k1.p3", "k1.new"}, "k2": {"k2.p1", "k2.p2"}, "k6": {"k6.new"}}
	var unkeyed []string
	for _, b := range oldRows {
		for _, r := range b {
			if r.claimable && (r.key == nil || *r.key == "") {
				unkeyed = append(unkeyed, r.topic)
			}
		}
	}
	gotByKey := map[string][]string{}
	var gotUnkeyed []string
	for _, r := range claimed.Rows {
		if r.Sequence != seqs[r.Topic] {
			t.Errorf("%s claimed with sequence %d, the table has %d", r.Topic, r.Sequence, seqs[r.Topic])
		}
		if r.Keyed() {
			gotByKey[r.Key] = append(gotByKey[r.Key], r.Topic)
		} else {
			gotUnkeyed = append(gotUnkeyed, r.Topic)
		}
	}
	for k, topics := range want {
		// Sequence order is insert order within a key here.
		if !slices.Equal(gotByKey[k], topics) {
			t.Errorf("key %s: claimed %v, want %v in sequence order", k, gotByKey[k], topics)
		}
		for i := 1; i < len(topics); i++ {
			if seqs[topics[i]] <= seqs[topics[i-1]] {
				t.Errorf("key %s: %s has sequence %d, not after %s's %d", k, topics[i], seqs[topics[i]], topics[i-1], seqs[topics[i-1]])
			}
		}
	}
	for k := range gotByKey {
		if _, ok := want[k]; !ok {
			t.Errorf("key %s: claimed %v, but its pending row waits behind an in-flight or retried row", k, gotByKey[k])
		}
	}
	slices.Sort(unkeyed)
	slices.Sort(gotUnkeyed)
	if !slices.Equal(gotUnkeyed, unkeyed) {
		t.Errorf("unkeyed: claimed %v, want %v", gotUnkeyed, unkeyed)
	}
}

func secondsOrNil(d *time.Duration) *float64 {
	if d == nil {
		return nil
	}
	s := d.Seconds()
	return &s
}

// snapshot reads every row of a table as JSON, by id.
func snapshot(t *testing.T, pool *pgxpool.Pool, tbl string) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT r.id::text, row_to_json(r)::text FROM `+tbl+` AS r`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var id, row string
	if _, err := pgx.ForEachRow(rows, []any{&id, &row}, func() error { out[id] = row; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

type schemaObjects struct {
	triggers, functions, tables []string
}

// objects lists the user triggers of the outbox table, and the functions
// and tables of the schema, each sorted.
func objects(t *testing.T, pool *pgxpool.Pool, schema, outbox string) schemaObjects {
	t.Helper()
	var o schemaObjects
	err := pool.QueryRow(context.Background(), `
		SELECT ARRAY(SELECT tgname::text FROM pg_trigger
		              WHERE tgrelid = (quote_ident($1) || '.' || quote_ident($2))::regclass AND NOT tgisinternal ORDER BY 1),
		       ARRAY(SELECT p.proname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY 1),
		       ARRAY(SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		              WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY 1)`, schema, outbox).Scan(&o.triggers, &o.functions, &o.tables)
	if err != nil {
		t.Fatal(err)
	}
	return o
}
