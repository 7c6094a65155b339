package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
)

// server serves the admin routes over d with a sampler that counts often.
func server(t *testing.T, d dialects.Dialect, token string) (*Server, *httptest.Server) {
	t.Helper()
	s := NewServer(Options{Dialect: d, Token: token, CountInterval: 50 * time.Millisecond, ThroughputStep: 50 * time.Millisecond,
		Version: "test", RouteOf: func(topic string) (string, string) {
			if strings.HasPrefix(topic, "order.") {
				return "orders", "orders-webhook"
			}
			return "", ""
		},
		FinalStatus: func(destination string, status int) bool { return destination == "orders-webhook" && status == 410 }})
	s.Start(context.Background())
	t.Cleanup(s.Stop)
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return s, hs
}

type answer struct {
	code int
	body string
	h    http.Header
}

func (a answer) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(a.body), v); err != nil {
		t.Fatalf("not JSON (%v): %s", err, a.body)
	}
}

func call(t *testing.T, hs *httptest.Server, method, path, body string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1] // Go sends req.Host, not a Host header
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, string(b), res.Header}
}

// expect checks the status and that the body holds every want.
func expect(t *testing.T, a answer, code int, want ...string) {
	t.Helper()
	if a.code != code {
		t.Errorf("status %d, want %d: %s", a.code, code, a.body)
		return
	}
	text := a.body
	var e jsonError
	if json.Unmarshal([]byte(a.body), &e) == nil && e.Error != "" {
		text = e.Error // the message as a client reads it, unquoted
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("the body lacks %q:\n%s", w, a.body)
		}
	}
}

// counted waits until the sampler has counted the table with pred true.
func counted(t *testing.T, hs *httptest.Server, pred func(StatsView) bool) StatsView {
	t.Helper()
	var v StatsView
	testkit.Eventually(t, "the stats to get there", 0, func() error {
		v = StatsView{}
		call(t, hs, "GET", "/api/stats", "").json(t, &v)
		if v.CountedAt != nil && pred(v) {
			return nil
		}
		return fmt.Errorf("the stats are %+v", v)
	})
	return v
}

func rowCounts(t *testing.T, d dialects.Dialect) map[dialects.State]int64 {
	t.Helper()
	st, err := d.OutboxStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Rows
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	d := outbox(t)
	s, hs := server(t, d, "")
	expect(t, call(t, hs, "GET", "/healthz", ""), 200, "ok")
	expect(t, call(t, hs, "GET", "/readyz", ""), 200, "ready")
	s.Draining()
	expect(t, call(t, hs, "GET", "/readyz", ""), 503, "not ready: the relay is stopping")

	// A schema that was never migrated is not ready, and says why.
	schema, dbURL := testdb.Schema(t)
	names := dialects.DefaultNames()
	names.Schema = schema
	empty, err := postgres.Open(context.Background(), postgres.Options{URL: dbURL, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(empty.Close)
	_, hs2 := server(t, empty, "")
	expect(t, call(t, hs2, "GET", "/readyz", ""), 503, "not ready: the database schema is not current", "queuebox migrate up")
	expect(t, call(t, hs2, "GET", "/healthz", ""), 200, "ok")

	// A database that does not answer is not ready either.
	gone, err := postgres.Open(context.Background(), postgres.Options{URL: "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2", Names: dialects.DefaultNames()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gone.Close)
	_, hs3 := server(t, gone, "")
	expect(t, call(t, hs3, "GET", "/readyz", ""), 503, "not ready: the database does not answer", "could not reach the database")

	// A server that refuses the login says so, and what to check.
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/qb_no_such_database"
	refused, err := postgres.Open(context.Background(), postgres.Options{URL: u.String(), Names: dialects.DefaultNames()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(refused.Close)
	_, hs4 := server(t, refused, "")
	expect(t, call(t, hs4, "GET", "/readyz", ""), 503, "not ready: the database server refused the login", `database "qb_no_such_database" does not exist`, "check the user, the password and the database name")
}

func TestStatsDeadGroupsAndBlockedKeys(t *testing.T) {
	t.Parallel()
	d := outbox(t)
	ctx := context.Background()
	// A key whose head waits for a retry, with one row behind it; and a row
	// in a state written by hand.
	const k = "cust-9"
	if err := d.OutboxInsert(ctx, testkit.Rows(2, "order.paid", nil, testkit.Key(k))); err != nil {
		t.Fatal(err)
	}
	claimed, err := d.OutboxClaim(ctx, dialects.ClaimParams{Limit: 10, Lease: time.Minute, Token: uuid.New()})
	if err != nil {
		t.Fatal(err)
	}
	var out []dialects.Outcome
	retried := false
	for _, r := range claimed.Rows { // by key, then sequence: the key's head comes first
		o := dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeRelease}
		if r.Key == k && !retried {
			o, retried = dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeRetry, Delay: time.Hour, Error: "HTTP 503: busy"}, true
		}
		out = append(out, o)
	}
	if _, err := d.OutboxComplete(ctx, out); err != nil {
		t.Fatal(err)
	}
	if _, err := d.(*postgres.Dialect).Pool().Exec(ctx, fmt.Sprintf(`INSERT INTO %q.outbox (topic, payload, state) VALUES ('manual', '{}', 'on-hold')`, d.Names().Schema)); err != nil {
		t.Fatal(err)
	}

	_, hs := server(t, d, "")
	v := counted(t, hs, func(v StatsView) bool { return v.Rows["dead"] == 3 })
	if v.Rows["pending"] != 3 || v.Rows["delivered"] != 1 || v.Rows["processing"] != 0 || v.OtherStates["on-hold"] != 1 {
		t.Errorf("rows %v, other states %v", v.Rows, v.OtherStates)
	}
	if v.Topics["order.created"]["dead"] != 2 || v.Topics["manual"]["on-hold"] != 1 || v.Topics["order.paid"]["pending"] != 2 {
		t.Errorf("topics %v", v.Topics)
	}
	if v.ScheduledLater != 1 || v.OldestDuePendingSeconds <= 0 || v.Version != "test" || v.CountEverySeconds <= 0 {
		t.Errorf("stats %+v", v)
	}

	var g DeadGroupsView
	a := call(t, hs, "GET", "/api/dead-groups", "")
	expect(t, a, 200)
	a.json(t, &g)
	// The two order.created rows route to orders-webhook; user.created to
	// nothing: two groups, the largest first.
	if g.Window != DeadGroupWindow || g.Grouped != 3 || len(g.Groups) != 2 {
		t.Fatalf("dead groups: %+v", g)
	}
	if first := g.Groups[0]; first.Destination != "orders-webhook" || first.Route != "orders" || first.Rows != 2 || len(first.IDs) != 2 ||
		first.Error != "HTTP 410: gone" || first.Example.Topic != "order.created" || first.Example.Error != "HTTP 410: gone" {
		t.Errorf("the first group: %+v", first)
	}
	if second := g.Groups[1]; second.Destination != "" || second.Rows != 1 || second.Topics[0] != "user.created" {
		t.Errorf("the second group: %+v", second)
	}
	// Each group has an id of its destination and error, and both say
	// what a replay would meet: orders-webhook takes 410 as final, and
	// user.created has no route.
	if first := g.Groups[0]; first.ID != GroupID("orders-webhook", "HTTP 410: gone") || !regexp.MustCompile(`^g-[0-9a-f]{8}$`).MatchString(first.ID) ||
		first.ReplayWarning == nil || !strings.Contains(first.ReplayWarning.String(), "orders-webhook answered HTTP 410, which its nonRetryableStatus makes final. If it still answers 410 for these rows, a replay sends each of them dead again after one try") {
		t.Errorf("the first group's id and warning: %s %+v", first.ID, first.ReplayWarning)
	}
	if second := g.Groups[1]; second.ID == g.Groups[0].ID || second.ReplayWarning == nil ||
		!strings.Contains(second.ReplayWarning.String(), `No route matches topic "user.created" in the configuration. A replay sends every row dead again at once`) {
		t.Errorf("the second group's warning: %+v", second.ReplayWarning)
	}

	var b BlockedKeysView
	a = call(t, hs, "GET", "/api/blocked-keys", "")
	expect(t, a, 200)
	a.json(t, &b)
	if len(b.Keys) != 1 || b.Keys[0].Key != k || b.Keys[0].Behind != 1 || b.Keys[0].Destination != "orders-webhook" ||
		b.Keys[0].LastError == nil || *b.Keys[0].LastError != "HTTP 503: busy" || b.Keys[0].NextAttemptInSeconds < 3500 ||
		b.Keys[0].NextTry != b.Keys[0].Attempt+1 || b.Keys[0].MaxTries != b.Keys[0].MaxAttempts+1 {
		t.Errorf("blocked keys: %+v", b)
	}
	expect(t, call(t, hs, "GET", "/api/stats?state=dead", ""), 400, "state: is not a parameter of this request")
	expect(t, call(t, hs, "GET", "/api/dead-groups?limit=5", ""), 400, "limit: is not a parameter of this request")
	expect(t, call(t, hs, "GET", "/api/nothing", ""), 404, "GET /api/nothing is not a route of the admin API")
}

func TestRowsListingPagesAndRefusesBadInput(t *testing.T) {
	t.Parallel()
	d := outbox(t)
	_, hs := server(t, d, "")
	// Newest first, two per page, with an opaque cursor.
	var seen []RowView
	next := ""
	for pages := 0; ; pages++ {
		path := "/api/rows?limit=2&state=dead&state=delivered"
		if next != "" {
			path += "&after=" + url.QueryEscape(next)
		}
		a := call(t, hs, "GET", path, "")
		expect(t, a, 200)
		var page RowsView
		a.json(t, &page)
		seen = append(seen, page.Rows...)
		if page.Next == nil {
			break
		}
		next = *page.Next
		if pages > 5 {
			t.Fatal("the listing does not end")
		}
	}
	if len(seen) != 4 {
		t.Fatalf("listed %d dead and delivered rows, want 4: %+v", len(seen), seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i].UpdatedAt.After(seen[i-1].UpdatedAt) {
			t.Errorf("not newest first: %v after %v", seen[i].UpdatedAt, seen[i-1].UpdatedAt)
		}
	}
	// The default is dead rows; the topic pattern and the key filter; the
	// route of the topic comes with each row.
	var rows RowsView
	call(t, hs, "GET", "/api/rows", "").json(t, &rows)
	if len(rows.Rows) != 3 || rows.Next != nil {
		t.Errorf("the default listing: %+v", rows)
	}
	call(t, hs, "GET", "/api/rows?topic=order.%23&key=cust-1", "").json(t, &rows)
	if len(rows.Rows) != 1 || rows.Rows[0].Destination != "orders-webhook" || rows.Rows[0].Route != "orders" || *rows.Rows[0].Key != "cust-1" ||
		rows.Rows[0].LastError == nil || rows.Rows[0].State != "dead" {
		t.Errorf("order.# of cust-1: %+v", rows)
	}
	call(t, hs, "GET", "/api/rows?id="+rows.Rows[0].ID.String()+"&state=dead", "").json(t, &rows)
	if len(rows.Rows) != 1 {
		t.Errorf("by id: %+v", rows)
	}

	before := rowCounts(t, d)
	for _, c := range []struct{ query, want string }{
		{"stat=dead", "stat: is not a parameter of this request; the parameters are after, destination, errorContains, id, key, limit, since, state, topic, until"},
		{"id=0b7e3f4e", `id "0b7e3f4e": is not a row id; give the id of a row, a UUID`},
		{"since=yesterday", `since "yesterday": is neither an RFC 3339 time nor a duration; write a time such as 2025-01-31T12:00:00Z`},
		{"state=gone", `state "gone": is not a state; use pending, processing, delivered or dead`},
		{"limit=0", `limit "0": is out of range; use a number from 1 to 10000`},
		{"limit=many", `limit "many": is not a whole number`},
		{"limit=1&limit=2", "limit: is given more than once"},
		{"after=xyz", `after "xyz": is not a position this listing returned; pass the "next" of the previous page as it is`},
		{"topic=order.*x", "topic: "},
		{"since=1h&until=2h", `until "2h": is not after since "1h"`},
	} {
		a := call(t, hs, "GET", "/api/rows?"+c.query, "")
		expect(t, a, 400, c.want)
		var e jsonError
		a.json(t, &e)
		if e.Error == "" {
			t.Errorf("%s: no error field: %s", c.query, a.body)
		}
	}
	if after := rowCounts(t, d); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("bad requests changed rows: %v, then %v", before, after)
	}
}

func TestReplayRoute(t *testing.T) {
	t.Parallel()
	d := outbox(t)
	_, hs := server(t, d, "")
	before := rowCounts(t, d)
	for _, c := range []struct {
		body, ctype string
		code        int
		want        string
	}{
		{`{}`, "application/json", 400, `say which rows; give ids, or at least one filter ("states": ["dead"] replays every dead row)`},
		{`{"state": ["dead"]}`, "application/json", 400, "state: is not a field of a replay request"},
		{`{"ids": ["nope"]}`, "application/json", 400, `ids "nope": is not a row id`},
		{`{"states": ["dead"], "since": "last week"}`, "application/json", 400, `since "last week": is neither an RFC 3339 time nor a duration`},
		{`{"states": ["pending"]}`, "application/json", 400, `states "pending": replay does not select pending rows; use dead or delivered`},
		{`{"states": "dead"}`, "application/json", 400, "states: has the wrong type"},
		{`states=dead`, "application/json", 400, "the body is not a JSON object"},
		{``, "application/json", 400, "the body is empty"},
		{`{"states": ["dead"]}`, "text/plain", 415, `the body must be JSON sent with Content-Type: application/json (got "text/plain")`},
	} {
		req, _ := http.NewRequest("POST", hs.URL+"/api/replay", strings.NewReader(c.body))
		req.Header.Set("Content-Type", c.ctype)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		expect(t, answer{res.StatusCode, string(b), res.Header}, c.code, c.want)
	}
	expect(t, call(t, hs, "POST", "/api/replay?dryRun=true", `{"states": ["dead"]}`), 400, "dryRun: is not a parameter of this request")
	expect(t, call(t, hs, "GET", "/api/replay", ""), 404, "GET /api/replay is not a route", "POST /api/replay")
	if after := rowCounts(t, d); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("refused replays changed rows: %v, then %v", before, after)
	}

	var r ReplayView
	a := call(t, hs, "POST", "/api/replay", `{"topic": "order.#", "errorContains": "410", "dryRun": true}`)
	expect(t, a, 200)
	a.json(t, &r)
	if r.Rows != 2 || !r.DryRun || rowCounts(t, d)[dialects.Dead] != 3 {
		t.Fatalf("dry run: %+v, rows %v", r, rowCounts(t, d))
	}
	a = call(t, hs, "POST", "/api/replay", `{"topic": "order.#", "errorContains": "410"}`)
	expect(t, a, 200)
	a.json(t, &r)
	if after := rowCounts(t, d); r.Rows != 2 || r.DryRun || after[dialects.Dead] != 1 || after[dialects.Pending] != 3 {
		t.Fatalf("replay: %+v, rows %v", r, after)
	}
}

// With a token, every route but /healthz needs it; a browser gets a form
// that sets a session cookie.
func TestTokenIsRequired(t *testing.T) {
	t.Parallel()
	d := outbox(t)
	const token = "s3cret-admin-token"
	_, hs := server(t, d, token)
	before := rowCounts(t, d)
	expect(t, call(t, hs, "GET", "/healthz", ""), 200, "ok")
	routes := []struct{ method, path, body string }{
		{"GET", "/readyz", ""}, {"GET", "/metrics", ""}, {"GET", "/api/stats", ""}, {"GET", "/api/rows", ""},
		{"POST", "/api/replay", `{"states": ["dead"]}`}, {"GET", "/api/dead-groups", ""}, {"GET", "/api/blocked-keys", ""},
		{"GET", "/", ""}, {"GET", "/app.js", ""},
	}
	for _, r := range routes {
		a := call(t, hs, r.method, r.path, r.body)
		expect(t, a, 401, "this route needs the admin token: send Authorization: Bearer <admin.token>")
		if a.h.Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s: no WWW-Authenticate", r.method, r.path)
		}
		expect(t, call(t, hs, r.method, r.path, r.body, "Authorization", "Bearer wrong"), 401, "the token does not match admin.token")
		expect(t, call(t, hs, r.method, r.path, r.body, "Authorization", "Basic "+token), 401, `the Authorization header is not "Bearer <token>"`)
	}
	if after := rowCounts(t, d); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("unauthenticated requests changed rows: %v, then %v", before, after)
	}
	bearer := []string{"Authorization", "Bearer " + token}
	expect(t, call(t, hs, "GET", "/readyz", "", bearer...), 200, "ready")
	expect(t, call(t, hs, "GET", "/metrics", "", bearer...), 200, "queuebox_claimed_rows_total")
	expect(t, call(t, hs, "GET", "/api/rows", "", bearer...), 200, `"rows"`)
	expect(t, call(t, hs, "POST", "/api/replay", `{"states": ["dead"], "dryRun": true}`, bearer...), 200, `"rows": 3`)

	// A browser: the page answers 401 with a form; a wrong token is
	// refused; the right one sets an HttpOnly, SameSite=Strict cookie that
	// opens the page and the API.
	expect(t, call(t, hs, "GET", "/", "", "Accept", "text/html"), 401, `<form method="post" action="/login">`)
	form := func(tok string) answer {
		return call(t, hs, "POST", "/login", url.Values{"token": {tok}}.Encode(), "Content-Type", "application/x-www-form-urlencoded")
	}
	expect(t, form("nope"), 401, "That token does not match admin.token")
	a := form(token)
	if a.code != http.StatusSeeOther || a.h.Get("Location") != "/" {
		t.Fatalf("login: %d %v", a.code, a.h)
	}
	cookie := a.h.Get("Set-Cookie")
	if !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") || strings.Contains(cookie, token) {
		t.Fatalf("the session cookie: %s", cookie)
	}
	session := strings.SplitN(cookie, ";", 2)[0]
	expect(t, call(t, hs, "GET", "/", "", "Cookie", session), 200, `<script src="/app.js"`)
	expect(t, call(t, hs, "GET", "/api/stats", "", "Cookie", session), 200, `"rows"`)
	expect(t, call(t, hs, "GET", "/api/stats", "", "Cookie", "queuebox_admin=forged"), 401, "needs the admin token")
}

// Without a token the listener is on loopback: a request that names
// another host (a page of another site rebinding its name to 127.0.0.1)
// is refused.
func TestWithoutTokenOnlyAddressesAndLocalhost(t *testing.T) {
	t.Parallel()
	d := outbox(t)
	_, hs := server(t, d, "")
	expect(t, call(t, hs, "GET", "/api/stats", "", "Host", "evil.example.com"), 403, `the host "evil.example.com" is not an address or localhost`)
	expect(t, call(t, hs, "GET", "/api/stats", "", "Host", "localhost:8080"), 200)
	expect(t, call(t, hs, "GET", "/", ""), 200, "<title>QueueBox admin</title>")
	expect(t, call(t, hs, "GET", "/style.css", ""), 200, "--bad")
}

func TestNormaliseError(t *testing.T) {
	for in, want := range map[string]string{
		"HTTP 503: upstream 10.0.0.12 timed out after 30s":                    "HTTP 503: upstream # timed out after #s",
		"HTTP 410: order 0b7e3f4e-8c1a-4d2e-9f3a-1b2c3d4e5f60 is gone":        "HTTP 410: order <id> is gone",
		"HTTP/1.1 500 trace 4bf92f3577b34da6a3ce929d0e0e4736":                 "HTTP/1.1 500 trace <id>",
		"status 404 for item 1234":                                            "status 404 for item #",
		`no route matches topic "user.created"`:                               `no route matches topic "user.created"`,
		"dial tcp 127.0.0.1:8443: connect: connection refused":                "dial tcp #: connect: connection refused",
		"  spaces   collapse\n and numbers 7 and 12.5 go ":                    "spaces collapse and numbers # and # go",
		"deadbeef is a word, 1234567890 a number, c0ffee00 an id of 8 digits": "deadbeef is a word, # a number, <id> an id of # digits",
	} {
		if got := NormaliseError(in); got != want {
			t.Errorf("NormaliseError(%q) = %q, want %q", in, got, want)
		}
	}
}

// A group's replay warning comes from the routes and the destination's
// final statuses only: a 503 or a status the destination retries is not
// one, nor is anything without a FinalStatus.
func TestReplayWarningOnlyForFailuresThatRecur(t *testing.T) {
	final := func(dest string, status int) bool { return dest == "hook" && (status == 410 || status == 422) }
	for _, c := range []struct {
		g    DeadGroup
		want string
	}{
		{DeadGroup{Destination: "hook", Error: "HTTP 410 Gone: order <id> is gone", Topics: []string{"a"}}, "hook answered HTTP 410"},
		{DeadGroup{Destination: "hook", Error: "HTTP 422 Unprocessable Entity", Topics: []string{"a"}}, "answered HTTP 422"},
		{DeadGroup{Destination: "hook", Error: "HTTP 503 Service Unavailable", Topics: []string{"a"}}, ""},
		{DeadGroup{Destination: "other", Error: "HTTP 410 Gone", Topics: []string{"a"}}, ""},
		{DeadGroup{Destination: "hook", Error: "dial tcp #: connection refused; HTTP 410", Topics: []string{"a"}}, ""},
		{DeadGroup{Destination: "", Error: `no route matches topic "a"`, Topics: []string{"a", "b"}}, `No route matches the topics "a", "b"`},
	} {
		w := replayWarning(c.g, final)
		switch {
		case c.want == "" && w != nil:
			t.Errorf("%+v: a warning %s", c.g, w)
		case c.want != "" && (w == nil || !strings.Contains(w.String(), c.want)):
			t.Errorf("%+v: %v, want %q", c.g, w, c.want)
		}
	}
	if w := replayWarning(DeadGroup{Destination: "hook", Error: "HTTP 410 Gone", Topics: []string{"a"}}, nil); w != nil {
		t.Errorf("a warning without final statuses: %s", w)
	}
}

// queuebox_build_info: one series of value 1, labelled with the build.
func TestBuildInfoMetric(t *testing.T) {
	m := NewMetrics(nil)
	m.SetBuildInfo("1.4.2", "abc1234")
	m.SetBuildInfo("again", "ignored")
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(m.Registry(), promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	want := fmt.Sprintf(`queuebox_build_info{commit="abc1234",goversion=%q,version="1.4.2"} 1`, runtime.Version())
	if !strings.Contains(body, want) || strings.Count(body, "queuebox_build_info{") != 1 {
		t.Fatalf("/metrics lacks %s:\n%s", want, body)
	}
}

func TestDeadGroupsMergeByDestinationAndNormalisedError(t *testing.T) {
	now := time.Now()
	id := func() uuid.UUID { return uuid.New() }
	a1, a2, b1 := id(), id(), id()
	raw := []dialects.DeadGroup{
		{Topic: "order.created", Error: "HTTP 410: order 17 is gone", Rows: 1, Newest: now.Add(-time.Minute), IDs: []uuid.UUID{a1}},
		{Topic: "order.paid", Error: "HTTP 410: order 18 is gone", Rows: 1, Newest: now, IDs: []uuid.UUID{a2}},
		{Topic: "order.paid", Error: "HTTP 500: boom", Rows: 1, Newest: now, IDs: []uuid.UUID{b1}},
	}
	g := mergeDeadGroups(raw, func(string) (string, string) { return "r", "hook" }, 10)
	if g.Grouped != 3 || len(g.Groups) != 2 {
		t.Fatalf("%+v", g)
	}
	first := g.Groups[0]
	if first.Error != "HTTP 410: order # is gone" || first.Rows != 2 || first.Example.ID != a2 || first.Example.Error != "HTTP 410: order 18 is gone" ||
		fmt.Sprint(first.Topics) != "[order.created order.paid]" || first.Route != "" || len(first.IDs) != 2 {
		t.Errorf("merged group: %+v", first)
	}
	if g.Groups[1].Route != "r" || g.Groups[1].Error != "HTTP 500: boom" {
		t.Errorf("second group: %+v", g.Groups[1])
	}
}

func TestCursorRoundTrip(t *testing.T) {
	c := dialects.Cursor{UpdatedAt: time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC), Sequence: 42}
	got, err := DecodeCursor(EncodeCursor(c))
	if err != nil || !got.UpdatedAt.Equal(c.UpdatedAt) || got.Sequence != 42 {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []string{"", "!!!", "e30", "bm90IGpzb24"} {
		if _, err := DecodeCursor(bad); err == nil {
			t.Errorf("DecodeCursor(%q) accepted", bad)
		}
	}
}

// countingDialect counts the whole-table counts the sampler makes.
type countingDialect struct {
	dialects.Dialect
	n atomic.Int64
}

func (c *countingDialect) OutboxCountByTopic(ctx context.Context) ([]dialects.TopicCount, error) {
	c.n.Add(1)
	return c.Dialect.OutboxCountByTopic(ctx)
}

// A replica whose admin listener nobody reads never counts the table (with
// many replicas, each would pay a full scan on its interval); the first
// scrape waits for a count and gets real figures, and counting stops again
// when the scrapes stop.
func TestTheTableIsCountedOnlyWhileSomeoneReads(t *testing.T) {
	t.Parallel()
	d := &countingDialect{Dialect: outbox(t)}
	_, hs := server(t, d, "")
	// Eight count intervals pass: a sleep, to show that nothing happens.
	time.Sleep(400 * time.Millisecond)
	if n := d.n.Load(); n != 0 {
		t.Fatalf("%d counts with nobody reading", n)
	}
	a := call(t, hs, "GET", "/metrics", "")
	expect(t, a, 200, `queuebox_rows{outbox="default",state="dead"} 3`, `queuebox_rows{outbox="default",state="pending"} 1`)
	// The interval is at least 50 ms, longer when a count takes long (on a
	// loaded machine): scrape until three counts.
	testkit.Eventually(t, "three counts while /metrics is scraped", 0, func() error {
		call(t, hs, "GET", "/metrics", "")
		if n := d.n.Load(); n < 3 {
			return fmt.Errorf("%d counts", n)
		}
		return nil
	})
	read := d.n.Load()
	// Again a sleep to show that nothing happens: no count once the
	// scrapes stop.
	time.Sleep(400 * time.Millisecond)
	if n := d.n.Load(); n > read+1 {
		t.Fatalf("%d counts after the reads stopped (%d before)", n, read)
	}
}

// The address the listener got decides, after any name was resolved: a
// loopback address needs no token; anything else (all interfaces, a
// machine's own address, a name that resolved to one) needs admin.token.
func TestListenAllowedLooksAtTheBoundAddress(t *testing.T) {
	for _, c := range []struct {
		addr  net.Addr
		token string
		ok    bool
	}{
		{&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 8080}, "", true},
		{&net.TCPAddr{IP: net.ParseIP("::1"), Port: 8080}, "", true},
		{&net.TCPAddr{IP: net.ParseIP("127.0.0.2"), Port: 8080}, "", true},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 8080}, "", false},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, "", false},
		{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 8080}, "", false},
		{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 8080}, "s3cret", true},
		{&net.UnixAddr{Name: "/tmp/qb.sock", Net: "unix"}, "", false},
	} {
		err := ListenAllowed(c.addr, c.token)
		if (err == nil) != c.ok {
			t.Errorf("%v with token %q: %v, want allowed %v", c.addr, c.token, err, c.ok)
		}
		if err != nil && (!strings.Contains(err.Error(), "admin.token") || !strings.Contains(err.Error(), c.addr.String())) {
			t.Errorf("the refusal does not name the address and the key: %v", err)
		}
	}
}
