package migrations_test

import (
	"context"
	nurl "net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/migrations"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// seedColumn is one row of the seed page's column table (PostgreSQL side),
// in the catalog's words.
type seedColumn struct {
	name, typ string
	notNull   bool
	def       string // "" for none; the sequence default is checked apart
}

var seedColumns = []seedColumn{
	{"id", "uuid", true, "gen_random_uuid()"},
	{"topic", "character varying(255)", true, ""},
	{"key", "character varying(255)", false, ""},
	{"payload", "jsonb", true, ""},
	{"headers", "jsonb", true, "'{}'::jsonb"},
	{"aggregate_type", "character varying(255)", false, ""},
	{"state", "character varying(50)", true, "'pending'::character varying"},
	{"attempt", "integer", true, "0"},
	{"max_attempts", "integer", true, "5"},
	{"scheduled_at", "timestamp with time zone", true, "CURRENT_TIMESTAMP"},
	{"created_at", "timestamp with time zone", true, "CURRENT_TIMESTAMP"},
	{"updated_at", "timestamp with time zone", true, "CURRENT_TIMESTAMP"},
	{"claimed_at", "timestamp with time zone", false, ""},
	{"claim_token", "uuid", false, ""},
	{"lease_expires_at", "timestamp with time zone", false, ""},
	{"last_error", "text", false, ""},
	{"sequence", "bigint", true, "nextval(SEQ)"},
}

// seedIndex is one row of the seed page's PostgreSQL index table.
type seedIndex struct {
	name    string // with "outbox" standing for the table name
	columns []string
	primary bool
	states  []string // the filter's states; nil for no filter
}

var seedIndexes = []seedIndex{
	{"outbox_pkey", []string{"id"}, true, nil},
	{"idx_outbox_pending_scheduled", []string{"state", "scheduled_at"}, false, []string{"pending"}},
	{"idx_outbox_topic", []string{"topic"}, false, nil},
	{"idx_outbox_processing_claimed", []string{"claimed_at"}, false, []string{"processing"}},
	{"idx_outbox_key_sequence", []string{"key", "sequence"}, false, []string{"pending", "processing"}},
}

// fresh opens a dialect on a new, empty schema; its URL is returned too.
func fresh(t *testing.T, names dialects.Names) (*postgres.Dialect, string, string) {
	t.Helper()
	schema, url := testdb.Schema(t)
	names.Schema = schema
	d, err := postgres.Open(context.Background(), postgres.Options{URL: url, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d, schema, url
}

func migrated(t *testing.T, names dialects.Names) (*postgres.Dialect, string) {
	t.Helper()
	d, schema, _ := fresh(t, names)
	if _, err := migrations.Up(context.Background(), d); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	return d, schema
}

func TestCatalogMatchesSeed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		names dialects.Names
	}{
		{"default names", dialects.DefaultNames()},
		{"renamed table and columns", dialects.Names{
			Outbox: "events_out", Inbox: "events_in",
			OutboxColumns: map[string]string{"id": "event_id", "key": "message_key", "payload": "body", "sequence": "seq_no", "state": "status", "topic": "subject"},
			InboxColumns:  map[string]string{"id": "message_uuid"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, schema := migrated(t, tc.names)
			names := d.Names()
			checkColumns(t, d, schema, names)
			checkIndexes(t, d, schema, names)
			checkPublication(t, d, schema, names)
		})
	}
}

func checkColumns(t *testing.T, d *postgres.Dialect, schema string, names dialects.Names) {
	ctx := context.Background()
	rows, err := d.Pool().Query(ctx, `
		SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, COALESCE(pg_get_expr(ad.adbin, ad.adrelid), '')
		  FROM pg_attribute a
		  LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
		 WHERE a.attrelid = (quote_ident($1) || '.' || quote_ident($2))::regclass AND a.attnum > 0 AND NOT a.attisdropped
		 ORDER BY a.attnum`, schema, names.Outbox)
	if err != nil {
		t.Fatal(err)
	}
	type col struct {
		name, typ string
		notNull   bool
		def       string
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (col, error) {
		var c col
		err := r.Scan(&c.name, &c.typ, &c.notNull, &c.def)
		return c, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(seedColumns) {
		t.Fatalf("the table has %d columns, the seed page %d: %+v", len(got), len(seedColumns), got)
	}
	for i, want := range seedColumns {
		g := got[i]
		wantName := names.Col(want.name)
		if g.name != wantName || g.typ != want.typ || g.notNull != want.notNull {
			t.Errorf("column %d: got %s %s notnull=%v, want %s %s notnull=%v", i+1, g.name, g.typ, g.notNull, wantName, want.typ, want.notNull)
		}
		wantDef := want.def
		if wantDef == "nextval(SEQ)" {
			wantDef = "nextval('" + schema + "." + names.Sequence() + "'::regclass)"
		}
		if g.def != wantDef {
			t.Errorf("column %s: default %q, want %q", g.name, g.def, wantDef)
		}
	}
	// The sequence exists under the seed's name (renamed with the table).
	var seqName string
	if err := d.Pool().QueryRow(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'S' AND c.relname = $2`, schema, names.Sequence()).Scan(&seqName); err != nil {
		t.Errorf("sequence %s: %v", names.Sequence(), err)
	}
}

var literalRE = regexp.MustCompile(`'([a-z]+)'::`)

func checkIndexes(t *testing.T, d *postgres.Dialect, schema string, names dialects.Names) {
	ctx := context.Background()
	rows, err := d.Pool().Query(ctx, `
		SELECT i.relname, ix.indisprimary, COALESCE(pg_get_expr(ix.indpred, ix.indrelid), ''),
		       ARRAY(SELECT a.attname::text FROM unnest(ix.indkey) WITH ORDINALITY AS k(attnum, n)
		              JOIN pg_attribute a ON a.attrelid = ix.indrelid AND a.attnum = k.attnum ORDER BY k.n)
		  FROM pg_index ix JOIN pg_class i ON i.oid = ix.indexrelid
		 WHERE ix.indrelid = (quote_ident($1) || '.' || quote_ident($2))::regclass
		 ORDER BY i.relname`, schema, names.Outbox)
	if err != nil {
		t.Fatal(err)
	}
	type idx struct {
		name    string
		primary bool
		pred    string
		cols    []string
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (idx, error) {
		var i idx
		err := r.Scan(&i.name, &i.primary, &i.pred, &i.cols)
		return i, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(seedIndexes) {
		t.Fatalf("the table has %d indexes, the seed page %d: %+v", len(got), len(seedIndexes), got)
	}
	byName := map[string]idx{}
	for _, g := range got {
		byName[g.name] = g
	}
	for _, want := range seedIndexes {
		name := strings.Replace(want.name, "outbox", names.Outbox, 1)
		g, ok := byName[name]
		if !ok {
			t.Errorf("index %s is missing; have %v", name, got)
			continue
		}
		var wantCols []string
		for _, c := range want.columns {
			wantCols = append(wantCols, names.Col(c))
		}
		if !slices.Equal(g.cols, wantCols) || g.primary != want.primary {
			t.Errorf("index %s: columns %v primary=%v, want %v primary=%v", name, g.cols, g.primary, wantCols, want.primary)
		}
		if want.states == nil {
			if g.pred != "" {
				t.Errorf("index %s: filter %q, want none", name, g.pred)
			}
			continue
		}
		var states []string
		for _, m := range literalRE.FindAllStringSubmatch(g.pred, -1) {
			states = append(states, m[1])
		}
		sort.Strings(states)
		if !slices.Equal(states, want.states) || !strings.Contains(g.pred, "("+names.Col("state")+")") {
			t.Errorf("index %s: filter %q, want %s in %v", name, g.pred, names.Col("state"), want.states)
		}
	}
}

// The seed's example insert and a two-column insert succeed; an explicit
// NULL headers fails.
func TestSeedInserts(t *testing.T) {
	t.Parallel()
	d, schema := migrated(t, dialects.DefaultNames())
	ctx := context.Background()
	conn, err := d.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET search_path TO "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	seedExample := `INSERT INTO outbox (topic, key, payload, headers, aggregate_type)
VALUES (
    'order.created',
    'cust-42',
    '{"orderId":"11111111-1111-1111-1111-111111111111","amount":99.99}'::jsonb,
    '{"X-Tenant":"acme"}'::jsonb,
    'order'
);`
	if _, err := conn.Exec(ctx, seedExample); err != nil {
		t.Fatalf("the seed's example insert failed: %v", err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (topic, payload) VALUES ('order.paid', '{"a":1}')`); err != nil {
		t.Fatalf("a two-column insert failed: %v", err)
	}
	_, err = conn.Exec(ctx, `INSERT INTO outbox (topic, payload, headers) VALUES ('x', '{}', NULL)`)
	if err == nil || !strings.Contains(err.Error(), "not-null") {
		t.Fatalf("an explicit NULL headers must fail with a not-null violation, got %v", err)
	}
	var state string
	var attempt, maxAttempts int
	var headers string
	if err := conn.QueryRow(ctx, `SELECT state, attempt, max_attempts, headers::text FROM outbox WHERE topic = 'order.paid'`).Scan(&state, &attempt, &maxAttempts, &headers); err != nil {
		t.Fatal(err)
	}
	if state != "pending" || attempt != 0 || maxAttempts != 5 || headers != "{}" {
		t.Errorf("defaults: state=%s attempt=%d max_attempts=%d headers=%s", state, attempt, maxAttempts, headers)
	}
}

// Migrating twice changes nothing; two processes migrating at once apply
// every version exactly once.
func TestMigrateIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	schema, url := testdb.Schema(t)
	names := dialects.DefaultNames()
	names.Schema = schema
	ctx := context.Background()
	var wg sync.WaitGroup
	applied := make([]int, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := postgres.Open(ctx, postgres.Options{URL: url, Names: names})
			if err != nil {
				errs[i] = err
				return
			}
			defer d.Close()
			st, err := migrations.Up(ctx, d)
			applied[i], errs[i] = len(st), err
		}()
	}
	wg.Wait()
	total := 0
	for i := range 4 {
		if errs[i] != nil {
			t.Fatalf("migrator %d: %v", i, errs[i])
		}
		total += applied[i]
	}
	all, _ := migrations.Load("postgresql")
	if total != len(all) {
		t.Fatalf("4 concurrent migrators applied %d migrations in all, want %d (each once)", total, len(all))
	}
	d, err := postgres.Open(ctx, postgres.Options{URL: url, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	st, err := migrations.Up(ctx, d)
	if err != nil || len(st) != 0 {
		t.Fatalf("a second migrate applied %d (err %v), want 0", len(st), err)
	}
	status, err := migrations.StatusOf(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range status {
		if !s.Applied || s.Changed {
			t.Errorf("V%d %s: applied=%v changed=%v", s.Version, s.Name, s.Applied, s.Changed)
		}
	}
}

// V11 numbers the rows that exist in created_at order.
func TestV11NumbersExistingRows(t *testing.T) {
	t.Parallel()
	d, schema, _ := fresh(t, dialects.DefaultNames())
	ctx := context.Background()
	if _, err := migrations.UpTo(ctx, d, 10); err != nil {
		t.Fatal(err)
	}
	tbl := pgx.Identifier{schema, "outbox"}.Sanitize()
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	// Inserted out of created_at order: topic tN must get sequence N.
	for _, n := range []int{3, 1, 5, 2, 4} {
		if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, payload, created_at) VALUES ($1, '{}', $2)`,
			"t"+string(rune('0'+n)), base.Add(time.Duration(n)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := migrations.Up(ctx, d); err != nil {
		t.Fatal(err)
	}
	rows, err := d.Pool().Query(ctx, `SELECT topic, sequence FROM `+tbl+` ORDER BY sequence`)
	if err != nil {
		t.Fatal(err)
	}
	i := 1
	for rows.Next() {
		var topic string
		var seq int64
		if err := rows.Scan(&topic, &seq); err != nil {
			t.Fatal(err)
		}
		if topic != "t"+string(rune('0'+i)) || seq != int64(i) {
			t.Errorf("row %d: topic %s sequence %d", i, topic, seq)
		}
		i++
	}
	// A new row continues after the numbered ones.
	var next int64
	if err := d.Pool().QueryRow(ctx, `INSERT INTO `+tbl+` (topic, payload) VALUES ('new', '{}') RETURNING sequence`).Scan(&next); err != nil {
		t.Fatal(err)
	}
	if next <= 5 {
		t.Errorf("the first row after V11 got sequence %d, want more than 5", next)
	}
}

// Checking the schema only reads: on an empty schema it creates nothing,
// and a role without CREATE rights can check a migrated one.
func TestStatusOnlyReads(t *testing.T) {
	t.Parallel()
	d, schema, url := fresh(t, dialects.DefaultNames())
	names := d.Names()
	ctx := context.Background()
	current, err := migrations.Current(ctx, d)
	if err != nil || current {
		t.Fatalf("an empty schema: current=%v err=%v", current, err)
	}
	var tables int
	_ = d.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, schema).Scan(&tables)
	if tables != 0 {
		t.Fatalf("checking the schema created %d tables", tables)
	}
	if _, err := migrations.Up(ctx, d); err != nil {
		t.Fatal(err)
	}
	_, roleURL := testdb.RuntimeRole(t, url, schema)
	ro, err := postgres.Open(ctx, postgres.Options{URL: roleURL, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if current, err := migrations.Current(ctx, ro); err != nil || !current {
		t.Fatalf("a runtime role could not check the schema: current=%v err=%v", current, err)
	}
}

// publication is the wake-ups publication as the catalog has it.
type publication struct {
	insert, update, delete, truncate bool
	// tables maps each published table to its published columns.
	tables map[string][]string
}

// readPublication reads the publication named name; ok is false when
// there is none.
func readPublication(t *testing.T, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, name string) (p publication, ok bool) {
	t.Helper()
	ctx := context.Background()
	err := pool.QueryRow(ctx, `SELECT pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = $1`, name).
		Scan(&p.insert, &p.update, &p.delete, &p.truncate)
	if err == pgx.ErrNoRows {
		return p, false
	}
	if err != nil {
		t.Fatal(err)
	}
	// pg_publication_tables names the published columns from PostgreSQL 15 on.
	rows, err := pool.Query(ctx, `SELECT schemaname || '.' || tablename, attnames::text[] FROM pg_publication_tables WHERE pubname = $1`, name)
	if err != nil {
		t.Fatal(err)
	}
	p.tables = map[string][]string{}
	var table string
	var cols []string
	if _, err := pgx.ForEachRow(rows, []any{&table, &cols}, func() error { p.tables[table] = cols; return nil }); err != nil {
		t.Fatal(err)
	}
	return p, true
}

// checkPublication: V16 publishes the inserts, and only those, into both
// tables, and only their id column; V20 every change of the destinations
// table, whole rows.
func checkPublication(t *testing.T, d *postgres.Dialect, schema string, names dialects.Names) {
	t.Helper()
	pauses, ok := readPublication(t, d.Pool(), names.PausesPublication())
	switch {
	case !ok:
		t.Errorf("no publication %s", names.PausesPublication())
	case !pauses.insert || !pauses.update || !pauses.delete || pauses.truncate:
		t.Errorf("publication %s publishes insert=%v update=%v delete=%v truncate=%v, want inserts, updates and deletes",
			names.PausesPublication(), pauses.insert, pauses.update, pauses.delete, pauses.truncate)
	case len(pauses.tables) != 1 || pauses.tables[schema+"."+names.Object("destinations")] == nil:
		t.Errorf("publication %s publishes %v, want %s.%s alone", names.PausesPublication(), pauses.tables, schema, names.Object("destinations"))
	}
	p, ok := readPublication(t, d.Pool(), names.Publication())
	if !ok {
		t.Fatalf("no publication %s", names.Publication())
	}
	if !p.insert || p.update || p.delete || p.truncate {
		t.Errorf("publication %s publishes insert=%v update=%v delete=%v truncate=%v, want inserts only", names.Publication(), p.insert, p.update, p.delete, p.truncate)
	}
	want := map[string][]string{schema + "." + names.Outbox: {names.Col("id")}, schema + "." + names.Inbox: {names.InboxCol("id")}}
	if len(p.tables) != len(want) {
		t.Errorf("publication %s publishes %v, want %v", names.Publication(), p.tables, want)
	}
	for table, cols := range want {
		if !slices.Equal(p.tables[table], cols) {
			t.Errorf("publication %s publishes %s with columns %v, want %v", names.Publication(), table, p.tables[table], cols)
		}
	}
}

// A publication of the same name that publishes nothing (left by dropped
// tables) is replaced; a migrating role that may not create publications
// gets V16 applied without one (the relay then probes and says why).
func TestV16Publication(t *testing.T) {
	t.Parallel()
	t.Run("left over", func(t *testing.T) {
		t.Parallel()
		d, schema, _ := fresh(t, dialects.DefaultNames())
		names := d.Names()
		ctx := context.Background()
		old := pgx.Identifier{schema, "dropped"}.Sanitize()
		for _, q := range []string{
			`CREATE TABLE ` + old + ` (id int)`,
			`CREATE PUBLICATION ` + pgx.Identifier{names.Publication()}.Sanitize() + ` FOR TABLE ` + old,
			`DROP TABLE ` + old,
		} {
			if _, err := d.Pool().Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := migrations.Up(ctx, d); err != nil {
			t.Fatal(err)
		}
		checkPublication(t, d, schema, names)
	})
	t.Run("no CREATE on the database", func(t *testing.T) {
		// A database of its own, and no schema configured: CREATE SCHEMA
		// IF NOT EXISTS needs CREATE on the database too, so the role
		// migrates into a schema of its own through its search_path.
		t.Parallel()
		dbURL := testdb.Database(t)
		ctx := context.Background()
		admin, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(ctx)
		role := "m_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
		for _, q := range []string{`CREATE ROLE ` + role + ` LOGIN`, `CREATE SCHEMA app AUTHORIZATION ` + role} {
			if _, err := admin.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			if c, err := pgx.Connect(context.Background(), testdb.ServerURL(t)); err == nil {
				_, _ = c.Exec(context.Background(), `DROP ROLE IF EXISTS `+role)
				c.Close(context.Background())
			}
		})
		u, _ := nurl.Parse(testdb.WithParam(dbURL, "search_path", "app"))
		u.User = nurl.User(role)
		d, err := postgres.Open(ctx, postgres.Options{URL: u.String(), Names: dialects.DefaultNames()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := migrations.Up(ctx, d); err != nil {
			d.Close()
			t.Fatalf("a role without CREATE on the database could not migrate: %v", err)
		}
		current, err := migrations.Current(ctx, d)
		d.Close()
		if err != nil || !current {
			t.Fatalf("after migrating: current=%v err=%v", current, err)
		}
		var pubs int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_publication`).Scan(&pubs); err != nil || pubs != 0 {
			t.Fatalf("a role without CREATE on the database created %d publications (%v)", pubs, err)
		}
		// The role owns the objects: drop them before the role.
		if _, err := admin.Exec(ctx, `DROP SCHEMA app CASCADE`); err != nil {
			t.Fatal(err)
		}
	})
}
