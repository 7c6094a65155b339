package routing

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestTemplateRender(t *testing.T) {
	agg := "order"
	f := &Fields{ID: "id-1", Topic: "order.created", Key: "cust 42", AggregateType: &agg, Headers: map[string]string{"X-Tenant": "acme"}}
	tpl, err := ParseTemplate("https://h/{{topic}}/{{ key }}?t={{ headers.X-Tenant }}&a={{aggregateType}}&id={{ id }}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpl.Render(f, func(i int, v string) (string, error) {
		if strings.Contains(tpl.PrefixOf(i), "?") {
			return url.QueryEscape(v), nil
		}
		return url.PathEscape(v), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "https://h/order.created/cust%2042?t=acme&a=order&id=id-1"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	f.AggregateType = nil
	_, err = tpl.Render(f, nil)
	var me *MissingError
	if !errors.As(err, &me) || !strings.Contains(err.Error(), "aggregate_type is null") {
		t.Errorf("a null aggregate_type: %v", err)
	}
}

func TestTemplateErrors(t *testing.T) {
	for _, bad := range []string{"{{ nope }}", "x/{{ topic", "{{ headers. }}"} {
		if _, err := ParseTemplate(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestTransform(t *testing.T) {
	tr, err := CompileTransform(`{order: .orderId, amount, attempt: $attempt, topic: $topic, tenant: $headers["X-Tenant"]}`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := tr.Run([]byte(`{"orderId":"o1","amount":9.5}`), Vars{Attempt: 2, Topic: "order.created", Headers: map[string]string{"X-Tenant": "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `{"amount":9.5,"attempt":2,"order":"o1","tenant":"acme","topic":"order.created"}` {
		t.Errorf("got %s", out)
	}
	multi, _ := CompileTransform(`.[]`)
	if _, err := multi.Run([]byte(`[1,2]`), Vars{}); err == nil || !strings.Contains(err.Error(), "more than one") {
		t.Errorf("two outputs: %v", err)
	}
	if _, err := multi.Run([]byte(`[]`), Vars{}); err == nil || !strings.Contains(err.Error(), "no value") {
		t.Errorf("no output: %v", err)
	}
	if _, err := CompileTransform(`{a: $nope}`); err == nil {
		t.Error("an unknown variable compiled")
	}
	if _, err := CompileTransform(`{a: `); err == nil {
		t.Error("a broken program compiled")
	}
}

// router compiles routes given as pattern, filter ("" none) and
// destinations, named r0, r1, ... in order.
func router(t testing.TB, specs ...[3]string) *Router {
	t.Helper()
	var routes []Route
	for i, s := range specs {
		p, err := CompilePattern(s[0])
		if err != nil {
			t.Fatal(err)
		}
		rt := Route{Name: fmt.Sprintf("r%d", i), Pattern: p}
		if s[1] != "" {
			if rt.Filter, err = CompileFilter(s[1]); err != nil {
				t.Fatal(err)
			}
		}
		dests := strings.Split(s[2], ",")
		rt.Destination = dests[0]
		if len(dests) > 1 {
			rt.Destinations = dests
		}
		routes = append(routes, rt)
	}
	return NewRouter(routes)
}

// A filter's first output decides: true matches, false and null fall
// through to the next route, anything else stops the search with an error
// that names the route and the filter.
func TestMatchRowFilters(t *testing.T) {
	for _, c := range []struct {
		name, filter, payload string
		want                  string // the route's name, "" none
		err                   string // a part of the error
	}{
		{name: "true", filter: ".amount > 100", payload: `{"amount": 150}`, want: "r0"},
		{name: "false falls through", filter: ".amount > 100", payload: `{"amount": 50}`, want: "r1"},
		{name: "null falls through", filter: ".refund", payload: `{"amount": 50}`, want: "r1"},
		{name: "the first output decides", filter: ".[] | . == 1", payload: `[1, 2]`, want: "r0"},
		{name: "a runtime error", filter: ".amount > 100", payload: `[1]`, err: `route "r0": filter ".amount > 100" failed: expected an object`},
		{name: "a number", filter: ".amount", payload: `{"amount": 50}`, err: `filter ".amount" produced 50, not true or false`},
		{name: "an object", filter: "select(.amount > 1)", payload: `{"amount": 50}`, err: `produced {"amount":50}, not true or false; end it with a test`},
		{name: "no output", filter: "select(.amount > 100)", payload: `{"amount": 50}`, err: `produced no value; a filter must yield true or false`},
		{name: "a long value is cut", filter: ".s", payload: `{"s": "` + strings.Repeat("x", 200) + `"}`, err: `xxx..., not true or false`},
		{name: "a payload that is not JSON", filter: "true", payload: `{`, err: `route "r0": filter: the payload is not JSON`},
		{name: "error() stops the search", filter: `error("no")`, payload: `{}`, err: `failed: error: no`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := router(t, [3]string{"order.#", c.filter, "hook"}, [3]string{"#", "", "queue"})
			got, err := r.MatchRow([]byte(c.payload), Vars{Topic: "order.created"})
			if c.err != "" {
				var fe *FilterError
				if !errors.As(err, &fe) || fe.Route != "r0" || !strings.Contains(err.Error(), c.err) || got != nil {
					t.Fatalf("got %v, %v; want a FilterError of r0 saying %q", got, err, c.err)
				}
				return
			}
			if err != nil || got == nil || got.Name != c.want {
				t.Fatalf("got %+v, %v; want %s", got, err, c.want)
			}
		})
	}
}

// Routes are tried in order; a filter that refuses the row passes it on to
// the next route that matches its topic, a route whose pattern does not
// match is skipped without running its filter, and no match is nil
// without an error.
func TestMatchRowFirstMatchWins(t *testing.T) {
	r := router(t,
		[3]string{"user.#", "error(\"never run\")", "users"},
		[3]string{"order.#", `.region == "eu"`, "eu"},
		[3]string{"order.#", `.region == "us"`, "us"},
		[3]string{"order.paid", "", "paid"},
		[3]string{"order.#", "", "rest"},
	)
	for _, c := range []struct{ topic, payload, want string }{
		{"order.created", `{"region": "eu"}`, "r1"},
		{"order.created", `{"region": "us"}`, "r2"},
		{"order.paid", `{"region": "ap"}`, "r3"},
		{"order.created", `{"region": "ap"}`, "r4"},
		{"order.created", `{}`, "r4"},
	} {
		got, err := r.MatchRow([]byte(c.payload), Vars{Topic: c.topic})
		if err != nil || got == nil || got.Name != c.want {
			t.Errorf("%s %s: got %+v, %v; want %s", c.topic, c.payload, got, err, c.want)
		}
	}
	if got, err := r.MatchRow([]byte(`{}`), Vars{Topic: "invoice.sent"}); got != nil || err != nil {
		t.Errorf("a topic no route matches: %+v, %v", got, err)
	}
	// Without a payload at hand, Match looks at the pattern alone.
	if got := r.Match("order.created"); got == nil || got.Name != "r1" {
		t.Errorf("Match: %+v", got)
	}
	if !r.Filters() || r.FanOut() {
		t.Errorf("Filters %v, FanOut %v", r.Filters(), r.FanOut())
	}
}

// The candidates of a topic are its pattern's routes up to the first
// without a filter; MatchRowTo finds, among the routes that send to a
// destination, the one a row took: a copy's route.
func TestCandidatesAndTheRouteToADestination(t *testing.T) {
	r := router(t,
		[3]string{"order.#", `.region == "eu"`, "eu,audit"},
		[3]string{"order.#", `.region == "us"`, "us,audit"},
		[3]string{"order.paid", "", "paid"},
		[3]string{"order.#", "", "rest"},
		[3]string{"user.#", "", "users"},
	)
	names := func(rs []*Route) string {
		var out []string
		for _, rt := range rs {
			out = append(out, rt.Name)
		}
		return strings.Join(out, ",")
	}
	for topic, want := range map[string]string{"order.created": "r0,r1,r3", "order.paid": "r0,r1,r2", "user.x": "r4", "invoice.sent": ""} {
		if got := names(r.Candidates(topic)); got != want {
			t.Errorf("Candidates(%s) = %s, want %s", topic, got, want)
		}
	}
	for _, c := range []struct{ payload, dest, want string }{
		{`{"region": "eu"}`, "audit", "r0"},
		{`{"region": "us"}`, "audit", "r1"},
		{`{"region": "us"}`, "us", "r1"},
		{`{"region": "ap"}`, "audit", ""}, // no route sends it there today
		{`{"region": "ap"}`, "rest", "r3"},
		{`{"region": "eu"}`, "users", ""},
	} {
		got, err := r.MatchRowTo([]byte(c.payload), Vars{Topic: "order.created"}, c.dest)
		if err != nil || (got == nil) != (c.want == "") || got != nil && got.Name != c.want {
			t.Errorf("MatchRowTo(%s, %s) = %+v, %v; want %q", c.payload, c.dest, got, err, c.want)
		}
	}
	// order.paid's own route, without a filter, takes every row the two
	// before turn down: the catch-all behind it is never reached.
	if got, err := r.MatchRowTo([]byte(`{"region": "ap"}`), Vars{Topic: "order.paid"}, "rest"); got != nil || err != nil {
		t.Errorf("MatchRowTo past an unfiltered route: %+v, %v; want none", got, err)
	}
	if got, _ := r.MatchRowTo([]byte(`{"region": "eu"}`), Vars{Topic: "order.paid"}, "audit"); got == nil || got.Name != "r0" {
		t.Errorf("MatchRowTo before the unfiltered route: %+v", got)
	}
	if _, err := r.MatchRowTo([]byte(`[1]`), Vars{Topic: "order.created"}, "audit"); err == nil {
		t.Error("a filter that fails on the row: no error")
	}
}

// A filter reads every variable a transform reads, with the row's values.
func TestFilterVariables(t *testing.T) {
	key, agg := "cust-42", "order"
	v := Vars{Attempt: 3, ID: "id-1", Topic: "order.created", Key: &key, AggregateType: &agg, Sequence: 7,
		CreatedAt: "2025-03-01T12:00:00Z", Headers: map[string]string{"X-Tenant": "acme"}}
	for _, src := range []string{
		`$topic == "order.created"`, `$key == "cust-42"`, `$headers["X-Tenant"] == "acme"`, `$headers.missing == null`,
		`$id == "id-1"`, `$attempt == 3`, `$aggregateType == "order"`, `$sequence == 7`,
		`$createdAt | startswith("2025-03-01T12")`, `.n == 1 and $topic != .topic`,
	} {
		f, err := CompileFilter(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if ok, err := f.Accepts([]byte(`{"n": 1, "topic": "x"}`), v); !ok || err != nil {
			t.Errorf("%s: %v, %v", src, ok, err)
		}
		if f.String() != src {
			t.Errorf("String() = %q", f.String())
		}
	}
	// An unkeyed row: $key and $aggregateType are null.
	f, _ := CompileFilter(`$key == null and $aggregateType == null`)
	if ok, err := f.Accepts([]byte(`{}`), Vars{}); !ok || err != nil {
		t.Errorf("an unkeyed row: %v, %v", ok, err)
	}
	for _, bad := range []string{`$row == 1`, `.a ==`, `{`} {
		if _, err := CompileFilter(bad); err == nil || !strings.Contains(err.Error(), "the jq filter") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// A fan-out route sends each row to each of its destinations, in order; a
// route to one destination to that one.
func TestFanOutTargets(t *testing.T) {
	r := router(t, [3]string{"order.#", "", "hook,queue,audit"}, [3]string{"#", "", "rest"})
	fan, one := &r.Routes()[0], &r.Routes()[1]
	if !fan.FanOut() || !slices.Equal(fan.Targets(), []string{"hook", "queue", "audit"}) || fan.Destination != "hook" {
		t.Errorf("the fan-out route: FanOut %v, Targets %v, Destination %q", fan.FanOut(), fan.Targets(), fan.Destination)
	}
	if one.FanOut() || !slices.Equal(one.Targets(), []string{"rest"}) {
		t.Errorf("the route to one: FanOut %v, Targets %v", one.FanOut(), one.Targets())
	}
	for _, d := range []string{"hook", "queue", "audit"} {
		if !fan.Sends(d) || one.Sends(d) {
			t.Errorf("Sends(%s): %v, %v", d, fan.Sends(d), one.Sends(d))
		}
	}
	if !one.Sends("rest") || fan.Sends("rest") || fan.Sends("") {
		t.Error("Sends of the route to one")
	}
	// A list of one is a route to one destination.
	single := Route{Destination: "hook", Destinations: []string{"hook"}}
	if single.FanOut() || !slices.Equal(single.Targets(), []string{"hook"}) {
		t.Errorf("a list of one: FanOut %v, Targets %v", single.FanOut(), single.Targets())
	}
	if !r.FanOut() || r.Filters() {
		t.Errorf("the router: FanOut %v, Filters %v", r.FanOut(), r.Filters())
	}
	if plain := router(t, [3]string{"#", "", "rest"}); plain.FanOut() || plain.Filters() {
		t.Error("a router of one plain route says it fans out or filters")
	}
}
