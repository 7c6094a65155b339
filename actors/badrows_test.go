package actors_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrecv"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
	nullsink "github.com/queuebox/queuebox/sinks/null"
)

// The catalogue of rows that can never be delivered. Each goes dead at its
// first delivery (attempt 0, no retry) with a last_error that says what is
// wrong in the producer's words, and the row after it in its key is
// delivered: a dead row holds nothing back.
//
// Payloads that are not JSON at all, or empty, exist only where the column
// is text (SQL Server); PostgreSQL's jsonb refuses them at insert. That
// path is covered without a database by FuzzRowOverHTTP and
// FuzzCheckPayload (typed = false).

type badRow struct {
	name    string
	row     dialects.NewRow
	lastErr []string // what last_error must say
}

func badRowRoutes(t *testing.T, h *harness, hookURL string) {
	tpl := func(pattern, dest string) routing.Route { return route(pattern, dest) }
	h.opts.Router = routing.NewRouter([]routing.Route{
		tpl("agg.#", "by-aggregate"),
		tpl("keyed.#", "by-key"),
		tpl("ghost.#", "ghost"), // no such destination at run time
		tpl("order.#", "hook"),
		tpl("next.#", "null"),
	})
	h.opts.Destinations = map[string]actors.SinkFactory{
		"by-aggregate": httpDest(t, hookURL+"/{{ aggregateType }}", nil),
		"by-key":       httpDest(t, hookURL+"/k/{{ key }}", nil),
		"hook":         httpDest(t, hookURL+"/x", nil),
		"null":         func() (sinks.Sink, error) { return nullsink.New(), nil },
	}
}

// runBadRows inserts each row, with a good row after it in the same key,
// runs the engine until they are all dead or delivered, and returns the
// bad rows' state, attempt and last_error.
type rowEnd struct {
	state   string
	attempt int
	lastErr string
}

func runBadRows(t *testing.T, cases []badRow, hookURL string) map[string]rowEnd {
	h := newHarness(t)
	badRowRoutes(t, h, hookURL)
	ids := map[string]uuid.UUID{}
	var all []dialects.NewRow
	for i, c := range cases {
		id := uuid.New()
		ids[c.name] = id
		r := c.row
		r.ID = &id
		if r.Key == nil {
			r.Key = str("bad-" + strings.ReplaceAll(c.name, " ", "-"))
		}
		next := testkit.Row("next.row", testkit.Key(*r.Key), testkit.Payload(fmt.Sprintf(`{"after":%d}`, i)))
		all = append(all, r, next)
	}
	h.insert(all...)
	h.start()
	h.waitState(dialects.Delivered, int64(len(cases)), time.Minute)
	tbl := pgx.Identifier{h.d.Names().Schema, "outbox"}.Sanitize()
	out := map[string]rowEnd{}
	for _, c := range cases {
		// The end of the row; a row that never ends is reported by
		// checkBadRows with the state it was left in.
		_ = testkit.Poll(time.Minute, func() error {
			var e rowEnd
			if err := h.d.Pool().QueryRow(context.Background(), `SELECT state, attempt, coalesce(last_error, '') FROM `+tbl+` WHERE id = $1`, ids[c.name]).
				Scan(&e.state, &e.attempt, &e.lastErr); err != nil {
				t.Fatal(err)
			}
			out[c.name] = e
			if e.state != "dead" && e.state != "delivered" {
				return fmt.Errorf("%s is %s", c.name, e.state)
			}
			return nil
		})
	}
	return out
}

func checkBadRows(t *testing.T, cases []badRow, got map[string]rowEnd) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := got[c.name]
			if g.state != "dead" || g.attempt != 0 {
				t.Fatalf("state %s, attempt %d, last_error %q; want dead at the first delivery (attempt 0)", g.state, g.attempt, g.lastErr)
			}
			for _, w := range c.lastErr {
				if !strings.Contains(g.lastErr, w) {
					t.Errorf("last_error %q does not say %q", g.lastErr, w)
				}
			}
		})
	}
}

func TestBadRowsGoDeadWithAClearReason(t *testing.T) {
	t.Parallel()
	recv := testrecv.New(t, nil)
	cases := []badRow{
		{"no route", testkit.Row("nowhere.to.go"), []string{`no route matches topic "nowhere.to.go"`}},
		{"a JSON string of JSON", testkit.Row("order.created", testkit.Payload(`"{\"orderId\":7}"`)), []string{"a JSON string that holds JSON text", "encoded twice"}},
		{"a JSON string", testkit.Row("order.created", testkit.Payload(`"hello"`)), []string{"is a JSON string", "object or array"}},
		{"a number", testkit.Row("order.created", testkit.Payload(`42`)), []string{"is a JSON number", "object or array"}},
		{"null", testkit.Row("order.created", testkit.Payload(`null`)), []string{"is JSON null"}},
		{"a boolean", testkit.Row("order.created", testkit.Payload(`true`)), []string{"is a JSON boolean"}},
		{"headers a list", testkit.Row("order.created", testkit.Headers(`["X-A"]`)), []string{"headers must be a JSON object of string values, got an array"}},
		{"headers a string", testkit.Row("order.created", testkit.Headers(`"X-A: b"`)), []string{"headers must be a JSON object of string values, got a string"}},
		{"a header that is a number", testkit.Row("order.created", testkit.Headers(`{"X-Count": 3}`)), []string{`"X-Count" is a number`}},
		{"a header that is an object", testkit.Row("order.created", testkit.Headers(`{"X-Meta": {"a": "b"}}`)), []string{`"X-Meta" is an object`}},
		{"a header with a line break", testkit.Row("order.created", testkit.Headers(`{"X-A": "one\ntwo"}`)), []string{`"X-A" is not a valid header`}},
		{"a header name with a colon", testkit.Row("order.created", testkit.Headers(`{"X-A:": "v"}`)), []string{"is not a valid header"}},
		{"an address needing a null aggregate_type", testkit.Row("agg.created"), []string{"{{ aggregateType }}", "aggregate_type is null or empty"}},
		{"an address needing the key of an unkeyed row", testkit.Row("keyed.created", testkit.Key("")), []string{"{{ key }}", "key is null or empty"}},
		{"a destination that does not exist at run time", testkit.Row("ghost.created"), []string{`sends to destination "ghost", which does not exist`}},
	}
	checkBadRows(t, cases, runBadRows(t, cases, recv.URL))
	if n := len(recv.Requests()); n != 0 {
		t.Errorf("the receiver got %d requests; every row sent there should have gone dead before", n)
	}
}

// Over HTTP, a row whose key, topic or headers hold characters HTTP cannot
// carry (a control character in a value, a name that is not an HTTP
// token) can never be delivered: the client refuses to send it. It must go
// dead at once naming the header, not be retried until max_attempts while
// it holds back its key.
func TestRowsHTTPCannotCarryGoDeadAtOnce(t *testing.T) {
	t.Parallel()
	recv := testrecv.New(t, nil)
	cases := []badRow{
		{"a key with a control character", testkit.Row("order.created", testkit.Key("cust\x01-7")), []string{"X-Key"}},
		{"a key with a line break", testkit.Row("order.created", testkit.Key("cust\n7")), []string{"X-Key"}},
		{"a topic with a control character", testkit.Row("order.created\x7f"), []string{"X-Topic"}},
		{"a header value with a control character", testkit.Row("order.created", testkit.Headers(`{"X-A": "a\u0001b"}`)), []string{"X-A"}},
		{"a header name that is not a token", testkit.Row("order.created", testkit.Headers(`{"X-(A)": "v"}`)), []string{"X-(A)"}},
	}
	checkBadRows(t, cases, runBadRows(t, cases, recv.URL))
}
