package migrations_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/migrations"
)

// The attempt history is a table of its own, named after the outbox table,
// with an index for one row's attempts and one for retention; the outbox
// table keeps the seed's shape (TestCatalogMatchesSeed). An attempt written
// without its marks is no probe and counted, and marks no replay and no
// delivery a replay set back.
func TestAttemptsTable(t *testing.T) {
	t.Parallel()
	for _, names := range []dialects.Names{
		dialects.DefaultNames(),
		{Outbox: "events_out", Inbox: "events_in", OutboxColumns: map[string]string{"id": "event_id"}},
	} {
		t.Run(names.Outbox, func(t *testing.T) {
			t.Parallel()
			d, schema := migrated(t, names)
			ctx := context.Background()
			table := names.Outbox + "_attempts"
			rows, err := d.Pool().Query(ctx, `
				SELECT a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
				  FROM pg_attribute a
				 WHERE a.attrelid = (quote_ident($1) || '.' || quote_ident($2))::regclass AND a.attnum > 0 AND NOT a.attisdropped
				 ORDER BY a.attnum`, schema, table)
			if err != nil {
				t.Fatalf("the attempts table %s.%s: %v", schema, table, err)
			}
			cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			want := []string{
				"row_id uuid not null", "attempted_at timestamp with time zone not null", "duration_us bigint not null",
				"try integer not null", "outcome character varying(20) not null", "destination character varying(255)",
				"status character varying(255)", "error text", "response text",
				"probe boolean not null", "counted boolean not null", "replayed_by character varying(255)",
				"row_delivered_try integer", "row_delivered_at timestamp with time zone",
			}
			if !slices.Equal(cols, want) {
				t.Errorf("columns of %s:\n got %v\nwant %v", table, cols, want)
			}
			qt := pgx.Identifier{schema, table}.Sanitize()
			var probe, counted bool
			var by *string
			var deliveredTry *int
			var deliveredAt *time.Time
			if err := d.Pool().QueryRow(ctx, `INSERT INTO `+qt+` (row_id, attempted_at, duration_us, try, outcome)
				VALUES (gen_random_uuid(), now(), 1, 1, 'delivered') RETURNING probe, counted, replayed_by, row_delivered_try, row_delivered_at`).
				Scan(&probe, &counted, &by, &deliveredTry, &deliveredAt); err != nil {
				t.Fatal(err)
			}
			if probe || !counted || by != nil || deliveredTry != nil || deliveredAt != nil {
				t.Errorf("an attempt without its marks: probe %v, counted %v, replayed by %v, delivered at try %v at %v", probe, counted, by, deliveredTry, deliveredAt)
			}
			rows, err = d.Pool().Query(ctx, `
				SELECT i.relname || '(' || array_to_string(ARRAY(SELECT a.attname::text FROM unnest(ix.indkey) WITH ORDINALITY AS k(attnum, n)
				              JOIN pg_attribute a ON a.attrelid = ix.indrelid AND a.attnum = k.attnum ORDER BY k.n), ',') || ')'
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
			wantIdx := []string{"idx_" + table + "_at(attempted_at)", "idx_" + table + "_row(row_id,attempted_at)"}
			if !slices.Equal(idx, wantIdx) {
				t.Errorf("indexes of %s: got %v, want %v", table, idx, wantIdx)
			}
		})
	}
}

// The SQL Server migration renders for renamed tables, its objects named
// after the outbox table.
func TestAttemptsSQLServerRenders(t *testing.T) {
	ms, err := migrations.Load("sqlserver")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ms, func(m migrations.Migration) bool { return m.Name == "attempts" })
	if i < 0 {
		t.Fatal("no sqlserver attempts migration")
	}
	q := dialects.Quoting{Ident: func(s string) string { return "[" + s + "]" }, Literal: func(s string) string { return "N'" + s + "'" }}
	batches, err := migrations.Render("sqlserver", q, ms[i], dialects.Names{Schema: "app", Outbox: "events_out", Inbox: "events_in"})
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(batches, "\n")
	if len(batches) != 3 {
		t.Errorf("want 3 batches (table, two indexes), got %d", len(batches))
	}
	for _, want := range []string{"CREATE TABLE [app].[events_out_attempts]", "[idx_events_out_attempts_row] ON [app].[events_out_attempts] (row_id, attempted_at)", "PRIMARY KEY CLUSTERED (n)"} {
		if !strings.Contains(all, want) {
			t.Errorf("rendered migration lacks %q:\n%s", want, all)
		}
	}
}

// The SQL Server migration of the attempt marks renders for renamed tables:
// its default constraints are named after the outbox table, and an attempt
// written without the marks is no probe and counted.
func TestAttemptMarksSQLServerRenders(t *testing.T) {
	ms, err := migrations.Load("sqlserver")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ms, func(m migrations.Migration) bool { return m.Name == "attempt_marks" })
	if i < 0 {
		t.Fatal("no sqlserver attempt_marks migration")
	}
	q := dialects.Quoting{Ident: func(s string) string { return "[" + s + "]" }, Literal: func(s string) string { return "N'" + s + "'" }}
	batches, err := migrations.Render("sqlserver", q, ms[i], dialects.Names{Schema: "app", Outbox: "events_out", Inbox: "events_in"})
	if err != nil {
		t.Fatal(err)
	}
	if len(batches) != 1 {
		t.Fatalf("want 1 batch, got %d", len(batches))
	}
	for _, want := range []string{
		"ALTER TABLE [app].[events_out_attempts] ADD",
		"probe BIT NOT NULL CONSTRAINT [events_out_df_attempts_probe] DEFAULT 0,",
		"counted BIT NOT NULL CONSTRAINT [events_out_df_attempts_counted] DEFAULT 1,",
		"replayed_by NVARCHAR(255) NULL;",
	} {
		if !strings.Contains(batches[0], want) {
			t.Errorf("rendered migration lacks %q:\n%s", want, batches[0])
		}
	}
}

// The SQL Server migration that lets a replay keep a row's delivery
// renders for renamed tables: two nullable columns, no default.
func TestReplayedDeliverySQLServerRenders(t *testing.T) {
	ms, err := migrations.Load("sqlserver")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ms, func(m migrations.Migration) bool { return m.Name == "replayed_delivery" })
	if i < 0 {
		t.Fatal("no sqlserver replayed_delivery migration")
	}
	q := dialects.Quoting{Ident: func(s string) string { return "[" + s + "]" }, Literal: func(s string) string { return "N'" + s + "'" }}
	batches, err := migrations.Render("sqlserver", q, ms[i], dialects.Names{Schema: "app", Outbox: "events_out", Inbox: "events_in"})
	if err != nil {
		t.Fatal(err)
	}
	if len(batches) != 1 {
		t.Fatalf("want 1 batch, got %d", len(batches))
	}
	for _, want := range []string{
		"ALTER TABLE [app].[events_out_attempts] ADD",
		"row_delivered_try INT NULL,",
		"row_delivered_at DATETIME2 NULL;",
	} {
		if !strings.Contains(batches[0], want) {
			t.Errorf("rendered migration lacks %q:\n%s", want, batches[0])
		}
	}
}
