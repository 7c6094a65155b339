package dialects

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"sort"
	"strings"
	"text/template"
)

// Quoting is how a database quotes identifiers and string literals.
type Quoting struct {
	// Ident quotes one identifier.
	Ident func(name string) string
	// Literal renders a constant string literal. It is used only for names
	// (a sequence name passed to nextval), never for row values.
	Literal func(s string) string
}

// TemplateFuncs are the functions that SQL templates (queries and migrations)
// use to name tables, columns and objects. Every name is validated by
// Names.Validate before it gets here and quoted on the way out.
//
//	{{t}} {{it}}            the outbox / inbox table, schema-qualified
//	{{c "key"}} {{ic "x"}}  a column of the outbox / inbox table, by logical name
//	{{seq}} {{iseq}}        the outbox / inbox sequence, schema-qualified
//	{{idx "topic"}}         an index name (bare): idx_outbox_topic
//	{{obj "notify"}}        a helper object name (bare): outbox_notify
//	{{q name}}              quote a bare name
//	{{qualify quoted}}      prefix a quoted name with the schema
//	{{lit s}}               a string literal
func TemplateFuncs(n Names, q Quoting) template.FuncMap {
	qualify := func(quoted string) string {
		if n.Schema == "" {
			return quoted
		}
		return q.Ident(n.Schema) + "." + quoted
	}
	return template.FuncMap{
		"t":       func() string { return qualify(q.Ident(n.Outbox)) },
		"it":      func() string { return qualify(q.Ident(n.Inbox)) },
		"c":       func(l string) string { return q.Ident(n.Col(l)) },
		"ic":      func(l string) string { return q.Ident(n.InboxCol(l)) },
		"seq":     func() string { return qualify(q.Ident(n.Sequence())) },
		"iseq":    func() string { return qualify(q.Ident(n.InboxSequence())) },
		"idx":     n.Index,
		"iidx":    n.InboxIndex,
		"obj":     n.Object,
		"iobj":    func(what string) string { return n.Inbox + "_" + what },
		"q":       q.Ident,
		"qualify": qualify,
		"lit":     q.Literal,
		"schema":  func() string { return n.Schema },
	}
}

// Render renders one SQL template.
func Render(name, text string, funcs template.FuncMap) (string, error) {
	tpl, err := template.New(name).Funcs(funcs).Option("missingkey=error").Parse(text)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", name, err)
	}
	var b strings.Builder
	if err := tpl.Execute(&b, nil); err != nil {
		return "", fmt.Errorf("render %s: %w", name, err)
	}
	return b.String(), nil
}

// LoadCatalog reads a file of named statements, each introduced by a line
// "-- name: OutboxClaim", renders every one with funcs, and stores each in
// the string field of the same name of the struct that catalog points to.
// Every field must have a statement and every statement a field: a typo on
// either side fails here, when the dialect opens, not when a statement
// first runs.
func LoadCatalog(fsys fs.FS, file string, funcs template.FuncMap, catalog any) error {
	v := reflect.ValueOf(catalog)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("catalog: want a pointer to a struct, got %T", catalog)
	}
	v = v.Elem()
	stmts, err := loadStatements(fsys, file, funcs)
	if err != nil {
		return err
	}
	var problems []string
	for name := range stmts {
		if f := v.FieldByName(name); !f.IsValid() || f.Kind() != reflect.String {
			problems = append(problems, fmt.Sprintf("%s names statement %s, which %T has no field for", file, name, catalog))
		}
	}
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		sql, ok := stmts[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s has no statement %s", file, name))
			continue
		}
		v.Field(i).SetString(sql)
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

func loadStatements(fsys fs.FS, file string, funcs template.FuncMap) (map[string]string, error) {
	data, err := fs.ReadFile(fsys, file)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	var name string
	var body strings.Builder
	flush := func() error {
		if name == "" {
			return nil
		}
		if _, dup := out[name]; dup {
			return fmt.Errorf("%s names statement %s twice", file, name)
		}
		sql, err := Render(name, body.String(), funcs)
		if err != nil {
			return err
		}
		out[name] = strings.TrimSpace(sql)
		body.Reset()
		return nil
	}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "-- name:"); ok {
			if err := flush(); err != nil {
				return nil, err
			}
			name = strings.TrimSpace(rest)
			continue
		}
		if name != "" {
			body.WriteString(line)
			body.WriteByte('\n')
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// Statements lists a catalog's statements by name (for tests that check
// every statement).
func Statements(catalog any) map[string]string {
	v := reflect.Indirect(reflect.ValueOf(catalog))
	out := make(map[string]string, v.NumField())
	for i := range v.NumField() {
		out[v.Type().Field(i).Name] = v.Field(i).String()
	}
	return out
}
