package admin

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// The catalogue of bad requests to the admin API: wrong methods, bodies that
// are not the JSON asked for, bodies too large, wrong parameters, missing
// or wrong tokens. Each gets a 4xx with a message that names the input,
// the reason and what to send instead (JSON on /api/*), and none changes a
// row.

type badRequest struct {
	name, method, path, body string
	header                   []string
	code                     int
	want                     string
}

func runBadRequests(t *testing.T, token string, cases []badRequest) {
	t.Helper()
	d := outbox(t)
	_, hs := server(t, d, token)
	before := rowCounts(t, d)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := call(t, hs, c.method, c.path, c.body, c.header...)
			expect(t, a, c.code, c.want)
			if strings.HasPrefix(c.path, "/api/") && c.code != 405 {
				var e jsonError
				if err := json.Unmarshal([]byte(a.body), &e); err != nil || e.Error == "" {
					t.Errorf("the answer is not {\"error\": ...}: %s", a.body)
				}
			}
			if strings.Contains(a.body, "goroutine ") || strings.Contains(a.body, "panic") {
				t.Errorf("the answer shows the program's insides: %s", a.body)
			}
		})
	}
	if after := rowCounts(t, d); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("bad requests changed rows: %v, then %v", before, after)
	}
}

func TestBadAdminRequests(t *testing.T) {
	t.Parallel()
	json := []string{"Content-Type", "application/json"}
	big := `{"topic": "` + strings.Repeat("a", 1<<20+10) + `"}`
	runBadRequests(t, "", []badRequest{
		// Methods.
		{name: "POST to a GET route", method: "POST", path: "/api/stats", body: "{}", code: 404, want: "POST /api/stats is not a route of the admin API; the routes are GET /api/stats"},
		{name: "GET of the replay", method: "GET", path: "/api/replay", code: 404, want: "POST /api/replay"},
		{name: "DELETE of rows", method: "DELETE", path: "/api/rows", code: 404, want: "DELETE /api/rows is not a route"},
		{name: "an unknown API route", method: "GET", path: "/api/queues", code: 404, want: "the routes are"},
		{name: "PUT of the health check", method: "PUT", path: "/healthz", code: 405, want: "Method Not Allowed"},
		// The replay's body.
		{name: "a replay without a JSON content type", method: "POST", path: "/api/replay", body: `{"states": ["dead"]}`, header: []string{"Content-Type", "text/plain"}, code: 415, want: "Content-Type: application/json"},
		{name: "a form posted to the replay", method: "POST", path: "/api/replay", body: "states=dead", header: []string{"Content-Type", "application/x-www-form-urlencoded"}, code: 415, want: "the body must be JSON"},
		{name: "an empty body", method: "POST", path: "/api/replay", body: "", header: json, code: 400, want: "the body is empty"},
		{name: "a body that is not JSON", method: "POST", path: "/api/replay", body: `{"states": [`, header: json, code: 400, want: "the body is not a JSON object"},
		{name: "a JSON list", method: "POST", path: "/api/replay", body: `["dead"]`, header: json, code: 400, want: "the body is not a JSON object"},
		{name: "a JSON string", method: "POST", path: "/api/replay", body: `"dead"`, header: json, code: 400, want: "the body is not a JSON object"},
		{name: "an unknown field", method: "POST", path: "/api/replay", body: `{"state": "dead"}`, header: json, code: 400, want: "state: is not a field of a replay request; the fields are"},
		{name: "a field of the wrong type", method: "POST", path: "/api/replay", body: `{"states": "dead"}`, header: json, code: 400, want: `states: has the wrong type (string); give a list of text, such as ["dead"]`},
		{name: "dryRun as text", method: "POST", path: "/api/replay", body: `{"topic": "#", "dryRun": "yes"}`, header: json, code: 400, want: "dryRun: has the wrong type"},
		{name: "a replay that names no rows", method: "POST", path: "/api/replay", body: `{}`, header: json, code: 400, want: "say which rows"},
		{name: "a replay of processing rows", method: "POST", path: "/api/replay", body: `{"states": ["processing"]}`, header: json, code: 400, want: "processing"},
		{name: "an id that is not a UUID", method: "POST", path: "/api/replay", body: `{"ids": ["42; DROP TABLE outbox"]}`, header: json, code: 400, want: "is not a row id; give the id of a row, a UUID"},
		{name: "a bad topic pattern", method: "POST", path: "/api/replay", body: `{"topic": "order.*x"}`, header: json, code: 400, want: "mixes a wildcard"},
		{name: "a time that is neither", method: "POST", path: "/api/replay", body: `{"topic": "#", "since": "yesterday"}`, header: json, code: 400, want: "is neither an RFC 3339 time nor a duration"},
		{name: "an oversized body", method: "POST", path: "/api/replay", body: big, header: json, code: 400, want: "the body is longer than"},
		{name: "query parameters on the replay", method: "POST", path: "/api/replay?states=dead", body: `{"topic": "#"}`, header: json, code: 400, want: "states: is not a parameter of this request"},
		// Parameters of the listing.
		{name: "an unknown parameter", method: "GET", path: "/api/rows?stat=dead", code: 400, want: "stat: is not a parameter of this request; the parameters are"},
		{name: "a limit of zero", method: "GET", path: "/api/rows?limit=0", code: 400, want: "limit"},
		{name: "a limit that is not a number", method: "GET", path: "/api/rows?limit=all", code: 400, want: "limit"},
		{name: "a limit too large", method: "GET", path: "/api/rows?limit=10000000", code: 400, want: "limit"},
		{name: "an unknown state", method: "GET", path: "/api/rows?state=lost", code: 400, want: "lost"},
		{name: "a forged cursor", method: "GET", path: "/api/rows?after=not-a-cursor", code: 400, want: "after"},
		{name: "until before since", method: "GET", path: "/api/rows?since=1h&until=2h", code: 400, want: "until"},
		{name: "parameters on the stats", method: "GET", path: "/api/stats?verbose=1", code: 400, want: "verbose: is not a parameter"},
		{name: "a foreign host without a token", method: "GET", path: "/api/stats", header: []string{"Host", "evil.example.com"}, code: 403, want: "is not an address or localhost"},
	})
}

func TestBadAdminTokens(t *testing.T) {
	t.Parallel()
	const token = "s3cret-admin-token"
	json := []string{"Content-Type", "application/json"}
	runBadRequests(t, token, []badRequest{
		{name: "no token", method: "GET", path: "/api/rows", code: 401, want: "this route needs the admin token: send Authorization: Bearer <admin.token>"},
		{name: "no token on a replay", method: "POST", path: "/api/replay", body: `{"topic": "#"}`, header: json, code: 401, want: "needs the admin token"},
		{name: "a wrong token", method: "GET", path: "/api/rows", header: []string{"Authorization", "Bearer s3cret-admin-tokem"}, code: 401, want: "the token does not match admin.token"},
		{name: "a prefix of the token", method: "GET", path: "/api/rows", header: []string{"Authorization", "Bearer s3cret"}, code: 401, want: "does not match"},
		{name: "the token with more after it", method: "GET", path: "/api/rows", header: []string{"Authorization", "Bearer " + token + "x"}, code: 401, want: "does not match"},
		{name: "an empty bearer", method: "GET", path: "/api/rows", header: []string{"Authorization", "Bearer "}, code: 401, want: `is not "Bearer <token>"`},
		{name: "basic authentication", method: "GET", path: "/api/rows", header: []string{"Authorization", "Basic " + token}, code: 401, want: `is not "Bearer <token>"`},
		{name: "the token without a scheme", method: "GET", path: "/api/rows", header: []string{"Authorization", token}, code: 401, want: `is not "Bearer <token>"`},
		{name: "the token in the query string", method: "GET", path: "/api/rows?token=" + url.QueryEscape(token), code: 401, want: "needs the admin token"},
		{name: "a forged session cookie", method: "GET", path: "/api/stats", header: []string{"Cookie", "queuebox_admin=" + strings.Repeat("0", 64)}, code: 401, want: "needs the admin token"},
		{name: "the token as the cookie", method: "GET", path: "/api/stats", header: []string{"Cookie", "queuebox_admin=" + token}, code: 401, want: "needs the admin token"},
		{name: "metrics without the token", method: "GET", path: "/metrics", code: 401, want: "needs the admin token"},
		{name: "a wrong token on the login form", method: "POST", path: "/login", body: "token=nope", header: []string{"Content-Type", "application/x-www-form-urlencoded"}, code: 401, want: "That token does not match admin.token"},
		{name: "an oversized login form", method: "POST", path: "/login", body: "token=" + strings.Repeat("a", 10000), header: []string{"Content-Type", "application/x-www-form-urlencoded"}, code: 401, want: "does not match"},
	})
}
