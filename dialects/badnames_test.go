package dialects_test

import (
	"strings"
	"testing"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/dialects/sqlserver"
)

// Names end up inside SQL text (quoted, since identifiers cannot be bound
// as parameters), so validation is what stands between a configuration
// file and SQL injection. Each attempt below, in every place a name can be
// given, is refused by validation with the key it came from, and no
// statement is rendered for it.

var injections = []string{
	`outbox; DROP TABLE users; --`,
	`outbox"; DROP TABLE users; --`,
	`outbox]; DROP TABLE users; --`,
	`o'utbox`,
	`outbox--`,
	`outbox/*x*/`,
	`"outbox"`,
	`[outbox]`,
	"outbox\x00",
	"outbox\n",
	"outbox\r\nDROP",
	`public.outbox`,
	`outbox)`,
	`out box`,
	`ｏｕｔｂｏｘ`, // full-width letters
	`outbox$1`,
	`1outbox`,
	`outbox\`,
	`outbox%`,
	`$$outbox$$`,
}

func TestInjectionInNamesIsRefused(t *testing.T) {
	places := map[string]func(n *dialects.Names, v string){
		"database.schema":          func(n *dialects.Names, v string) { n.Schema = v },
		"database.outboxTableName": func(n *dialects.Names, v string) { n.Outbox = v },
		"database.inboxTableName":  func(n *dialects.Names, v string) { n.Inbox = v },
		"database.columnMapping.outbox.key": func(n *dialects.Names, v string) {
			n.OutboxColumns = map[string]string{"key": v}
		},
		"database.columnMapping.outbox.payload": func(n *dialects.Names, v string) {
			n.OutboxColumns = map[string]string{"payload": v}
		},
		"database.columnMapping.inbox.message_id": func(n *dialects.Names, v string) {
			n.InboxColumns = map[string]string{"message_id": v}
		},
	}
	for key, set := range places {
		for _, v := range injections {
			t.Run(key+"="+v, func(t *testing.T) {
				n := dialects.DefaultNames()
				set(&n, v)
				ps := n.Validate()
				found := false
				for _, p := range ps {
					if p.Key == key && strings.Contains(p.Reason, "is not a valid identifier: use letters, digits and underscores") {
						found = true
					}
				}
				if !found {
					t.Fatalf("%q at %s: problems %v", v, key, ps)
				}
				if _, err := postgres.Queries(n); err == nil {
					t.Fatal("PostgreSQL statements were rendered for it")
				}
				if _, err := sqlserver.Queries(n); err == nil {
					t.Fatal("SQL Server statements were rendered for it")
				}
			})
		}
	}
}

// A mapping key that is not a column is refused too: it would otherwise be
// a way to smuggle a name past the list of columns.
func TestMappingOfAnUnknownColumnIsRefused(t *testing.T) {
	n := dialects.DefaultNames()
	n.OutboxColumns = map[string]string{"key; DROP TABLE x": "k"}
	ps := n.Validate()
	if len(ps) == 0 || !strings.Contains(ps[0].Reason, "is not a column of the table") {
		t.Fatalf("%v", ps)
	}
}
