package dialects

import (
	"bufio"
	"fmt"
	"io/fs"
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

// LoadQueries reads a file of named queries, each introduced by a line
// "-- name: OutboxClaim", and renders every one with funcs.
func LoadQueries(fsys fs.FS, file string, funcs template.FuncMap) (map[string]string, error) {
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
