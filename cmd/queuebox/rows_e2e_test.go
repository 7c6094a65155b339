package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/admin"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// A row that failed once (HTTP 500) and then succeeded: `rows show` lists
// both attempts, in text and JSON, as the relay's /api/rows/{id} does; a
// malformed id is a usage error, an unknown one says so.
func TestRowsShowListsBothAttempts(t *testing.T) {
	t.Parallel()
	recv := testrecv.New(t, func(r *testrecv.Request) (int, string, map[string]string) {
		if r.Attempt == 0 {
			return 500, "temporarily broken", nil
		}
		return 200, `{"received":true}`, nil
	})
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
outbox: { pollIntervalMs: 100, backoff: { initialMs: 50, maxMs: 200 } }
destinations:
  hook: { type: http, url: "%s/hook" }
routes:
  - { topicPattern: "#", destination: hook }
admin: { listen: "127.0.0.1:0" }
`, dbURL, recv.URL))
	if _, stderr, code := run(t, "migrate", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	d := openPostgres(t, dbURL)
	row := testkit.Row("order.created", testkit.Key("cust-1"))
	row.Payload = []byte(`{"order":42}`)
	if err := d.OutboxInsert(context.Background(), []dialects.NewRow{row}); err != nil {
		t.Fatal(err)
	}
	listed, _, err := dialects.List(context.Background(), d, dialects.Filter{States: dialects.States}, nil, 1)
	if err != nil || len(listed) != 1 {
		t.Fatalf("list: %v %v", listed, err)
	}
	id := listed[0].ID.String()

	r := startRelay(t, "--config", cfg)
	page := r.pageURL(t)
	var out string
	testkit.Eventually(t, "the row delivered", time.Minute, func() error {
		o, stderr, code := run(t, "rows", "show", id, "--config", cfg)
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, stderr)
		}
		if !strings.Contains(o, "state           delivered") {
			return fmt.Errorf("not delivered yet:\n%s", o)
		}
		out = o
		return nil
	})
	for _, want := range []string{
		"topic           order.created", "destination     hook (route #)", "state           delivered, try 2 of 6",
		"payload:\n  {\n    \"order\": 42\n  }", "attempts (2):",
		"retry      hook         HTTP 500 Internal Server Error\n       error: HTTP 500 Internal Server Error: temporarily broken\n       response: temporarily broken\n",
		"delivered  hook         HTTP 200 OK\n       response: {\"received\":true}\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rows show lacks %q:\n%s", want, out)
		}
	}

	jsonOut, stderr, code := run(t, "rows", "show", id, "--json", "--config", cfg)
	if code != 0 {
		t.Fatalf("rows show --json: exit %d %s", code, stderr)
	}
	code, body := httpGet(t, page+"api/rows/"+id, "")
	if code != 200 {
		t.Fatalf("GET /api/rows/%s: %d %s", id, code, body)
	}
	for src, text := range map[string]string{"rows show --json": jsonOut, "/api/rows/{id}": body} {
		var v admin.RowDetailView
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			t.Fatalf("%s: %v\n%s", src, err, text)
		}
		if len(v.Attempts) != 2 || v.Attempts[0].Status != "HTTP 500 Internal Server Error" || v.Attempts[0].Outcome != "retry" ||
			v.Attempts[1].Status != "HTTP 200 OK" || v.Attempts[1].Outcome != "delivered" || v.Attempts[1].Try != 2 || v.State != "delivered" {
			t.Errorf("%s: %+v", src, v)
		}
		if v.Attempts[0].DurationMs == nil || *v.Attempts[0].DurationMs <= 0 || !v.Attempts[1].At.After(v.Attempts[0].At) {
			t.Errorf("%s: times %+v", src, v.Attempts)
		}
	}
	r.stop(t)

	if _, stderr, code := run(t, "rows", "show", "nope", "--config", cfg); code != 2 || !strings.Contains(stderr, `ID "nope": is not a row id`) {
		t.Errorf("a malformed id: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := run(t, "rows", "show", "0b7e3f4e-5c1d-4a8e-9f3b-2d6c7e8f9a0b", "--config", cfg); code != 1 || !strings.Contains(stderr, "no row has the id 0b7e3f4e-5c1d-4a8e-9f3b-2d6c7e8f9a0b") {
		t.Errorf("an unknown id: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := run(t, "rows", "show", "--config", cfg); code != 2 || !strings.Contains(stderr, "give the id of the row") {
		t.Errorf("no id: exit %d\n%s", code, stderr)
	}
}

// rows show only reads: it runs with the database settings alone, while
// a destination's secret is unset, and shows a row that no relay has
// tried as having no attempts.
func TestRowsShowNeedsOnlyTheDatabase(t *testing.T) {
	t.Parallel()
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
destinations:
  hook: { type: http, url: "https://hooks.example.com/{{ topic }}", headers: { Authorization: "Bearer ${QB_UNSET_ROWS_TOKEN}" } }
routes: [ { topicPattern: "#", destination: hook } ]
`, dbURL))
	if _, stderr, code := run(t, "migrate", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	d := openPostgres(t, dbURL)
	if err := d.OutboxInsert(context.Background(), []dialects.NewRow{testkit.Row("invoice.sent")}); err != nil {
		t.Fatal(err)
	}
	listed, _, err := dialects.List(context.Background(), d, dialects.Filter{States: dialects.States}, nil, 1)
	if err != nil || len(listed) != 1 {
		t.Fatalf("list: %v %v", listed, err)
	}
	out, stderr, code := run(t, "rows", "show", listed[0].ID.String(), "--config", cfg)
	if code != 0 || !strings.Contains(out, "state           pending, try 1 of 6") || !strings.Contains(out, "attempts: none recorded") {
		t.Errorf("rows show with an unset secret: exit %d\n%s%s", code, out, stderr)
	}
}

// Through an outage with the circuit breaker, and two replays: `rows show`
// gives each try both numbers, the try and the attempt the receiver got in
// X-Attempt, the same for every request the receiver saw; marks the last
// try that failed while the destination was down as not counted and the
// open circuit's probes as probes (the failed ones not counted); and shows
// each replay, by the command line and by the admin API, where the count
// starts again.
func TestRowsShowMarksProbesAndReplays(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	failing.Store(true)
	recv := testrecv.New(t, func(*testrecv.Request) (int, string, map[string]string) {
		if failing.Load() {
			return 503, "down", nil
		}
		return 200, "", nil
	})
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
outbox: { pollIntervalMs: 100, backoff: { initialMs: 50, maxMs: 200 } }
destinations:
  hook:
    type: http
    url: "%s/hook"
    circuitBreaker: { window: 300ms, minAttempts: 2, probeInterval: 300ms }
routes:
  - { topicPattern: "#", destination: hook }
admin: { listen: "127.0.0.1:0" }
`, dbURL, recv.URL))
	if _, stderr, code := run(t, "migrate", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	d := openPostgres(t, dbURL)
	ctx := context.Background()
	// Two tries: the second is the last, and fails while the destination
	// is down.
	if err := d.OutboxInsert(ctx, []dialects.NewRow{testkit.Row("order.created", testkit.MaxAttempts(1))}); err != nil {
		t.Fatal(err)
	}
	listed, _, err := dialects.List(ctx, d, dialects.Filter{States: dialects.States}, nil, 1)
	if err != nil || len(listed) != 1 {
		t.Fatalf("list: %v %v", listed, err)
	}
	id := listed[0].ID.String()
	r := startRelay(t, "--config", cfg)
	page := r.pageURL(t)
	var before int
	testkit.Eventually(t, "the circuit to open", time.Minute, func() error {
		if metric(t, page, `queuebox_destination_circuit_open{destination="hook"}`) != 1 {
			return fmt.Errorf("closed")
		}
		before = len(recv.Requests())
		return nil
	})
	// Every request from now on is a probe.
	testkit.Eventually(t, "a failed probe", time.Minute, testkit.True(func() bool { return len(recv.Requests()) > before }))
	failing.Store(false)
	show := func(what string, delivered int) string {
		t.Helper()
		var out string
		testkit.Eventually(t, what, time.Minute, func() error {
			o, stderr, code := run(t, "rows", "show", id, "--config", cfg)
			if code != 0 {
				return fmt.Errorf("exit %d: %s", code, stderr)
			}
			// A recorded delivery names its destination; one told by the
			// row (a first try that succeeded) does not know it.
			n := strings.Count(o, " delivered  hook ") + strings.Count(o, " delivered  unknown ")
			if !strings.Contains(o, "state           delivered") || n != delivered {
				return fmt.Errorf("%d deliveries:\n%s", n, o)
			}
			out = o
			return nil
		})
		return out
	}
	out := show("the row delivered", 1)
	for _, want := range []string{
		"state           delivered, try 2 of 2, attempt 1\n",
		"  TRY                     ATTEMPT  AT",
		"\n  1                       0        ",
		"\n  2 (not counted)         1        ",
		"\n  2 (probe, not counted)  1        ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rows show lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`\n  2 \(probe\)  +1  +\S+  +\S+  +delivered  hook  +HTTP 200 OK\n$`).MatchString(out) {
		t.Errorf("the delivery is not the last line, a probe:\n%s", out)
	}

	if o, stderr, code := run(t, "replay", "--id", id, "--config", cfg); code != 0 {
		t.Fatalf("replay: exit %d %s %s", code, o, stderr)
	}
	out = show("the row delivered after the replay", 2)
	// Try 1 succeeded: the history did not record it, the row tells it.
	if !regexp.MustCompile(`\n  -  +-  +\S+  +-  +replayed   -  +-\n       replayed by queuebox replay, user \S+ on \S+; the tries count from 1 again\n` +
		`  1 \(from the row\)  +0  +\S+  +unknown  +delivered  unknown  +unknown\n       told by the row, not recorded: AT is when the delivery was written\n$`).MatchString(out) {
		t.Errorf("the replay by the command line, then try 1:\n%s", out)
	}

	req, _ := http.NewRequest("POST", page+"api/replay", strings.NewReader(`{"ids": [`+strconv.Quote(id)+`]}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("POST /api/replay: %s", res.Status)
	}
	show("the row delivered after the second replay", 3)
	code, body := httpGet(t, page+"api/rows/"+id, "")
	if code != 200 {
		t.Fatalf("GET /api/rows/%s: %d %s", id, code, body)
	}
	var v admin.RowDetailView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	// The attempts' numbers are those the receiver got, request by
	// request.
	var got, sent []string
	for _, a := range v.Attempts {
		switch {
		case a.Outcome == dialects.OutcomeReplayed:
			got = append(got, "replayed by "+strings.SplitN(a.ReplayedBy, ",", 2)[0])
			if a.Attempt != nil || a.Try != 0 {
				t.Errorf("a replay with a try: %+v", a)
			}
		case a.Attempt == nil || *a.Attempt != a.Try-1:
			t.Errorf("attempt %+v: its attempt is not its try - 1", a)
		default:
			got = append(got, strconv.Itoa(*a.Attempt))
		}
	}
	replays := []string{"replayed by queuebox replay", "replayed by POST /api/replay"}
	for _, q := range recv.Requests() {
		if q.Attempt == 0 && len(sent) > 0 {
			sent, replays = append(sent, replays[0]), replays[1:]
		}
		sent = append(sent, strconv.Itoa(q.Attempt))
	}
	if strings.Join(got, " ") != strings.Join(sent, " ") {
		t.Errorf("the history's attempts and replays:\n  %s\nthe X-Attempt of each request the receiver got, and the replays:\n  %s", strings.Join(got, " "), strings.Join(sent, " "))
	}
	// The second replay set back a delivery the history did not record:
	// it is shown before the replay, from the row, as is the last one.
	if n := len(v.Attempts); n < 4 || v.Attempts[n-2].ReplayedBy != "POST /api/replay, from 127.0.0.1" ||
		!v.Attempts[n-3].FromRow || !v.Attempts[n-1].FromRow || v.Attempts[n-1].DurationMs != nil {
		t.Errorf("the replay by the API between two deliveries told by the row: %+v", v.Attempts)
	}
	r.stop(t)
}

// A row delivered at its first try writes nothing to the attempt history:
// `rows show` tells the delivery from the row, marked so, with what the
// row cannot know (duration, destination, answer) as unknown, in text and
// JSON. A replay keeps it, so that after the next delivery the row shows
// both deliveries and the replay between them.
func TestRowsShowTellsAFirstTryFromTheRow(t *testing.T) {
	t.Parallel()
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
outbox: { pollIntervalMs: 100 }
destinations: { sink: { type: "null" } }
routes: [ { topicPattern: "#", destination: sink } ]
admin: { listen: "127.0.0.1:0" }
`, dbURL))
	if _, stderr, code := run(t, "migrate", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	d := openPostgres(t, dbURL)
	ctx := context.Background()
	if err := d.OutboxInsert(ctx, []dialects.NewRow{testkit.Row("order.created")}); err != nil {
		t.Fatal(err)
	}
	listed, _, err := dialects.List(ctx, d, dialects.Filter{States: dialects.States}, nil, 1)
	if err != nil || len(listed) != 1 {
		t.Fatalf("list: %v %v", listed, err)
	}
	id := listed[0].ID.String()
	attempts := func() int {
		t.Helper()
		var n int
		table := pgx.Identifier{d.Names().Object("attempts")}
		if schema := d.Names().Schema; schema != "" {
			table = pgx.Identifier{schema, d.Names().Object("attempts")}
		}
		if err := d.Pool().QueryRow(ctx, "SELECT count(*) FROM "+table.Sanitize()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	r := startRelay(t, "--config", cfg)
	delivered := func(what string, n int) string {
		t.Helper()
		var out string
		testkit.Eventually(t, what, time.Minute, func() error {
			o, stderr, code := run(t, "rows", "show", id, "--config", cfg)
			if code != 0 {
				return fmt.Errorf("exit %d: %s", code, stderr)
			}
			if !strings.Contains(o, "state           delivered") || strings.Count(o, " delivered  ") != n {
				return fmt.Errorf("not delivered %d times:\n%s", n, o)
			}
			out = o
			return nil
		})
		return out
	}
	out := delivered("the row delivered", 1)
	if n := attempts(); n != 0 {
		t.Errorf("a first try that succeeded wrote %d attempts", n)
	}
	row, _, err := dialects.List(ctx, d, dialects.Filter{States: dialects.States}, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	at := row[0].UpdatedAt.UTC().Format(time.RFC3339Nano)
	if !regexp.MustCompile(`\nattempts \(1\):\n  TRY +ATTEMPT +AT +DURATION +OUTCOME +DESTINATION +STATUS\n` +
		`  1 \(from the row\)  0 +` + regexp.QuoteMeta(at) + ` +unknown +delivered  unknown +unknown\n` +
		`       told by the row, not recorded: AT is when the delivery was written\n$`).MatchString(out) {
		t.Errorf("rows show of a first try that succeeded, at %s:\n%s", at, out)
	}
	jsonOut, stderr, code := run(t, "rows", "show", id, "--json", "--config", cfg)
	var v admin.RowDetailView
	if err := json.Unmarshal([]byte(jsonOut), &v); code != 0 || err != nil {
		t.Fatalf("rows show --json: exit %d, %v\n%s%s", code, err, jsonOut, stderr)
	}
	if len(v.Attempts) != 1 || !v.Attempts[0].FromRow || v.Attempts[0].Try != 1 || v.Attempts[0].DurationMs != nil ||
		v.Attempts[0].Status != "" || v.Attempts[0].Destination != "" || !v.Attempts[0].At.Equal(row[0].UpdatedAt) {
		t.Errorf("rows show --json: %+v", v.Attempts)
	}
	if !strings.Contains(jsonOut, `"durationMs":null`) || !strings.Contains(jsonOut, `"fromRow":true`) {
		t.Errorf("rows show --json does not say the duration is unknown and the delivery told by the row:\n%s", jsonOut)
	}

	if o, stderr, code := run(t, "replay", "--id", id, "--config", cfg); code != 0 {
		t.Fatalf("replay: exit %d %s %s", code, o, stderr)
	}
	out = delivered("the row delivered again after the replay", 2)
	if n := attempts(); n != 1 {
		t.Errorf("the history holds %d entries after a replay of a row delivered twice at its first try; want the replay's", n)
	}
	if !regexp.MustCompile(`\nattempts \(3\):\n  TRY +ATTEMPT +AT +DURATION +OUTCOME +DESTINATION +STATUS\n` +
		`  1 \(from the row\)  0 +` + regexp.QuoteMeta(at) + ` +unknown +delivered  unknown +unknown\n` +
		`       told by the row, not recorded: AT is when the delivery was written\n` +
		`  - +- +\S+ +- +replayed +- +-\n       replayed by queuebox replay, user \S+ on \S+; the tries count from 1 again\n` +
		`  1 \(from the row\)  0 +\S+ +unknown +delivered  unknown +unknown\n` +
		`       told by the row, not recorded: AT is when the delivery was written\n$`).MatchString(out) {
		t.Errorf("rows show after the replay: the first delivery (at %s), the replay, the second delivery:\n%s", at, out)
	}
	r.stop(t)
}

// A row that no route matched went dead without an attempt: rows show says
// so, and when, instead of "try 1 of 6" and "none made yet".
func TestRowsShowOfARowThatMatchedNoRoute(t *testing.T) {
	t.Parallel()
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
outbox: { pollIntervalMs: 100 }
destinations: { n: { type: "null" } }
routes: [ { topicPattern: "order.#", destination: n } ]
admin: { listen: "127.0.0.1:0" }
`, dbURL))
	if _, stderr, code := run(t, "migrate", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	d := openPostgres(t, dbURL)
	ctx := context.Background()
	if err := d.OutboxInsert(ctx, []dialects.NewRow{testkit.Row("shipment.sent")}); err != nil {
		t.Fatal(err)
	}
	r := startRelay(t, "--config", cfg)
	var row dialects.ListedRow
	testkit.Eventually(t, "the row dead", 0, func() error {
		listed, _, err := dialects.List(ctx, d, dialects.Filter{States: []dialects.State{dialects.Dead}}, nil, 1)
		if err != nil || len(listed) != 1 {
			return fmt.Errorf("%v %v", listed, err)
		}
		row = listed[0]
		return nil
	})
	r.stop(t)
	at := row.UpdatedAt.UTC().Format(time.RFC3339)
	out, stderr, code := run(t, "rows", "show", row.ID.String(), "--config", cfg)
	for _, want := range []string{
		"state           dead: no route matched its topic at " + at + "; nothing was sent\n",
		`attempts: none: no route matched the topic "shipment.sent" when the relay took the row (` + at + "), so it went dead without one; add a route and replay it\n",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("rows show lacks %q: exit %d\n%s%s", want, code, out, stderr)
		}
	}
	if strings.Contains(out, "try 1 of") || strings.Contains(out, "none made yet") {
		t.Errorf("rows show speaks of a try that was never made:\n%s", out)
	}
	jsonOut, _, _ := run(t, "rows", "show", row.ID.String(), "--json", "--config", cfg)
	var v admin.RowDetailView
	if err := json.Unmarshal([]byte(jsonOut), &v); err != nil || v.MatchedNoRouteAt == nil || !v.MatchedNoRouteAt.Equal(row.UpdatedAt) {
		t.Errorf("rows show --json: matchedNoRouteAt %v (%v)\n%s", v.MatchedNoRouteAt, err, jsonOut)
	}
}
