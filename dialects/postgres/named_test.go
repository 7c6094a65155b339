package postgres_test

import (
	"context"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
)

// The tests that look at the plans of the claims and of the look for
// stragglers prepare them on a session of their own (PREPARE, EXECUTE),
// which binds by position: these helpers give the arguments by name, and
// put them in the order the catalog rendered the statement's names in.

// named is a statement of the catalog that names its parameters.
type named interface {
	SQL() string
	Names() []string
}

// catalog is the catalog for the default names: the order of a
// statement's parameters does not depend on the names (prepare renders
// them for the dialect's own).
var catalog = sync.OnceValue(func() *postgres.Catalog {
	q, err := postgres.Queries(dialects.DefaultNames())
	if err != nil {
		panic(err)
	}
	return q
})

// prepared are the statements the tests prepare, by the name they prepare
// them as.
func prepared(q *postgres.Catalog, name string) named {
	return map[string]named{"claim": &q.OutboxClaim, "claim_by_key": &q.OutboxClaimByKey, "stragglers": &q.OutboxStragglers,
		"complete": &q.OutboxComplete}[name]
}

// paramTypes are the SQL types of the named parameters, for PREPARE.
var paramTypes = map[string]string{
	"limit": "int", "lease_ms": "bigint", "token": "uuid", "heads": "int",
	"settled": "bigint", "open_last": "bigint[]", "open_next": "bigint[]", "writers": "bigint[]",
	"rewinds": "bigint", "lookback_ms": "bigint", "floors": "bigint[]", "position_keys": "text[]", "position_after": "bigint[]",
	"continue_keys": "text[]", "continue_after": "bigint[]", "after": "text", "discover": "bool", "within_ms": "bigint",
	"ids": "uuid[]", "tokens": "uuid[]", "states": "text[]", "attempt_incs": "int[]", "delays_ms": "bigint[]",
	"errors": "text[]", "has_errors": "bool[]",
}

// prepare prepares the statement for the names of d as name on conn.
func prepare(t *testing.T, conn *pgxpool.Conn, d *postgres.Dialect, name string) {
	t.Helper()
	q, err := postgres.Queries(d.Names())
	if err != nil {
		t.Fatal(err)
	}
	s := prepared(q, name)
	types := make([]string, len(s.Names()))
	for i, n := range s.Names() {
		if types[i] = paramTypes[n]; types[i] == "" {
			t.Fatalf("no type for the parameter @%s of %s", n, name)
		}
	}
	if _, err := conn.Exec(context.Background(), `PREPARE `+name+`(`+strings.Join(types, ", ")+`) AS `+s.SQL()); err != nil {
		t.Fatalf("prepare %s: %v", name, err)
	}
}

// sqlArgs are a statement's arguments as SQL expressions, by name.
type sqlArgs map[string]string

// claimArgs are a claim's arguments: 100 rows and heads, a lease of 30 s,
// no gate, no bounds, nothing to continue, and a walk over every key from
// the first; then set.
func claimArgs(set sqlArgs) sqlArgs {
	a := sqlArgs{"limit": "100", "lease_ms": "30000", "token": "gen_random_uuid()", "heads": "100",
		"settled": "NULL", "open_last": "'{}'::bigint[]", "open_next": "'{}'::bigint[]", "writers": "NULL",
		"rewinds": "NULL", "lookback_ms": "NULL", "floors": "NULL", "position_keys": "NULL", "position_after": "NULL",
		"continue_keys": "'{}'::text[]", "continue_after": "'{}'::bigint[]", "after": "''", "discover": "true"}
	for k, v := range set {
		a[k] = v
	}
	return a
}

// call is the call of the statement prepared as name with a: name(...),
// for EXECUTE. Arguments the statement does not have are left out.
func call(t *testing.T, name string, a sqlArgs) string {
	t.Helper()
	s := prepared(catalog(), name)
	vals := make([]string, len(s.Names()))
	for i, n := range s.Names() {
		v, ok := a[n]
		if !ok {
			t.Fatalf("no argument for the parameter @%s of %s", n, name)
		}
		vals[i] = v
	}
	return name + "(" + strings.Join(vals, ", ") + ")"
}

// Every statement that names its parameters is rendered for pgx once, when
// the catalog loads: its names become $1..$n, numbered in the order of
// their first use, each bound from a field of its arguments (the catalog
// refuses to load when a name is missing on either side), and no @name is
// left where the server would read it.
func TestNamedStatementsAreRenderedOnce(t *testing.T) {
	q := catalog()
	v := reflect.ValueOf(q).Elem()
	n := 0
	var visit func(v reflect.Value)
	visit = func(v reflect.Value) {
		for i := range v.NumField() {
			f, sf := v.Field(i), v.Type().Field(i)
			s, ok := f.Addr().Interface().(named)
			if !ok {
				if sf.Anonymous && f.Kind() == reflect.Struct {
					visit(f)
				}
				continue
			}
			n++
			if len(s.Names()) == 0 {
				t.Errorf("%s names no parameter", sf.Name)
			}
			seen := map[string]bool{}
			for _, m := range dollar.FindAllStringSubmatch(s.SQL(), -1) {
				seen[m[1]] = true
			}
			for i := range s.Names() {
				if !seen[strconv.Itoa(i+1)] {
					t.Errorf("%s has %d names but no $%d", sf.Name, len(s.Names()), i+1)
				}
			}
			if len(seen) != len(s.Names()) {
				t.Errorf("%s has %d names and %d numbered parameters", sf.Name, len(s.Names()), len(seen))
			}
			if at := namedParam.FindString(stripComments(s.SQL())); at != "" {
				t.Errorf("%s still has %s outside its comments", sf.Name, at)
			}
		}
	}
	visit(v)
	if n < 10 {
		t.Fatalf("found %d statements that name their parameters, want the claims, completions, operator listings, inserts and the inbox's", n)
	}
}

var (
	dollar     = regexp.MustCompile(`\$(\d+)`)
	namedParam = regexp.MustCompile(`@[a-z_]+`)
	comment    = regexp.MustCompile(`--[^\n]*`)
)

func stripComments(sql string) string { return comment.ReplaceAllString(sql, "") }
