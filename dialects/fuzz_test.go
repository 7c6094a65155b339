package dialects_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/dialects/sqlserver"
	"github.com/queuebox/queuebox/migrations"
)

var plainName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// FuzzNames: any schema, table names and column mapping either fail
// validation, with the key and a reason, or are plain identifiers for
// which every statement and migration of both dialects renders, each name
// appearing quoted. `go test` runs the seeds; `make fuzz` fuzzes for a
// while, `go test ./dialects -run '^$' -fuzz FuzzNames -fuzztime 10m`
// for longer.
func FuzzNames(f *testing.F) {
	f.Add("", "outbox", "inbox", "key", "message_key", "source", "src")
	f.Add("app", "events", "received", "payload", "body", "payload", "body")
	for _, v := range injections {
		f.Add(v, "outbox", "inbox", "key", v, "id", "id")
		f.Add("", v, "inbox", "key", "key", "id", "id")
	}
	f.Add("s", "Outbox", "OUTBOX", "topic", "key", "id", "id")
	f.Add("s", "t", "u", "topic", "KEY", "id", "ID")
	f.Fuzz(func(t *testing.T, schema, outbox, inbox, outCol, outPhys, inCol, inPhys string) {
		n := dialects.Names{Schema: schema, Outbox: outbox, Inbox: inbox,
			OutboxColumns: map[string]string{outCol: outPhys}, InboxColumns: map[string]string{inCol: inPhys}}
		ps := n.Validate()
		if len(ps) > 0 {
			for _, p := range ps {
				if !strings.HasPrefix(p.Key, "database.") || p.Reason == "" {
					t.Fatalf("a problem without a key or a reason: %+v", p)
				}
			}
			if _, err := postgres.Queries(n); err == nil {
				t.Fatalf("rendered statements for names that do not validate: %v", ps)
			}
			return
		}
		for _, name := range []string{outbox, inbox, outPhys, inPhys} {
			if !plainName.MatchString(name) || len(name) > dialects.MaxIdentifierLength {
				t.Fatalf("accepted %q", name)
			}
		}
		if schema != "" && !plainName.MatchString(schema) {
			t.Fatalf("accepted the schema %q", schema)
		}
		pq, err := postgres.Queries(n)
		if err != nil {
			t.Fatalf("PostgreSQL: %v", err)
		}
		if !strings.Contains(pq.OutboxClaim.SQL(), `"`+outbox+`"`) {
			t.Fatalf("the claim does not name the table quoted:\n%s", pq.OutboxClaim.SQL())
		}
		sq, err := sqlserver.Queries(n)
		if err != nil {
			t.Fatalf("SQL Server: %v", err)
		}
		if !strings.Contains(sq.OutboxClaim.SQL(), "["+outbox+"]") {
			t.Fatalf("the claim does not name the table quoted:\n%s", sq.OutboxClaim.SQL())
		}
		for dialect, q := range map[string]dialects.Quoting{"postgresql": postgres.Quoting, "sqlserver": sqlserver.Quoting} {
			ms, err := migrations.Load(dialect)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range ms {
				if _, err := migrations.Render(dialect, q, m, n); err != nil {
					t.Fatalf("%s migration %v: %v", dialect, m, err)
				}
			}
		}
	})
}
