package bootstrap

import (
	"encoding"
	"fmt"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Effective is the configuration as `config check` prints it: every key
// that applies, with its effective value (defaults filled in), as YAML that
// loads back with the same environment.
//
//   - A destination or inbox source lists only the keys of its type, and
//     only those that are set (or have a default for the type).
//   - A value that came from environment variables and holds a secret is
//     printed as written ("Bearer ${ORDERS_TOKEN}"): that names where the
//     secret comes from without showing it, and loads back.
//   - A key replaced whole by an environment variable (database.url by
//     QUEUEBOX_DATABASE_URL) is printed as that variable's ${NAME}.
//   - Any other secret is printed as [REDACTED]; the password of a URL as
//     %5BREDACTED%5D, so that the URL is still a URL.
func (l *Loaded) Effective() ([]byte, error) {
	p := &printer{secrets: l.Secrets, raw: l.raw, fromEnv: l.fromEnv}
	top := p.node(reflect.ValueOf(l.Config).Elem(), "", "", false)
	if l.ManyOutboxes() {
		// Each outbox has its database block; the top level's would only
		// show the defaults, and a file with both does not load.
		for i := 0; i+1 < len(top.Content); i += 2 {
			if top.Content[i].Value == "database" {
				top.Content = append(top.Content[:i], top.Content[i+2:]...)
				break
			}
		}
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{top}}
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

type printer struct {
	secrets *Secrets
	raw     map[string]string
	fromEnv map[string]string
}

var textMarshaler = reflect.TypeOf((*encoding.TextMarshaler)(nil)).Elem()

// node prints v at path. kind is the type of the enclosing destination or
// source ("" elsewhere): keys tagged for other kinds are left out. sparse
// leaves out zero values, for entries where an unset key means "none".
func (p *printer) node(v reflect.Value, path, kind string, sparse bool) *yaml.Node {
	if v.Type().Implements(textMarshaler) {
		b, _ := v.Interface().(encoding.TextMarshaler).MarshalText()
		return p.str(path, string(b))
	}
	switch v.Kind() {
	case reflect.Pointer:
		return p.node(v.Elem(), path, kind, sparse)
	case reflect.Struct:
		m := &yaml.Node{Kind: yaml.MappingNode}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			name := strings.Split(f.Tag.Get("yaml"), ",")[0]
			if name == "" || name == "-" {
				continue
			}
			if kinds, ok := f.Tag.Lookup("kinds"); ok && kind != "" && !oneOf(kind, strings.Split(kinds, ",")...) {
				continue
			}
			fv := v.Field(i)
			if (sparse || strings.Contains(f.Tag.Get("yaml"), ",omitempty")) && fv.IsZero() {
				continue
			}
			m.Content = append(m.Content, scalar(name), p.node(fv, join(path, name), kind, sparse))
		}
		if len(m.Content) == 0 {
			m.Style = yaml.FlowStyle
		}
		return m
	case reflect.Map:
		m := &yaml.Node{Kind: yaml.MappingNode}
		keys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			keys = append(keys, k.String())
		}
		sort.Strings(keys)
		for _, k := range keys {
			ev := v.MapIndex(reflect.ValueOf(k))
			entryKind, entrySparse := kind, sparse
			// Destinations and sources: their type decides their keys.
			if ev.Kind() == reflect.Pointer && ev.Elem().Kind() == reflect.Struct {
				if t := ev.Elem().FieldByName("Type"); t.IsValid() {
					entryKind, entrySparse = t.String(), true
				}
			}
			m.Content = append(m.Content, scalar(k), p.node(ev, join(path, k), entryKind, entrySparse))
		}
		if len(m.Content) == 0 {
			m.Style = yaml.FlowStyle
		}
		return m
	case reflect.Slice:
		s := &yaml.Node{Kind: yaml.SequenceNode}
		for i := range v.Len() {
			ev := v.Index(i)
			// Routes: an unset optional key (transform) is left out.
			s.Content = append(s.Content, p.node(ev, fmt.Sprintf("%s[%d]", path, i), kind, sparse || ev.Kind() == reflect.Struct))
		}
		if len(s.Content) == 0 || v.Type().Elem().Kind() != reflect.Struct {
			s.Style = yaml.FlowStyle
		}
		return s
	case reflect.String:
		return p.str(path, v.String())
	case reflect.Bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v.Bool())}
	case reflect.Int, reflect.Int64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(v.Int(), 10)}
	case reflect.Float64:
		f := strconv.FormatFloat(v.Float(), 'f', -1, 64)
		if !strings.Contains(f, ".") {
			f += ".0" // 2.0, not 2: read back as a float without a tag
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: f}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
}

func scalar(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// str prints a text value without its secrets.
func (p *printer) str(path, s string) *yaml.Node {
	if name, ok := p.fromEnv[path]; ok {
		// A key the environment replaced whole (QUEUEBOX_DATABASE_URL):
		// its reference loads back to the same value with the variable
		// set, where a redacted copy would load with a made-up password.
		return scalar("${" + name + "}")
	}
	isURL := path == "database.url" || strings.HasSuffix(path, ".url")
	if raw, ok := p.raw[path]; ok && p.secrets.Redact(s) != s {
		s = raw
	}
	s = p.secrets.Redact(s)
	if isURL {
		// Last, so that a password already printed as %5BREDACTED%5D
		// (and redacted above as a secret) prints the same again.
		s = redactURLPassword(s)
	}
	return scalar(s)
}

// redactURLPassword replaces the password of a URL with [REDACTED],
// escaped so that the URL still parses. A password written as ${NAME}
// stays: it shows no secret.
func redactURLPassword(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return s
	}
	user, pass, ok := strings.Cut(rest[:at], ":")
	if !ok || pass == "" || strings.Contains(pass, "${") {
		return s
	}
	return scheme + "://" + user + ":" + url.PathEscape(Redacted) + rest[at:]
}
