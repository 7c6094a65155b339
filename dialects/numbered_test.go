package dialects_test

import (
	"regexp"
	"testing"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/dialects/sqlserver"
)

// numbered matches a numbered parameter of either dialect: $1 (PostgreSQL)
// or @p1 (go-mssqldb's positional arguments).
var numbered = regexp.MustCompile(`\$(\d+)|@p(\d+)\b`)

// maxNumbered is the most parameters a statement may bind by position:
// beyond that, a parameter added or moved on one side only is too easy to
// miss, and the statement names them instead (dialects.Named).
const maxNumbered = 6

// No statement of either dialect binds more than maxNumbered parameters
// by position.
func TestNoStatementBindsManyParametersByPosition(t *testing.T) {
	pq, err := postgres.Queries(dialects.DefaultNames())
	if err != nil {
		t.Fatal(err)
	}
	sq, err := sqlserver.Queries(dialects.DefaultNames())
	if err != nil {
		t.Fatal(err)
	}
	for dialect, catalog := range map[string]any{"postgresql": pq, "sqlserver": sq} {
		all, byPosition := dialects.Statements(catalog), dialects.Numbered(catalog)
		if len(all) == len(byPosition) {
			t.Errorf("%s: no statement names its parameters", dialect)
		}
		for name, text := range byPosition {
			seen := map[string]bool{}
			for _, m := range numbered.FindAllStringSubmatch(text, -1) {
				seen[m[1]+m[2]] = true
			}
			if len(seen) > maxNumbered {
				t.Errorf("%s %s binds %d parameters by position, at most %d may be: name them (@name) and bind them with dialects.Named", dialect, name, len(seen), maxNumbered)
			}
		}
	}
}
