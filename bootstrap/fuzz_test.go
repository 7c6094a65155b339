package bootstrap

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// FuzzParse feeds the configuration loader any bytes. It must never panic;
// what it refuses comes back as problems that name a key and a reason; what
// it accepts is complete (every route reaches compiled destinations, each
// once, every table and column name is a plain identifier, every static
// HTTP header can be sent) and prints, as `config check` does, a file that loads back and
// prints the same.
//
// The seeds are every YAML example of the docs and a few broken files; `go
// test` runs them, `make fuzz` fuzzes for a while, and
// `go test ./bootstrap -run '^$' -fuzz FuzzParse -fuzztime 10m` for longer.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../docs/*.md")
	for _, file := range append(files, "../README.md") {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, m := range fenceRE.FindAllSubmatch(b, -1) {
			f.Add(m[1])
		}
	}
	for _, s := range []string{fragmentBase, "", "---\n", "[]", "database: 3", "a: &x [*x]",
		"database:\n  url: ${DB_URL:-postgres://h/db}\nroutes: [{topicPattern: '#', destination: d}]\ndestinations: {d: {type: 'null'}}\n",
		"destinations:\n  d:\n    type: http\n    url: http://h/{{ topic\n",
		"database: {url: 'postgres://h/db', outboxTableName: 'outbox; DROP TABLE users; --'}\n",
		"database: {url: 'postgres://h/db', columnMapping: {outbox: {key: 'key\" text'}}}\n",
		"routes:\n  - topicPattern: 'a.#.*'\n    destination: d\n    transform: '.a | until(. > 3; . + 1)'\n",
		"database: {url: 'postgres://h/db'}\ndestinations: {a: {type: 'null'}, b: {type: 'null'}}\nroutes:\n  - {topicPattern: '#', destinations: [a, b], filter: '.x == 1'}\n  - {topicPattern: '#', destinations: [b]}\n",
		"routes: [{topicPattern: '#', destination: a, destinations: [a, a, ''], filter: '.x =='}]\n",
	} {
		f.Add([]byte(s))
	}
	lookup := env(map[string]string{"DB_PASSWORD": "pw-from-env", "ORDERS_TOKEN": "tok-from-env", "TOKEN": "token-from-env", "WEBHOOK_SECRET": docEnv["WEBHOOK_SECRET"]})
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := Parse("fuzz.yaml", data, lookup)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("an error that is not a list of problems: %T %v", err, err)
			}
			for _, p := range ce.Problems {
				if p.Key == "" || strings.TrimSpace(p.Reason) == "" {
					t.Fatalf("a problem without a key or a reason: %+v", p)
				}
			}
			if msg := err.Error(); strings.Contains(msg, "goroutine ") || strings.Contains(msg, "panic") {
				t.Fatalf("a stack trace in the message: %s", msg)
			}
			return
		}
		if l.Compiled == nil || l.Compiled.Router == nil {
			t.Fatal("accepted without a router")
		}
		for _, r := range l.Compiled.Router.Routes() {
			for _, d := range r.Targets() {
				if l.Compiled.Destinations[d] == nil {
					t.Fatalf("route %q reaches destination %q, which did not compile", r.Name, d)
				}
			}
			if distinct := slices.Compact(slices.Sorted(slices.Values(r.Targets()))); len(r.Destinations) == 1 || len(distinct) != len(r.Targets()) {
				t.Fatalf("route %q: destinations %q (a list of one is a route to one; each at most once)", r.Name, r.Destinations)
			}
		}
		if ps := l.Names().Validate(); len(ps) > 0 {
			t.Fatalf("accepted names that do not validate: %v", ps)
		}
		for name, d := range l.Destinations {
			if d.Type != "http" {
				continue
			}
			for k, v := range d.Headers {
				if !validHeaderName(k) || !validHeaderValue(v) {
					t.Fatalf("destinations.%s.headers: accepted %q: %q, which HTTP cannot send: every delivery would fail and be retried", name, k, v)
				}
			}
		}
		out, err := l.Effective()
		if err != nil {
			t.Fatalf("accepted, but config check cannot print it: %v", err)
		}
		again, err := Parse("printed.yaml", out, lookup)
		if err != nil {
			t.Fatalf("config check's output does not load back: %v\n%s", err, out)
		}
		out2, err := again.Effective()
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("printed twice, the configuration differs (%v):\n%s\n---\n%s", err, out, out2)
		}
	})
}

// validHeaderName is RFC 9110's token: what net/http's client accepts as
// a header name.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue: no control characters but tab (RFC 9110's field-value).
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
