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

// Quoting is how a database quotes identifiers and string literals, and
// how its driver binds the parameters that statements name.
type Quoting struct {
	// Ident quotes one identifier.
	Ident func(name string) string
	// Literal renders a constant string literal. It is used only for names
	// (a sequence name passed to nextval), never for row values.
	Literal func(s string) string
	// Binding is how the driver binds named parameters (see Named).
	Binding Binding
}

// TemplateFuncs are the functions that SQL templates (queries and migrations)
// use to name tables, columns and objects. Every name is validated by
// Names.Validate before it gets here and quoted on the way out.
//
//	{{t}} {{it}}            the outbox / inbox table, schema-qualified
//	{{c "key"}} {{ic "x"}}  a column of the outbox / inbox table, by logical name
//	{{seq}} {{iseq}}        the outbox / inbox sequence, schema-qualified
//	{{rewinds}}             the outbox's rewind counter (a one-row table), schema-qualified
//	{{copies}} {{copyseq}}  the copies table of fan-out routes and its change counter, schema-qualified
//	{{idx "topic"}}         an index name (bare): idx_outbox_topic
//	{{obj "xid_first"}}     a helper object name (bare): outbox_xid_first
//	{{pub}}                 the wake-ups publication's name (bare; Names.Publication)
//	{{pausepub}}            the pauses publication's name (bare; Names.PausesPublication)
//	{{q name}}              quote a bare name
//	{{qualify quoted}}      prefix a quoted name with the schema
//	{{lit s}}               a string literal
//	{{list a b}}            a list, to hand a fragment several values as its dot
func TemplateFuncs(n Names, q Quoting) template.FuncMap {
	qualify := func(quoted string) string {
		if n.Schema == "" {
			return quoted
		}
		return q.Ident(n.Schema) + "." + quoted
	}
	return template.FuncMap{
		"t":        func() string { return qualify(q.Ident(n.Outbox)) },
		"it":       func() string { return qualify(q.Ident(n.Inbox)) },
		"c":        func(l string) string { return q.Ident(n.Col(l)) },
		"ic":       func(l string) string { return q.Ident(n.InboxCol(l)) },
		"seq":      func() string { return qualify(q.Ident(n.Sequence())) },
		"iseq":     func() string { return qualify(q.Ident(n.InboxSequence())) },
		"rewinds":  func() string { return qualify(q.Ident(n.Object("rewinds"))) },
		"copies":   func() string { return qualify(q.Ident(n.Object("copies"))) },
		"copyseq":  func() string { return qualify(q.Ident(n.Object("copies_change"))) },
		"idx":      n.Index,
		"iidx":     n.InboxIndex,
		"obj":      n.Object,
		"pub":      n.Publication,
		"pausepub": n.PausesPublication,
		"iobj":     func(what string) string { return n.Inbox + "_" + what },
		"q":        q.Ident,
		"qualify":  qualify,
		"lit":      q.Literal,
		"schema":   func() string { return n.Schema },
		"list":     func(v ...string) []string { return v },
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

// Catalog validates names, then renders the statements of file for them
// with q into catalog (see LoadCatalog).
func Catalog(names Names, q Quoting, fsys fs.FS, file string, catalog any) error {
	if ps := names.Validate(); len(ps) > 0 {
		return fmt.Errorf("%s: %s", ps[0].Key, ps[0].Reason)
	}
	return LoadCatalog(fsys, file, TemplateFuncs(names, q), q.Binding, catalog)
}

// LoadCatalog reads a file of named statements, each introduced by a line
// "-- name: OutboxClaim", renders every one with funcs, and stores each in
// the field of the same name of the struct that catalog points to: a
// string, whose parameters the statement numbers ($1, @p1) and the caller
// binds in that order, or a Named, whose parameters the statement names
// and b binds (see Named). Every field must have a statement and every
// statement a field, and a Named field's arguments must name the
// statement's parameters: a typo on either side fails here, when the
// dialect opens, not when a statement first runs.
func LoadCatalog(fsys fs.FS, file string, funcs template.FuncMap, b Binding, catalog any) error {
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
	fields := statementFields(v)
	for name := range stmts {
		if _, ok := fields[name]; !ok {
			problems = append(problems, fmt.Sprintf("%s names statement %s, which %T has no field for", file, name, catalog))
		}
	}
	for name, f := range fields {
		sql, ok := stmts[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s has no statement %s", file, name))
			continue
		}
		if n, ok := named(f); ok {
			if err := n.load(sql, b); err != nil {
				problems = append(problems, fmt.Sprintf("%s: statement %s %v", file, name, err))
			}
			continue
		}
		f.SetString(sql)
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// loadStatements reads the statements of file. A section introduced by
// "-- fragment: name" is not a statement: it is a piece of SQL that
// statements include with {{template "name"}} (the filter that every
// operator statement shares, for one).
func loadStatements(fsys fs.FS, file string, funcs template.FuncMap) (map[string]string, error) {
	data, err := fs.ReadFile(fsys, file)
	if err != nil {
		return nil, err
	}
	type section struct {
		name     string
		fragment bool
		body     strings.Builder
	}
	var sections []*section
	var cur *section
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		line := sc.Text()
		t := strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(t, "-- name:"); ok {
			cur = &section{name: strings.TrimSpace(rest)}
			sections = append(sections, cur)
			continue
		}
		if rest, ok := strings.CutPrefix(t, "-- fragment:"); ok {
			cur = &section{name: strings.TrimSpace(rest), fragment: true}
			sections = append(sections, cur)
			continue
		}
		// A fragment's comments stay in the file: they would land in the
		// middle of every statement that includes it.
		if cur != nil && !(cur.fragment && strings.HasPrefix(t, "--")) {
			cur.body.WriteString(line)
			cur.body.WriteByte('\n')
		}
	}
	var defines strings.Builder
	for _, sec := range sections {
		if sec.fragment {
			fmt.Fprintf(&defines, "{{define %q}}%s{{end}}", sec.name, strings.TrimRight(sec.body.String(), "\n"))
		}
	}
	out := map[string]string{}
	for _, sec := range sections {
		if sec.fragment {
			continue
		}
		if _, dup := out[sec.name]; dup {
			return nil, fmt.Errorf("%s names statement %s twice", file, sec.name)
		}
		sql, err := Render(sec.name, defines.String()+sec.body.String(), funcs)
		if err != nil {
			return nil, err
		}
		out[sec.name] = strings.TrimSpace(sql)
	}
	return out, nil
}

// statementFields returns the statement fields of a struct (strings and
// Named) by name, those of embedded structs (such as HistoryStatements)
// included.
func statementFields(v reflect.Value) map[string]reflect.Value {
	out := map[string]reflect.Value{}
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		if _, ok := named(f); ok {
			out[sf.Name] = f
			continue
		}
		switch {
		case sf.Anonymous && f.Kind() == reflect.Struct:
			for n, g := range statementFields(f) {
				out[n] = g
			}
		case f.Kind() == reflect.String:
			out[sf.Name] = f
		}
	}
	return out
}

// named is f as a Named statement, if it is one.
func named(f reflect.Value) (namedStatement, bool) {
	if !f.CanAddr() {
		return nil, false
	}
	n, ok := f.Addr().Interface().(namedStatement)
	return n, ok
}

// Statements lists a catalog's statements by name, as their driver runs
// them (for tests that check every statement).
func Statements(catalog any) map[string]string {
	out := map[string]string{}
	for n, f := range statementFields(reflect.Indirect(reflect.ValueOf(catalog))) {
		if s, ok := named(f); ok {
			out[n] = s.SQL()
			continue
		}
		out[n] = f.String()
	}
	return out
}

// Numbered lists the statements of a catalog whose parameters are numbered
// ($1, @p1: bound in that order), by name; the rest name theirs (Named).
func Numbered(catalog any) map[string]string {
	out := map[string]string{}
	for n, f := range statementFields(reflect.Indirect(reflect.ValueOf(catalog))) {
		if _, ok := named(f); !ok {
			out[n] = f.String()
		}
	}
	return out
}
