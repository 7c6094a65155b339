package routing

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Fuzz tests of what routing compiles from the configuration and applies to
// every row: patterns, templates, transforms and filters never panic, and
// patterns, templates and the routes' filters do what a plain reference
// implementation does. `go test`
// runs the seeds; `make fuzz` fuzzes each for a while, and
// `go test ./routing -run '^$' -fuzz FuzzPatternMatch -fuzztime 10m` for
// longer.

// refMatch is the reference: split both on dots, "*" is exactly one
// segment, "#" zero or more, by dynamic programming over segments.
func refMatch(pattern, topic string) bool {
	ps, ts := strings.Split(pattern, "."), strings.Split(topic, ".")
	// m[i][j]: ps[i:] matches ts[j:].
	m := make([][]bool, len(ps)+1)
	for i := range m {
		m[i] = make([]bool, len(ts)+1)
	}
	m[len(ps)][len(ts)] = true
	for i := len(ps) - 1; i >= 0; i-- {
		for j := len(ts); j >= 0; j-- {
			switch ps[i] {
			case "#":
				m[i][j] = m[i+1][j] || (j < len(ts) && m[i][j+1])
			case "*":
				m[i][j] = j < len(ts) && m[i+1][j+1]
			default:
				m[i][j] = j < len(ts) && ps[i] == ts[j] && m[i+1][j+1]
			}
		}
	}
	return m[0][0]
}

func FuzzPatternMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"order.created", "order.created"}, {"order.*", "order.line.added"}, {"order.#", "order"}, {"#.created", "created"},
		{"a.*.c", "a..c"}, {"#", ""}, {"*", ""}, {"a.#.b.#.c", "a.x.b.y.b.c"}, {"#.#", "a"}, {"order", "order."},
		{"a.b*", "a.b"}, {"", "x"}, {"a..b", "a..b"}, {"*.*", "."},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, topic string) {
		p, err := CompilePattern(pattern)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without words")
			}
			return
		}
		// Patterns with many "#" take exponential time today: see
		// TestManyHashesMatchInPolynomialTime; keep the fuzzer fast.
		if strings.Count(pattern, "#") > 4 || len(topic) > 200 {
			return
		}
		// An empty topic, and the empty segment after a trailing dot, are
		// matched only by "#" (the reference would let "*" take them):
		// degenerate topics, where QueueBox chose differently from AMQP.
		if topic == "" || strings.HasSuffix(topic, ".") {
			if p.Match(topic) && !refMatch(pattern, topic) {
				t.Fatalf("%q matches the degenerate topic %q, which the reference does not", pattern, topic)
			}
			return
		}
		if got, want := p.Match(topic), refMatch(pattern, topic); got != want {
			t.Fatalf("%q matching %q: %v, want %v", pattern, topic, got, want)
		}
		if p.String() != pattern {
			t.Fatalf("String() = %q", p.String())
		}
	})
}

// A pattern with many "#" segments is matched in polynomial time, as a row's
// topic can be long and every row is matched. Matching backtracks over
// every way to split the topic between the "#"s: with ten of them and a
// topic of 31 segments it took 19 s per row on the reference machine, and
// the claim of every row behind it waits.
func TestManyHashesMatchInPolynomialTime(t *testing.T) {
	p, err := CompilePattern(strings.Repeat("#.", 12) + "zz")
	if err != nil {
		t.Fatal(err)
	}
	topic := strings.Repeat("a.", 40) + "b"
	done := make(chan bool, 1)
	go func() { done <- p.Match(topic) }()
	select {
	case got := <-done:
		if got {
			t.Fatal("matched a topic without zz")
		}
	case <-time.After(20 * time.Second):
		// The reference decides it in microseconds.
		t.Fatalf("matching %q against a topic of 41 segments did not finish in 20 s (the reference says %v at once)", p, refMatch(p.String(), topic))
	}
}

// refRender is the reference rendering: every placeholder replaced by its
// value.
var refPlaceholder = regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}`)

func FuzzTemplate(f *testing.F) {
	for _, s := range []string{"https://h/{{ topic }}", "{{topic}}.{{ key }}", "x", "", "{{", "}}", "{{ nope }}", "{{ headers.X-Tenant }}/{{ id }}",
		"{{ aggregateType }}", "a{{ topic }}b{{topic}}c", "{{ headers. }}", "{{{ topic }}}", "{{ topic }"} {
		f.Add(s, "order.created", "cust-7", "order", "X-Tenant", "acme")
	}
	f.Fuzz(func(t *testing.T, src, topic, key, agg, header, value string) {
		tpl, err := ParseTemplate(src)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without words")
			}
			return
		}
		if tpl.String() != src {
			t.Fatalf("String() = %q, want %q", tpl.String(), src)
		}
		f := &Fields{ID: "0b7e3f4e-8c1a-4d2e-9f3a-1b2c3d4e5f60", Topic: topic, Key: key, AggregateType: &agg, Headers: map[string]string{header: value}}
		got, err := tpl.Render(f, nil)
		missing := false
		want := refPlaceholder.ReplaceAllStringFunc(src, func(m string) string {
			name := refPlaceholder.FindStringSubmatch(m)[1]
			var v string
			switch {
			case name == "topic":
				v = topic
			case name == "key":
				v = key
			case name == "aggregateType":
				v = agg
			case name == "id":
				v = f.ID
			case strings.HasPrefix(name, "headers."):
				v = f.Headers[strings.TrimPrefix(name, "headers.")]
			}
			if v == "" {
				missing = true
			}
			return v
		})
		if missing {
			var me *MissingError
			if err == nil || !errorsAs(err, &me) || me.Column == "" {
				t.Fatalf("%q with an empty value: %q, %v; want a MissingError naming the column", src, got, err)
			}
			return
		}
		if err != nil || got != want {
			t.Fatalf("%q rendered %q (%v), want %q", src, got, err, want)
		}
	})
}

func errorsAs(err error, me **MissingError) bool {
	m, ok := err.(*MissingError)
	if ok {
		*me = m
	}
	return ok
}

// FuzzTransformCompile: any program text compiles or fails with words,
// never a panic. (Running fuzzed programs is not safe: jq has loops.)
func FuzzTransformCompile(f *testing.F) {
	for _, s := range []string{".", "{a: .b}", "$attempt", "[.[] | .x]", "$nope", "{", "def f: f; f", "until(.x == 0; .x -= 1)", `"\(.)"`, "@base64d", "input"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if _, err := CompileTransform(src); err != nil && err.Error() == "" {
			t.Fatal("an error without words")
		}
	})
}

// FuzzTransformRun: a fixed transform over any payload and variables never
// panics, and its output is JSON.
func FuzzTransformRun(f *testing.F) {
	tr, err := CompileTransform(`{id: $id, topic: $topic, key: $key, attempt: $attempt, headers: $headers, body: .}`)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{`{}`, `[1]`, `"x"`, `1e400`, `{"a":`, ``, `null`, `{"a":"\ud800"}`} {
		f.Add([]byte(s), "k", 3, "X-A", "v")
	}
	f.Fuzz(func(t *testing.T, payload []byte, key string, attempt int, hk, hv string) {
		out, err := tr.Run(payload, Vars{Attempt: attempt, ID: "id", Topic: "t", Key: &key, Headers: map[string]string{hk: hv}})
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without words")
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("the output is not JSON: %q", out)
		}
	})
}

// FuzzFilterCompile: any filter text compiles or fails with words, never a
// panic.
func FuzzFilterCompile(f *testing.F) {
	for _, s := range []string{".amount > 100", `$headers["X-Tenant"] == "acme"`, "select(.a)", "$nope", "{", "not", `.a | test("x")`, "empty", "error"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if _, err := CompileFilter(src); err != nil && err.Error() == "" {
			t.Fatal("an error without words")
		}
	})
}

// FuzzMatchRow: routes with filters over any payload and topic never
// panic, and MatchRow (which decodes the payload once for all filters)
// picks what trying each route in order with Filter.Accepts picks: the
// first whose pattern matches and whose filter accepts, or the error of
// the first filter that fails.
func FuzzMatchRow(f *testing.F) {
	r := router(f,
		[3]string{"order.#", `.region == "eu"`, "eu,audit"},
		[3]string{"order.#", `.amount > 100`, "big"},
		[3]string{"*.created", `$key != null and ($headers.tier // "") == "gold"`, "gold"},
		[3]string{"#", `.drop`, "none"},
		[3]string{"#", "", "rest"},
	)
	for _, s := range []string{`{"region":"eu"}`, `{"amount":150}`, `{"amount":"x"}`, `[1]`, `{"drop":true}`, `{"drop":1}`, `{`, ``, `null`, `1e400`} {
		f.Add([]byte(s), "order.created", "k", "gold")
		f.Add([]byte(s), "user.created", "", "")
	}
	f.Fuzz(func(t *testing.T, payload []byte, topic, key, tier string) {
		v := Vars{Topic: topic, Headers: map[string]string{"tier": tier}}
		if key != "" {
			v.Key = &key
		}
		got, err := r.MatchRow(payload, v)
		var want *Route
		var wantErr error
		for i := range r.Routes() {
			rt := &r.Routes()[i]
			if !rt.Pattern.Match(topic) {
				continue
			}
			ok := true
			if rt.Filter != nil {
				if ok, wantErr = rt.Filter.Accepts(payload, v); wantErr != nil {
					wantErr = &FilterError{Route: rt.Name, Err: wantErr}
					break
				}
			}
			if ok {
				want = rt
				break
			}
		}
		switch {
		case (err == nil) != (wantErr == nil):
			t.Fatalf("MatchRow: %v; one route at a time: %v", err, wantErr)
		case err != nil && (err.Error() != wantErr.Error() || got != nil):
			t.Fatalf("MatchRow: %v, %v; one route at a time: %v", got, err, wantErr)
		case got != want:
			t.Fatalf("MatchRow: %+v; one route at a time: %+v", got, want)
		}
	})
}
