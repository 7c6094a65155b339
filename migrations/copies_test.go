package migrations_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/migrations"
)

// The copies of fan-out routes are a table of their own, named after the
// outbox table, with the outbox's types for what they copy, a primary key
// of their own, one copy per row and destination, and the indexes of the
// claim, the lanes, the leases and retention; the outbox table keeps the
// seed's shape (TestCatalogMatchesSeed). A copy written with the row's
// columns only is pending, due, at attempt 0, and draws the change
// counter.
func TestCopiesTable(t *testing.T) {
	t.Parallel()
	for _, names := range []dialects.Names{
		dialects.DefaultNames(),
		{Outbox: "events_out", Inbox: "events_in", OutboxColumns: map[string]string{"id": "event_id", "key": "message_key", "sequence": "seq_no"}},
	} {
		t.Run(names.Outbox, func(t *testing.T) {
			t.Parallel()
			d, schema := migrated(t, names)
			ctx := context.Background()
			table := names.Outbox + "_copies"
			rows, err := d.Pool().Query(ctx, `
				SELECT a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
				  FROM pg_attribute a
				 WHERE a.attrelid = (quote_ident($1) || '.' || quote_ident($2))::regclass AND a.attnum > 0 AND NOT a.attisdropped
				 ORDER BY a.attnum`, schema, table)
			if err != nil {
				t.Fatalf("the copies table %s.%s: %v", schema, table, err)
			}
			cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			want := []string{
				"id uuid not null", "row_id uuid not null", "destination character varying(255) not null",
				"topic character varying(255) not null", "key character varying(255)", "payload jsonb not null",
				"headers jsonb not null", "aggregate_type character varying(255)", "sequence bigint not null",
				"row_created_at timestamp with time zone not null", "state character varying(50) not null",
				"attempt integer not null", "max_attempts integer not null", "scheduled_at timestamp with time zone not null",
				"created_at timestamp with time zone not null", "updated_at timestamp with time zone not null",
				"claimed_at timestamp with time zone", "claim_token uuid", "lease_expires_at timestamp with time zone",
				"last_error text", "copy_change bigint not null",
			}
			if !slices.Equal(cols, want) {
				t.Errorf("columns of %s:\n got %v\nwant %v", table, cols, want)
			}
			rows, err = d.Pool().Query(ctx, `
				SELECT i.relname || '(' || array_to_string(ARRAY(SELECT a.attname::text FROM unnest(ix.indkey) WITH ORDINALITY AS k(attnum, n)
				              JOIN pg_attribute a ON a.attrelid = ix.indrelid AND a.attnum = k.attnum ORDER BY k.n), ',') || ')'
				       || CASE WHEN ix.indisunique THEN ' unique' ELSE '' END
				       || COALESCE(' where ' || pg_get_expr(ix.indpred, ix.indrelid), '')
				  FROM pg_index ix JOIN pg_class i ON i.oid = ix.indexrelid
				 WHERE ix.indrelid = (quote_ident($1) || '.' || quote_ident($2))::regclass
				 ORDER BY i.relname`, schema, table)
			if err != nil {
				t.Fatal(err)
			}
			idx, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			o := names.Outbox
			wantIdx := []string{
				"idx_" + table + "_lanes(key,destination,sequence) where ((state)::text = ANY ((ARRAY['pending'::character varying, 'processing'::character varying])::text[]))",
				"idx_" + table + "_pending(state,scheduled_at) where ((state)::text = 'pending'::text)",
				"idx_" + table + "_processing(claimed_at) where ((state)::text = 'processing'::text)",
				"idx_" + table + "_updated(state,updated_at)",
				o + "_copies_pkey(id) unique",
				o + "_copies_row_dest(row_id,destination) unique",
			}
			slices.Sort(wantIdx)
			if !slices.Equal(idx, wantIdx) {
				t.Errorf("indexes of %s:\n got %v\nwant %v", table, idx, wantIdx)
			}
			qt := pgx.Identifier{schema, table}.Sanitize()
			var state string
			var attempt, maxAttempts int
			var change1, change2 int64
			insert := `INSERT INTO ` + qt + ` (row_id, destination, topic, payload, "sequence", row_created_at)
				VALUES (gen_random_uuid(), 'b', 't', '{}', 1, now()) RETURNING state, attempt, max_attempts, copy_change`
			if err := d.Pool().QueryRow(ctx, insert).Scan(&state, &attempt, &maxAttempts, &change1); err != nil {
				t.Fatal(err)
			}
			if err := d.Pool().QueryRow(ctx, insert).Scan(&state, &attempt, &maxAttempts, &change2); err != nil {
				t.Fatal(err)
			}
			if state != "pending" || attempt != 0 || maxAttempts != 5 || change2 <= change1 {
				t.Errorf("a copy with its defaults: %s, attempt %d of %d, change %d then %d", state, attempt, maxAttempts, change1, change2)
			}
		})
	}
}

// The SQL Server migration renders for renamed tables, its objects named
// after the outbox table: the change counter's sequence, the table, and
// each index in a batch of its own.
func TestCopiesSQLServerRenders(t *testing.T) {
	ms, err := migrations.Load("sqlserver")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ms, func(m migrations.Migration) bool { return m.Name == "copies" })
	if i < 0 {
		t.Fatal("no sqlserver copies migration")
	}
	q := dialects.Quoting{Ident: func(s string) string { return "[" + s + "]" }, Literal: func(s string) string { return "N'" + s + "'" }}
	batches, err := migrations.Render("sqlserver", q, ms[i], dialects.Names{Schema: "app", Outbox: "events_out", Inbox: "events_in"})
	if err != nil {
		t.Fatal(err)
	}
	if len(batches) != 6 {
		t.Errorf("want 6 batches (sequence, table, four indexes), got %d", len(batches))
	}
	all := strings.Join(batches, "\n")
	for _, want := range []string{
		"CREATE SEQUENCE [app].[events_out_copies_change] AS BIGINT",
		"CREATE TABLE [app].[events_out_copies] (\n" +
			"    id UNIQUEIDENTIFIER NOT NULL CONSTRAINT [events_out_df_copies_id] DEFAULT NEWID(),\n" +
			"    row_id UNIQUEIDENTIFIER NOT NULL,\n" +
			"    destination NVARCHAR(255) NOT NULL,\n" +
			"    topic NVARCHAR(255) NOT NULL,\n" +
			"    [key] NVARCHAR(255) NULL,\n" +
			"    payload NVARCHAR(MAX) NOT NULL,\n" +
			"    headers NVARCHAR(MAX) NOT NULL CONSTRAINT [events_out_df_copies_headers] DEFAULT '{}',\n" +
			"    aggregate_type NVARCHAR(255) NULL,\n" +
			"    [sequence] BIGINT NOT NULL,\n" +
			"    row_created_at DATETIME2 NOT NULL,\n" +
			"    state NVARCHAR(50) NOT NULL CONSTRAINT [events_out_df_copies_state] DEFAULT 'pending',\n" +
			"    attempt INT NOT NULL CONSTRAINT [events_out_df_copies_attempt] DEFAULT 0,\n" +
			"    max_attempts INT NOT NULL CONSTRAINT [events_out_df_copies_max] DEFAULT 5,\n" +
			"    scheduled_at DATETIME2 NOT NULL CONSTRAINT [events_out_df_copies_scheduled] DEFAULT GETUTCDATE(),\n" +
			"    created_at DATETIME2 NOT NULL CONSTRAINT [events_out_df_copies_created] DEFAULT GETUTCDATE(),\n" +
			"    updated_at DATETIME2 NOT NULL CONSTRAINT [events_out_df_copies_updated] DEFAULT GETUTCDATE(),\n" +
			"    claimed_at DATETIME2 NULL,\n" +
			"    claim_token UNIQUEIDENTIFIER NULL,\n" +
			"    lease_expires_at DATETIME2 NULL,\n" +
			"    last_error NVARCHAR(MAX) NULL,\n",
		"copy_change BIGINT NOT NULL CONSTRAINT [events_out_df_copies_change] DEFAULT NEXT VALUE FOR [app].[events_out_copies_change],",
		"CONSTRAINT [events_out_copies_pkey] PRIMARY KEY (id),",
		"CONSTRAINT [events_out_copies_row_dest] UNIQUE (row_id, destination)",
		"CREATE INDEX [idx_events_out_copies_pending] ON [app].[events_out_copies] (state, scheduled_at)\n    WHERE state = 'pending';",
		"CREATE INDEX [idx_events_out_copies_lanes] ON [app].[events_out_copies] ([key], destination, [sequence])\n    WHERE state IN ('pending', 'processing');",
		"CREATE INDEX [idx_events_out_copies_processing] ON [app].[events_out_copies] (claimed_at)\n    WHERE state = 'processing';",
		"CREATE INDEX [idx_events_out_copies_updated] ON [app].[events_out_copies] (state, updated_at);",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("rendered migration lacks %q:\n%s", want, all)
		}
	}
}

// Every name the copies migrations derive from the longest table name the
// configuration accepts fits an identifier.
func TestCopiesNamesFitTheLongestTableName(t *testing.T) {
	names := dialects.Names{Outbox: strings.Repeat("o", 40), Inbox: "inbox"}
	if ps := names.Validate(); len(ps) > 0 {
		t.Fatalf("a 40-character table name: %v", ps)
	}
	for _, dialect := range []string{"postgresql", "sqlserver"} {
		ms, err := migrations.Load(dialect)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(ms, func(m migrations.Migration) bool { return m.Name == "copies" })
		var quoted []string
		q := dialects.Quoting{Ident: func(s string) string { quoted = append(quoted, s); return `"` + s + `"` }, Literal: func(s string) string { return "'" + s + "'" }}
		if _, err := migrations.Render(dialect, q, ms[i], names); err != nil {
			t.Fatal(err)
		}
		for _, n := range quoted {
			if len(n) > dialects.MaxIdentifierLength {
				t.Errorf("%s: %q is %d characters long", dialect, n, len(n))
			}
		}
	}
}
