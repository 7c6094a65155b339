package routing

import (
	"fmt"
	"regexp"
	"strings"
)

// Fields are the row values an address template can read.
type Fields struct {
	ID            string
	Topic         string
	Key           string // "" when null or empty
	AggregateType *string
	Headers       map[string]string
}

// Template is a compiled address template: literal text with {{ name }}
// placeholders.
type Template struct {
	src   string
	parts []part
}

type part struct {
	literal string
	name    string // "" for a literal part
	header  string // for headers.NAME
}

var placeholderRE = regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}`)

// TemplateNames lists the names a template may use.
const TemplateNames = "topic, key, aggregateType, id and headers.NAME"

// ParseTemplate compiles a template. An unknown name is an error.
func ParseTemplate(s string) (*Template, error) {
	t := &Template{src: s}
	last := 0
	for _, m := range placeholderRE.FindAllStringSubmatchIndex(s, -1) {
		if m[0] > last {
			t.parts = append(t.parts, part{literal: s[last:m[0]]})
		}
		name := s[m[2]:m[3]]
		p := part{name: name}
		switch {
		case name == "topic", name == "key", name == "aggregateType", name == "id":
		case strings.HasPrefix(name, "headers.") && len(name) > len("headers."):
			p.name, p.header = "headers", name[len("headers."):]
		default:
			return nil, fmt.Errorf("%q: unknown placeholder {{ %s }}; the names are %s", s, name, TemplateNames)
		}
		t.parts = append(t.parts, p)
		last = m[1]
	}
	if last < len(s) {
		t.parts = append(t.parts, part{literal: s[last:]})
	}
	rest := placeholderRE.ReplaceAllString(s, "")
	if strings.Contains(rest, "{{") || strings.Contains(rest, "}}") {
		return nil, fmt.Errorf("%q has an unclosed placeholder; write {{ name }}", s)
	}
	return t, nil
}

// String returns the template's source.
func (t *Template) String() string { return t.src }

// MissingError says that a placeholder has no value on a row. Such a row can
// never be delivered.
type MissingError struct {
	Template, Name, Column string
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("the address template %q needs {{ %s }}, but %s is null or empty on this row", e.Template, e.Name, e.Column)
}

// Render fills the placeholders from f. Each value passes through escape
// (nil keeps it as it is), which may reject it. A null or missing value is a
// *MissingError.
func (t *Template) Render(f *Fields, escape func(partIndex int, value string) (string, error)) (string, error) {
	if len(t.parts) == 1 && t.parts[0].name == "" {
		return t.parts[0].literal, nil
	}
	var b strings.Builder
	for i, p := range t.parts {
		if p.name == "" {
			b.WriteString(p.literal)
			continue
		}
		var v string
		var ok bool
		switch p.name {
		case "topic":
			v, ok = f.Topic, f.Topic != ""
		case "key":
			v, ok = f.Key, f.Key != ""
		case "id":
			v, ok = f.ID, true
		case "aggregateType":
			if f.AggregateType != nil {
				v, ok = *f.AggregateType, *f.AggregateType != ""
			}
		case "headers":
			v, ok = f.Headers[p.header]
			ok = ok && v != ""
		}
		if !ok {
			name, col := p.name, p.name
			switch p.name {
			case "aggregateType":
				col = "aggregate_type"
			case "headers":
				name, col = "headers."+p.header, fmt.Sprintf("the header %q", p.header)
			}
			return "", &MissingError{Template: t.src, Name: name, Column: col}
		}
		if escape != nil {
			var err error
			if v, err = escape(i, v); err != nil {
				return "", err
			}
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

// PrefixOf returns the literal text before part i, for escapers that depend
// on where a value lands (path or query of a URL).
func (t *Template) PrefixOf(i int) string {
	var b strings.Builder
	for _, p := range t.parts[:i] {
		b.WriteString(p.literal)
	}
	return b.String()
}
