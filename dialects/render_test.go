package dialects_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
)

type twoStatements struct{ OutboxClaim, OutboxComplete string }

// A catalog is filled by name; a statement without a field, or a field
// without a statement, fails when the dialect opens.
func TestLoadCatalogChecksBothWays(t *testing.T) {
	funcs := dialects.TemplateFuncs(dialects.DefaultNames(), postgres.Quoting)
	good := fstest.MapFS{"q.sql": {Data: []byte("-- name: OutboxClaim\nSELECT 1 FROM {{t}}\n-- name: OutboxComplete\nSELECT 2\n")}}
	var c twoStatements
	if err := dialects.LoadCatalog(good, "q.sql", funcs, dialects.ByPosition, &c); err != nil {
		t.Fatal(err)
	}
	if c.OutboxClaim != `SELECT 1 FROM "outbox"` || c.OutboxComplete != "SELECT 2" {
		t.Fatalf("filled %+v", c)
	}
	typo := fstest.MapFS{"q.sql": {Data: []byte("-- name: OutboxClaim\nSELECT 1\n-- name: OutboxCompleet\nSELECT 2\n")}}
	err := dialects.LoadCatalog(typo, "q.sql", funcs, dialects.ByPosition, &twoStatements{})
	if err == nil || !strings.Contains(err.Error(), "OutboxCompleet") || !strings.Contains(err.Error(), "no statement OutboxComplete") {
		t.Fatalf("a misnamed statement: %v", err)
	}
	dup := fstest.MapFS{"q.sql": {Data: []byte("-- name: OutboxClaim\nSELECT 1\n-- name: OutboxClaim\nSELECT 2\n")}}
	if err := dialects.LoadCatalog(dup, "q.sql", funcs, dialects.ByPosition, &twoStatements{}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("a statement named twice: %v", err)
	}
}
