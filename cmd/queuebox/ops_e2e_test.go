package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/queuebox/queuebox/admin"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// The commands that only read and replay rows run with the database
// settings alone: a destination's and an inbox source's secrets may be
// unset in the operator's shell. run and config check still need them,
// and say which.
func TestReadOnlyCommandsNeedOnlyTheDatabase(t *testing.T) {
	t.Parallel()
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
destinations:
  hook:
    type: http
    url: https://hooks.example.com/{{ topic }}
    signingSecrets: ["${QB_UNSET_NEW_SECRET}", "${QB_UNSET_OLD_SECRET}"]
    headers: { Authorization: "Bearer ${QB_UNSET_HOOK_TOKEN}" }
routes: [ { topicPattern: "#", destination: hook } ]
inbox:
  sources:
    shop: { type: http, topic: shop.order, token: "${QB_UNSET_SHOP_TOKEN}" }
`, dbURL))
	for _, args := range [][]string{
		{"migrate"}, {"migrate", "status"}, {"status"}, {"status", "--json"}, {"dead", "list"}, {"dead", "groups"},
		{"replay", "--topic", "#", "--dry-run"},
		{"destinations", "list"}, {"destinations", "pause", "hook", "--reason", "upgrade"}, {"destinations", "resume", "hook"},
	} {
		out, stderr, code := run(t, append(args, "--config", cfg)...)
		if code != 0 {
			t.Errorf("queuebox %s with unset secrets: exit %d\n%s%s", strings.Join(args, " "), code, out, stderr)
		}
	}
	out, _, _ := run(t, "status", "--config", cfg)
	if !strings.Contains(out, "pending     0") {
		t.Errorf("status:\n%s", out)
	}
	_, stderr, code := run(t, "config", "check", "--config", cfg)
	for _, want := range []string{"QB_UNSET_NEW_SECRET is not set", "QB_UNSET_OLD_SECRET is not set", "QB_UNSET_HOOK_TOKEN is not set", "QB_UNSET_SHOP_TOKEN is not set"} {
		if code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("config check: exit %d, lacks %q:\n%s", code, want, stderr)
		}
	}
	if _, stderr, code := run(t, "run", "--config", cfg); code != 2 || !strings.Contains(stderr, "QB_UNSET_SHOP_TOKEN is not set") {
		t.Errorf("run with unset secrets: exit %d\n%s", code, stderr)
	}
}

// dead list's --json, --destination, --error-contains in any case and the
// note when --limit cut the list; dead groups with ids and warnings; and
// replay --group, which replays a group whose failure would recur only
// with --yes.
func TestDeadListGroupsAndReplayGroup(t *testing.T) {
	t.Parallel()
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
destinations:
  orders-webhook: { type: http, url: "https://orders.example.com/hook", nonRetryableStatus: [410] }
  ledger: { type: http, url: "https://ledger.example.com/in" }
routes:
  - { name: orders, topicPattern: "order.#", destination: orders-webhook }
  - { topicPattern: "invoice.#", destination: ledger }
`, dbURL))
	if _, stderr, code := run(t, "migrate", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	d := openPostgres(t, dbURL)
	ctx := context.Background()
	rows := append(testkit.Rows(3, "order.created", nil), testkit.Row("invoice.sent"))
	rows = append(rows, testkit.Rows(2, "shipment.sent", nil)...)
	if err := d.OutboxInsert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `UPDATE outbox SET state = 'dead', updated_at = now(), last_error = CASE
		WHEN topic LIKE 'order.%' THEN 'HTTP 410 Gone: order ' || id || ' is gone'
		WHEN topic LIKE 'invoice.%' THEN 'HTTP 503 Service Unavailable: ledger down'
		ELSE 'no route matches topic "' || topic || '"' END,
		attempt = CASE WHEN topic LIKE 'invoice.%' THEN 5 ELSE 0 END`); err != nil {
		t.Fatal(err)
	}

	out, _, code := run(t, "dead", "list", "--json", "--config", cfg)
	var list admin.DeadList
	if err := json.Unmarshal([]byte(out), &list); err != nil || code != 0 || len(list.Rows) != 6 || list.More || list.Limit != 100 {
		t.Fatalf("dead list --json: %v\n%s", err, out)
	}
	for _, r := range list.Rows {
		want := map[string]string{"order.created": "orders-webhook", "invoice.sent": "ledger", "shipment.sent": ""}[r.Topic]
		if r.Destination != want || r.MaxTries != 6 || (r.Topic == "invoice.sent") != (r.Try == 6) {
			t.Errorf("dead list --json row: %+v", r)
		}
	}
	out, _, _ = run(t, "dead", "list", "--destination", "orders-webhook", "--config", cfg)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || !strings.Contains(lines[1], "orders-webhook  try 1 of 6") {
		t.Errorf("dead list --destination orders-webhook:\n%s", out)
	}
	if _, stderr, code := run(t, "dead", "list", "--destination", "orders", "--config", cfg); code != 2 ||
		!strings.Contains(stderr, `--destination "orders": is not a destination of`) || !strings.Contains(stderr, "the destinations are ledger, orders-webhook") {
		t.Errorf("an unknown destination: exit %d %s", code, stderr)
	}
	out, _, _ = run(t, "dead", "list", "--error-contains", "http 410 GONE", "--config", cfg)
	if n := strings.Count(out, "order.created"); n != 3 {
		t.Errorf("--error-contains in another case: %d rows\n%s", n, out)
	}
	out, _, _ = run(t, "dead", "list", "--limit", "2", "--config", cfg)
	if !strings.Contains(out, "showing 2 of more than 2; raise --limit (up to 10000) or narrow the filter") {
		t.Errorf("a list cut by --limit:\n%s", out)
	}

	out, _, code = run(t, "dead", "groups", "--json", "--config", cfg)
	var gs admin.DeadGroups
	if err := json.Unmarshal([]byte(out), &gs); err != nil || code != 0 || len(gs.Groups) != 3 {
		t.Fatalf("dead groups --json: %v\n%s", err, out)
	}
	id := map[string]string{}
	for _, g := range gs.Groups {
		id[g.Destination] = g.ID
	}
	text, _, _ := run(t, "dead", "groups", "--config", cfg)
	for _, want := range []string{"3 groups of 6 dead rows.", id["orders-webhook"] + "  orders-webhook (route orders)  3 rows",
		"error:    HTTP 410 Gone: order <id> is gone", "warning:  orders-webhook answered HTTP 410, which its nonRetryableStatus makes final.",
		"replay:   queuebox replay --group " + id["ledger"], `warning:  No route matches topic "shipment.sent" in the configuration.`} {
		if !strings.Contains(text, want) {
			t.Errorf("dead groups lacks %q:\n%s", want, text)
		}
	}
	if strings.Count(text, "warning:") != 2 {
		t.Errorf("dead groups warns of the ledger's 503, which a replay may cure:\n%s", text)
	}
	// A group ids stay the same from one look to the next.
	if again, _, _ := run(t, "dead", "groups", "--config", cfg); !strings.Contains(again, id["orders-webhook"]+"  orders-webhook") {
		t.Errorf("the group's id changed:\n%s", again)
	}

	dead := func() int64 {
		st, err := d.OutboxStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Rows[dialects.Dead]
	}
	out, stderr, code := run(t, "replay", "--group", id["orders-webhook"], "--config", cfg)
	if code != 1 || !strings.Contains(stderr, "warning: orders-webhook answered HTTP 410") ||
		!strings.Contains(stderr, "nothing replayed: the 3 rows of group "+id["orders-webhook"]+" would fail again; fix the cause first, or replay anyway with --yes") || dead() != 6 {
		t.Fatalf("replay of a group whose failure recurs, without --yes: exit %d\n%s%s", code, out, stderr)
	}
	if out, stderr, code := run(t, "replay", "--group", id["orders-webhook"], "--dry-run", "--config", cfg); code != 0 ||
		!strings.Contains(out, "3 rows would be replayed") || !strings.Contains(stderr, "warning:") || dead() != 6 {
		t.Errorf("a dry run of that group: exit %d\n%s%s", code, out, stderr)
	}
	if out, stderr, code := run(t, "replay", "--group", id[""], "--yes", "--config", cfg); code != 0 || !strings.Contains(out, "2 rows replayed: back to pending") || dead() != 4 {
		t.Errorf("replay --yes of the group without a route: exit %d\n%s%s", code, out, stderr)
	}
	if out, stderr, code := run(t, "replay", "--group", id["ledger"], "--config", cfg); code != 0 || stderr != "" || dead() != 3 ||
		!strings.Contains(out, "1 row replayed: back to pending with attempt 0. The relay tries it again; if it fails again, it goes dead again (`queuebox dead list`).") {
		t.Errorf("replay of the ledger's group: exit %d\n%s%s", code, out, stderr)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--group", "g-00000000"}, 1, "--group g-00000000: no group of the newest 1000 dead rows has this id"},
		{[]string{"--group", "orders"}, 2, `--group "orders": is not a group id`},
		{[]string{"--group", id["orders-webhook"], "--topic", "order.#"}, 2, "--group replays one group as `queuebox dead groups` shows it, and takes no filter (--topic)"},
		{[]string{"--topic", "order.#", "--yes"}, 2, "--yes: confirms the replay of a group"},
	} {
		if _, stderr, code := run(t, append(append([]string{"replay"}, c.args...), "--config", cfg)...); code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("replay %s: exit %d %s; want %d and %q", strings.Join(c.args, " "), code, stderr, c.code, c.want)
		}
	}
	if dead() != 3 {
		t.Errorf("refused replays changed rows: %d dead", dead())
	}
}

// A configuration that is not YAML is reported with its line, its column
// and what to check, not the parser's message alone.
func TestYAMLSyntaxErrorOfTheBinary(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, "database:\n  url: postgres://localhost/app\n    maxConnections: 5\nroutes: []\n")
	_, stderr, code := run(t, "config", "check", "--config", cfg)
	if code != 2 || !strings.Contains(stderr, "(file) (line 3, column 5): this key is indented deeper than the keys above it; check the indentation on line 3") ||
		strings.Contains(stderr, "yaml:") {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
}

// GET /api/rows and POST /api/replay take destination, as dead list and
// replay take --destination: the rows whose topic the routes send there. A
// name that is no destination is refused with the list of those that are.
func TestAPIRowsAndReplayByDestination(t *testing.T) {
	t.Parallel()
	recv := testrecv.New(t, func(r *testrecv.Request) (int, string, map[string]string) { return 410, "gone", nil })
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
outbox: { pollIntervalMs: 100 }
destinations:
  orders-webhook: { type: http, url: "%s/orders", nonRetryableStatus: [410] }
  ledger: { type: http, url: "%s/ledger", nonRetryableStatus: [410] }
routes:
  - { topicPattern: "order.#", destination: orders-webhook }
  - { topicPattern: "#", destination: ledger }
admin: { listen: "127.0.0.1:0" }
`, dbURL, recv.URL, recv.URL))
	if _, stderr, code := run(t, "migrate", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	d := openPostgres(t, dbURL)
	ctx := context.Background()
	if err := d.OutboxInsert(ctx, append(testkit.Rows(2, "order.created", nil), testkit.Row("invoice.sent"))); err != nil {
		t.Fatal(err)
	}
	r := startRelay(t, "--config", cfg)
	page := r.pageURL(t)
	testkit.Eventually(t, "3 dead rows", 0, func() error {
		if st, err := d.OutboxStats(ctx); err != nil || st.Rows[dialects.Dead] != 3 {
			return fmt.Errorf("%+v %v", st.Rows, err)
		}
		return nil
	})
	var list struct {
		Rows []struct {
			Topic       string `json:"topic"`
			Destination string `json:"destination"`
		} `json:"rows"`
	}
	code, body := httpGet(t, page+"api/rows?destination=orders-webhook", "")
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.Rows) != 2 ||
		list.Rows[0].Destination != "orders-webhook" || list.Rows[1].Destination != "orders-webhook" {
		t.Errorf("GET /api/rows?destination=orders-webhook: %d %s", code, body)
	}
	for q, want := range map[string]string{
		"destination=crm":                       `destination \"crm\": is not a destination of the configuration; the destinations are ledger, orders-webhook`,
		"destination=ledger&destination=ledger": "destination: is given more than once",
	} {
		if code, body := httpGet(t, page+"api/rows?"+q, ""); code != 400 || !strings.Contains(body, want) {
			t.Errorf("GET /api/rows?%s: %d %s; want 400 and %s", q, code, body, want)
		}
	}
	post := func(body string) (int, string) {
		res, err := http.Post(page+"api/replay", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	// The destination alone names rows: a replay by it is no bare replay.
	if code, body := post(`{"destination": "ledger", "dryRun": true}`); code != 200 || !strings.Contains(body, `"rows": 1,`) {
		t.Errorf("POST /api/replay by destination, dry run: %d %s", code, body)
	}
	if code, body := post(`{"destination": "crm"}`); code != 400 || !strings.Contains(body, `destination \"crm\": is not a destination of the configuration`) {
		t.Errorf("POST /api/replay to no destination: %d %s", code, body)
	}
	if code, body := post(`{"destination": "orders-webhook", "topic": "order.#"}`); code != 200 || !strings.Contains(body, `"rows": 2,`) {
		t.Errorf("POST /api/replay by destination and topic: %d %s", code, body)
	}
	// The orders rows are tried again (and refused again); the ledger's
	// row, which only the dry run selected, is not.
	tries := func() (orders, others int) {
		for _, q := range recv.Requests() {
			if strings.HasPrefix(q.Topic, "order.") {
				orders++
			} else {
				others++
			}
		}
		return orders, others
	}
	testkit.Eventually(t, "the orders rows tried again", 0, func() error {
		if o, x := tries(); o != 4 || x != 1 {
			return fmt.Errorf("%d requests for orders, %d for the ledger", o, x)
		}
		return nil
	})
	r.stop(t)
}
