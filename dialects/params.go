package dialects

import (
	"database/sql"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Binding is how a database's driver binds the parameters that a catalog's
// statements name (@limit).
type Binding uint8

const (
	// ByPosition renders each name as $1, $2, ... in the order the names
	// first appear, once, when the catalog loads, and the values go in that
	// order: pgx binds by position, and its own named arguments would scan
	// the statement again on every call.
	ByPosition Binding = iota
	// ByName leaves the names as written, and the values go as
	// sql.NamedArg: go-mssqldb declares them to the server by name.
	ByName
)

// ParamTag is the struct tag that names a statement's parameter on the Go
// side (see Named).
const ParamTag = "param"

// Named is a statement whose parameters its .sql file names (@limit), and
// T the struct of its arguments: one field per parameter, tagged with the
// parameter's name (`param:"limit"`). The fields of embedded structs count,
// so that statements that share a fragment share its struct. When the
// catalog loads, LoadCatalog checks that T and the statement name the same
// parameters, so that a name missing or extra on either side fails when the
// dialect opens rather than when the statement first runs (or, on
// PostgreSQL, binds a value to the wrong parameter), and renders the
// statement for its dialect's Binding, once.
//
// Outside comments, string literals and quoted identifiers, a parameter is
// @ followed by a letter or _ and then letters, digits and _. @@name (SQL
// Server's functions) is none, nor is a variable that the statement
// declares itself (DECLARE @name, one variable per DECLARE), nor an @ that
// is an operator (PostgreSQL's @>, <@). A statement that names its
// parameters does not number any ($1).
type Named[T any] struct {
	sql     string
	names   []string
	fields  [][]int
	binding Binding
}

// SQL is the statement as its driver runs it.
func (n *Named[T]) SQL() string { return n.sql }

// Names are the statement's parameters, in the order ByPosition binds them.
func (n *Named[T]) Names() []string { return n.names }

// Args are the values of a as the driver binds them: in the statement's
// order (ByPosition), or each as an sql.NamedArg (ByName).
func (n *Named[T]) Args(a T) []any {
	v := reflect.ValueOf(a)
	out := make([]any, len(n.fields))
	for i, f := range n.fields {
		x := v.FieldByIndex(f).Interface()
		if n.binding == ByName {
			x = sql.Named(n.names[i], x)
		}
		out[i] = x
	}
	return out
}

// load takes the statement's rendered text.
func (n *Named[T]) load(text string, b Binding) error {
	render := func(name string, _ int) string { return "@" + name }
	if b == ByPosition {
		render = func(_ string, i int) string { return "$" + strconv.Itoa(i) }
	}
	out, names, numbered := scanParams(text, b, render)
	if numbered != "" {
		return fmt.Errorf("names its parameters and numbers one too (%s): bind every parameter by name", numbered)
	}
	fields, err := paramFields(reflect.TypeFor[T](), names)
	if err != nil {
		return err
	}
	n.sql, n.names, n.fields, n.binding = out, names, fields, b
	return nil
}

// namedStatement is a catalog field of type Named.
type namedStatement interface {
	load(text string, b Binding) error
	SQL() string
}

// paramFields finds, for each name, the field of t tagged with it, and
// says which names t lacks and which of its fields the names lack.
func paramFields(t reflect.Type, names []string) ([][]int, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("its arguments are a %s, want a struct with a field per parameter", t)
	}
	tagged := map[string][]int{}
	var problems []string
	for _, f := range reflect.VisibleFields(t) {
		if f.Anonymous {
			if f.Type.Kind() != reflect.Struct {
				problems = append(problems, fmt.Sprintf("%s.%s is embedded but not a struct (a pointer could be nil)", t, f.Name))
			}
			continue
		}
		name, ok := f.Tag.Lookup(ParamTag)
		switch {
		case !ok || name == "":
			problems = append(problems, fmt.Sprintf("%s.%s has no %s tag", t, f.Name, ParamTag))
		case tagged[name] != nil:
			problems = append(problems, fmt.Sprintf("%s names the parameter @%s twice", t, name))
		default:
			tagged[name] = f.Index
		}
	}
	fields := make([][]int, len(names))
	for i, name := range names {
		idx, ok := tagged[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("the statement has the parameter @%s, which %s has no field for", name, t))
			continue
		}
		fields[i] = idx
		delete(tagged, name)
	}
	for name := range tagged {
		problems = append(problems, fmt.Sprintf("%s has a field for @%s, which the statement does not have", t, name))
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, fmt.Errorf("its parameters and its arguments differ: %s", strings.Join(problems, "; "))
	}
	return fields, nil
}

// scanParams finds the parameters that text names, outside comments,
// string literals and quoted identifiers (and, for ByName, SQL Server's
// [bracketed] ones), and returns the text with each replaced by render of
// its name and its position (from 1, in the order the names first appear),
// the names in that order, and the first numbered parameter ($1) it met,
// if any.
func scanParams(text string, b Binding, render func(name string, n int) string) (out string, names []string, numbered string) {
	var sb strings.Builder
	declared := map[string]bool{}
	pos := map[string]int{}
	lastWord := ""
	ident := func(c byte) bool {
		return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	skipTo := func(i int, end string) int {
		j := strings.Index(text[i:], end)
		if j < 0 {
			return len(text)
		}
		return i + j + len(end)
	}
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case strings.HasPrefix(text[i:], "--"):
			j := skipTo(i, "\n")
			sb.WriteString(text[i:j])
			i = j
		case strings.HasPrefix(text[i:], "/*"):
			j := skipTo(i+2, "*/")
			sb.WriteString(text[i:j])
			i = j
		case c == '\'' || c == '"' || c == '[' && b == ByName:
			end := string(c)
			if c == '[' {
				end = "]"
			}
			j := skipTo(i+1, end)
			sb.WriteString(text[i:j])
			i = j
		case c == '@' && i+1 < len(text) && text[i+1] == '@':
			j := i + 2
			for j < len(text) && ident(text[j]) {
				j++
			}
			sb.WriteString(text[i:j])
			i = j
		case c == '@' && i+1 < len(text) && (text[i+1] == '_' || text[i+1] >= 'a' && text[i+1] <= 'z' || text[i+1] >= 'A' && text[i+1] <= 'Z') && (i == 0 || !ident(text[i-1])):
			j := i + 1
			for j < len(text) && ident(text[j]) {
				j++
			}
			name := text[i+1 : j]
			if strings.EqualFold(lastWord, "DECLARE") {
				declared[name] = true
			}
			if declared[name] {
				sb.WriteString(text[i:j])
			} else {
				if pos[name] == 0 {
					names = append(names, name)
					pos[name] = len(names)
				}
				sb.WriteString(render(name, pos[name]))
			}
			lastWord = ""
			i = j
		case c == '$' && i+1 < len(text) && text[i+1] >= '0' && text[i+1] <= '9' && (i == 0 || !ident(text[i-1])):
			j := i + 1
			for j < len(text) && text[j] >= '0' && text[j] <= '9' {
				j++
			}
			if numbered == "" {
				numbered = text[i:j]
			}
			sb.WriteString(text[i:j])
			i = j
		case ident(c):
			j := i
			for j < len(text) && ident(text[j]) {
				j++
			}
			lastWord = text[i:j]
			sb.WriteString(lastWord)
			i = j
		default:
			if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				lastWord = ""
			}
			sb.WriteByte(c)
			i++
		}
	}
	// A variable declared after its first use (which T-SQL refuses) is
	// still no parameter.
	names = slices.DeleteFunc(names, func(n string) bool { return declared[n] })
	return sb.String(), names, numbered
}
