package dialects_test

import (
	"database/sql"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
)

type pageArgs struct {
	Limit int    `param:"limit"`
	Topic string `param:"topic"`
}

type pageCatalog struct {
	Page dialects.Named[pageArgs]
}

// pageSQL names @limit twice and @topic once, and mentions names that are
// no parameters: in a comment, a string, a quoted identifier, a function
// of SQL Server's (@@), an operator of PostgreSQL's (@>) and a variable
// the statement declares.
const pageSQL = "-- name: Page\n" +
	"DECLARE @now INT = 1;\n" +
	"SELECT '@nope', \"@id\", @@ROWCOUNT, @now, x @> y -- @comment\n" +
	"  FROM t WHERE topic = @topic AND n < @limit LIMIT @limit\n"

func loadPage(t *testing.T, b dialects.Binding, text string, catalog any) error {
	t.Helper()
	funcs := dialects.TemplateFuncs(dialects.DefaultNames(), postgres.Quoting)
	return dialects.LoadCatalog(fstest.MapFS{"q.sql": {Data: []byte(text)}}, "q.sql", funcs, b, catalog)
}

// A named statement is rendered once for its driver, and binds its
// arguments' fields by name: by position for pgx, as sql.NamedArg for
// go-mssqldb.
func TestNamedBindsByName(t *testing.T) {
	var c pageCatalog
	if err := loadPage(t, dialects.ByPosition, pageSQL, &c); err != nil {
		t.Fatal(err)
	}
	want := "DECLARE @now INT = 1;\nSELECT '@nope', \"@id\", @@ROWCOUNT, @now, x @> y -- @comment\n  FROM t WHERE topic = $1 AND n < $2 LIMIT $2"
	if c.Page.SQL() != want {
		t.Fatalf("rendered for pgx:\n%s\nwant:\n%s", c.Page.SQL(), want)
	}
	if got := c.Page.Args(pageArgs{Limit: 10, Topic: "t"}); !reflect.DeepEqual(got, []any{"t", 10}) {
		t.Fatalf("pgx arguments %v, want [t 10]", got)
	}
	var s pageCatalog
	if err := loadPage(t, dialects.ByName, pageSQL, &s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Page.SQL(), "topic = @topic AND n < @limit LIMIT @limit") {
		t.Fatalf("rendered for go-mssqldb:\n%s", s.Page.SQL())
	}
	if got := s.Page.Args(pageArgs{Limit: 10, Topic: "t"}); !reflect.DeepEqual(got, []any{sql.Named("topic", "t"), sql.Named("limit", 10)}) {
		t.Fatalf("go-mssqldb arguments %v", got)
	}
}

type embeddedArgs struct {
	pageArgs
	After int64 `param:"after"`
}

// A name missing on either side, a field without a name, and a statement
// that numbers a parameter as well fail when the catalog loads, naming
// what differs.
func TestNamedRefusesArgumentsThatDiffer(t *testing.T) {
	var ok struct{ Page dialects.Named[embeddedArgs] }
	if err := loadPage(t, dialects.ByPosition, pageSQL+"  AND seq > @after\n", &ok); err != nil {
		t.Fatalf("the fields of an embedded struct count: %v", err)
	}
	for what, tc := range map[string]struct {
		sql     string
		catalog any
		want    []string
	}{
		"a parameter without a field": {pageSQL + "  AND seq > @after\n", &pageCatalog{}, []string{"@after", "no field"}},
		"a field without a parameter": {pageSQL, &struct{ Page dialects.Named[embeddedArgs] }{}, []string{"@after", "does not have"}},
		"a field without a name": {pageSQL, &struct {
			Page dialects.Named[struct {
				Limit int `param:"limit"`
				Topic string
			}]
		}{}, []string{"Topic has no param tag", "@topic"}},
		"a numbered parameter too": {pageSQL + "  AND seq > $3\n", &pageCatalog{}, []string{"numbers one too ($3)"}},
	} {
		err := loadPage(t, dialects.ByPosition, tc.sql, tc.catalog)
		if err == nil {
			t.Errorf("%s: loaded", what)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) || !strings.Contains(err.Error(), "statement Page") {
				t.Errorf("%s: %v; want it to name the statement and say %q", what, err, w)
			}
		}
	}
}
