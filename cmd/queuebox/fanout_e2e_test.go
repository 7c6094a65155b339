package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/queuebox/queuebox/admin"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// fanOutConfig routes order.* to three destinations (a fan-out) and
// invoice.* to the ledger alone; the ledger sends to ledgerURL, the others
// to url.
func fanOutConfig(t *testing.T, dbURL, url, ledgerURL, extra string) string {
	t.Helper()
	return writeConfig(t, fmt.Sprintf(`database: { url: %q }
outbox:
  pollIntervalMs: 100
  backoff: { initialMs: 3600000, maxMs: 3600000 }
destinations:
  orders-webhook: { type: http, url: "%s/orders" }
  ledger: { type: http, url: "%s/ledger", nonRetryableStatus: [410] }
  crm: { type: http, url: "%s/crm" }
routes:
  - { name: orders, topicPattern: "order.#", destinations: [orders-webhook, ledger, crm] }
  - { name: invoices, topicPattern: "invoice.#", destination: ledger }
%s`, dbURL, url, ledgerURL, url, extra))
}

// fanOutRow inserts an order row and ends its pass as the relay does:
// delivered, orders-webhook delivered with it, the ledger dead (HTTP
// 410), the crm to be retried in an hour (HTTP 503). It returns the row's
// id.
func fanOutRow(t *testing.T, d *postgres.Dialect, key string) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	id := uuid.New()
	if err := d.OutboxInsert(ctx, []dialects.NewRow{testkit.Row("order.created", testkit.Key(key), testkit.ID(id), testkit.Payload(`{"order": 7}`))}); err != nil {
		t.Fatal(err)
	}
	c, err := d.OutboxClaim(ctx, dialects.ClaimParams{Limit: 100, Lease: time.Minute, Token: uuid.New()})
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []dialects.Outcome
	for _, r := range c.Rows {
		o := dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeRelease}
		if r.ID == id {
			o = dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeDelivered, Copies: []dialects.Copy{
				{Destination: "ledger", Kind: dialects.CopyDead, Error: "HTTP 410 Gone: order " + id.String() + " is gone"},
				{Destination: "crm", Kind: dialects.CopyRetry, Attempt: 1, Delay: time.Hour, Error: "HTTP 503 Service Unavailable: crm down"},
			}}
		}
		outcomes = append(outcomes, o)
	}
	if _, err := d.OutboxComplete(ctx, outcomes); err != nil {
		t.Fatal(err)
	}
	return id
}

// rows show lists each destination of a fan-out row; dead list and dead
// groups list the dead copy with its destination; replay --destination
// replays one destination's copies and nothing of the others, backfills
// with --state delivered, keeps its other flags and refuses a destination
// the configuration does not have; status counts the copies per
// destination and state.
func TestFanOutCommands(t *testing.T) {
	t.Parallel()
	dbURL := testdb.Database(t)
	cfg := fanOutConfig(t, dbURL, "http://127.0.0.1:9", "http://127.0.0.1:9", "")
	if _, stderr, code := run(t, "migrate", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	d := openPostgres(t, dbURL)
	id := fanOutRow(t, d, "cust-1")

	out, stderr, code := run(t, "rows", "show", id.String(), "--config", cfg)
	for _, want := range []string{"destination     orders-webhook, ledger, crm (route orders)",
		"state           delivered (the row's pass; each destination's state is under destinations)",
		"orders-webhook  delivered (with the row)", "ledger          dead (copy)", "crm             pending (copy)",
		"try 2 of 6, attempt 1", "HTTP 503 Service Unavailable: crm down"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("rows show lacks %q (exit %d):\n%s%s", want, code, out, stderr)
		}
	}
	out, _, _ = run(t, "rows", "show", id.String(), "--json", "--config", cfg)
	var detail admin.RowDetailView
	if err := json.Unmarshal([]byte(out), &detail); err != nil || len(detail.Destinations) != 3 || !detail.Destinations[0].WithRow ||
		detail.Destinations[1].State != "dead" || detail.Destinations[2].DueAt == nil {
		t.Errorf("rows show --json: %v\n%s", err, out)
	}

	out, _, code = run(t, "dead", "list", "--config", cfg)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 3 ||
		!regexp.MustCompile(`^ID\s+DEAD\s+TOPIC`).MatchString(lines[0]) ||
		!regexp.MustCompile(id.String()+`\s+copy\s+order.created\s+cust-1\s+ledger\s+try 1 of 6`).MatchString(lines[1]) ||
		!strings.HasPrefix(lines[2], "copy: the destination's part of a fan-out row is dead") {
		t.Errorf("dead list:\n%s", out)
	}
	if out, _, _ = run(t, "dead", "list", "--destination", "crm", "--config", cfg); strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("dead list --destination crm (its copy is pending):\n%s", out)
	}
	out, _, _ = run(t, "dead", "list", "--destination", "ledger", "--json", "--config", cfg)
	var list admin.DeadList
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Rows) != 1 || list.Rows[0].CopyID == nil || list.Rows[0].ID != id ||
		list.Rows[0].Destination != "ledger" {
		t.Errorf("dead list --destination ledger --json: %v\n%s", err, out)
	}

	out, _, _ = run(t, "dead", "groups", "--config", cfg)
	m := regexp.MustCompile(`(?m)^(g-[0-9a-f]{8})  ledger \(route orders\)  1 dead copy \(this destination's part of a fan-out row\)`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "1 group of 0 dead rows and 1 dead copy of fan-out rows.") ||
		!strings.Contains(out, "ledger answered HTTP 410, which its nonRetryableStatus makes final") {
		t.Fatalf("dead groups:\n%s", out)
	}
	if out, stderr, code = run(t, "replay", "--group", m[1], "--dry-run", "--config", cfg); code != 0 ||
		!strings.Contains(out, "1 copy of ledger would be replayed") {
		t.Errorf("replay --group of copies, dry run: exit %d\n%s%s", code, out, stderr)
	}

	if _, stderr, code = run(t, "replay", "--destination", "billing", "--config", cfg); code != 2 ||
		!strings.Contains(stderr, `--destination "billing": is not a destination of`) || !strings.Contains(stderr, "the destinations are crm, ledger, orders-webhook") {
		t.Errorf("an unknown destination: exit %d %s", code, stderr)
	}
	// Every filter still works with a destination.
	out, stderr, code = run(t, "replay", "--destination", "ledger", "--topic", "order.#", "--key", "cust-1", "--since", "1h",
		"--error-contains", "gone", "--id", id.String(), "--dry-run", "--config", cfg)
	if code != 0 || !strings.Contains(out, "1 copy of ledger would be replayed") || !strings.Contains(out, "Dry run: nothing changed.") {
		t.Errorf("replay --destination ledger with every filter, dry run: exit %d\n%s%s", code, out, stderr)
	}
	if out, _, _ = run(t, "replay", "--destination", "ledger", "--key", "cust-2", "--dry-run", "--config", cfg); !strings.Contains(out, "0 copies of ledger would be replayed") {
		t.Errorf("another key:\n%s", out)
	}
	out, stderr, code = run(t, "replay", "--destination", "ledger", "--config", cfg)
	if code != 0 || !strings.Contains(out, "0 rows replayed") || !strings.Contains(out, "1 copy of ledger replayed") {
		t.Errorf("replay --destination ledger: exit %d\n%s%s", code, out, stderr)
	}
	out, _, _ = run(t, "rows", "show", id.String(), "--config", cfg)
	if !regexp.MustCompile(`ledger\s+pending \(copy\)\s+try 1 of 6, attempt 0`).MatchString(out) || !strings.Contains(out, "orders-webhook  delivered (with the row)") {
		t.Errorf("rows show after the ledger's replay:\n%s", out)
	}
	if st, err := d.OutboxStats(context.Background()); err != nil || st.Rows[dialects.Delivered] != 1 || st.Rows[dialects.Pending] != 0 {
		t.Errorf("the row itself changed: %+v %v", st.Rows, err)
	}

	// orders-webhook was delivered with the row: --state delivered gives it
	// a copy (a backfill), once.
	out, _, _ = run(t, "replay", "--destination", "orders-webhook", "--state", "delivered", "--dry-run", "--config", cfg)
	if !strings.Contains(out, "1 copy of orders-webhook would be created for delivered fan-out rows that had none") {
		t.Errorf("backfill dry run:\n%s", out)
	}
	out, _, _ = run(t, "replay", "--destination", "orders-webhook", "--state", "delivered", "--config", cfg)
	if !strings.Contains(out, "1 copy of orders-webhook created for delivered fan-out rows that had none") {
		t.Errorf("backfill:\n%s", out)
	}
	if out, _, _ = run(t, "replay", "--destination", "orders-webhook", "--state", "delivered", "--config", cfg); !strings.Contains(out, "Nothing matched") {
		t.Errorf("a second backfill:\n%s", out)
	}

	out, _, code = run(t, "status", "--config", cfg)
	if code != 0 || !strings.Contains(out, "copies of fan-out rows per destination") ||
		!regexp.MustCompile(`(?m)^  crm\s+1\s+0\s+0\s+0\s`).MatchString(out) || !regexp.MustCompile(`(?m)^  ledger\s+1\s+0\s+0\s+0\s`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^  orders-webhook\s+1\s+0\s+0\s+0\s`).MatchString(out) {
		t.Errorf("status:\n%s", out)
	}
	out, _, _ = run(t, "status", "--json", "--config", cfg)
	var st admin.Stats
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Copies) != 3 || st.Copies[1].Destination != "ledger" || st.Copies[1].Copies["pending"] != 1 {
		t.Errorf("status --json: %v\n%s", err, out)
	}
}

// The page of a relay with a fan-out route shows the copies per
// destination, the dead copy's group, and in the row's view each
// destination's state; a copy's replay button replays that destination
// only, and the relay delivers it there.
func TestFanOutOnTheAdminPage(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a browser")
	}
	browser := chromium(t)
	t.Parallel()
	recv := testrecv.New(t, func(r *testrecv.Request) (int, string, map[string]string) { return 204, "", nil })
	ledger := testrecv.New(t, func(r *testrecv.Request) (int, string, map[string]string) { return 204, "", nil })
	dbURL := testdb.Database(t)
	cfg := fanOutConfig(t, dbURL, recv.URL, ledger.URL, `admin: { listen: "127.0.0.1:0" }`+"\n")
	if _, stderr, code := run(t, "migrate", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	d := openPostgres(t, dbURL)
	id := fanOutRow(t, d, "cust-9")
	r := startRelay(t, "--config", cfg)
	page := r.pageURL(t)

	tab := browserTab(t, browser)
	if err := chromedp.Do(tab, chromedp.Navigate(page)); err != nil {
		t.Fatalf("opening %s: %v", page, err)
	}
	until := func(what, predicate string) {
		t.Helper()
		if _, err := chromedp.Run(tab, chromedp.Poll[bool](predicate, chromedp.WithPollingInterval(100*time.Millisecond),
			chromedp.WithPollingTimeout(60*time.Second))); err != nil {
			text, _ := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector("main").innerText`))
			t.Fatalf("the page never showed %s (%v); it shows:\n%s\n%s", what, err, text, r.log())
		}
	}
	copiesRow := func(dest string) string {
		return `(document.querySelector('#copies-table tr[data-destination="` + dest + `"]') || {innerText: ""}).innerText`
	}
	until("the copies per destination", `!document.querySelector("#copies").hidden && `+
		`/^ledger\s+0\s+0\s+0\s+1\s/.test(`+copiesRow("ledger")+`) && /^crm\s+1\s+0\s+0\s+0\s/.test(`+copiesRow("crm")+`)`)
	until("the ledger's group of dead copies", `(document.querySelector('#dead-groups tr.dead-group.copies[data-destination="ledger"]') || {innerText: ""}).innerText.includes("copies of fan-out rows")`)

	if _, err := chromedp.Run(tab, chromedp.Evaluate[bool](`document.querySelector("#row-id").value = `+jsString(id.String())+
		`; document.querySelector("#row-form button").click(); true`)); err != nil {
		t.Fatal(err)
	}
	dest := func(name string) string {
		return `(document.querySelector('#row-destinations tr[data-destination="` + name + `"]') || {innerText: ""}).innerText`
	}
	until("each destination's state", dest("orders-webhook")+`.includes("delivered (with the row)") && `+
		dest("ledger")+`.includes("HTTP 410 Gone") && `+dest("crm")+`.includes("try 2 of 6, attempt 1") && `+
		`document.querySelector("#row-detail dl").innerText.includes("orders-webhook, ledger, crm")`)
	button := `#row-destinations tr[data-destination="ledger"] button.replay`
	for range 2 { // the first click arms it, the second replays
		if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(button))); err != nil {
			t.Fatal(err)
		}
	}
	until("the replay's result", `document.querySelector("#replay-result").textContent.startsWith("1 copy of ledger back to pending")`)
	ledger.WaitDelivered(t, 1, 0)
	if got := ledger.Requests(); len(got) != 1 || got[0].ID != id.String() {
		t.Errorf("the ledger got %+v, want the replayed copy with the row's id", got)
	}
	if n := len(recv.Requests()); n != 0 {
		t.Errorf("the other destinations got %d requests after the ledger's replay", n)
	}
	shot(t, tab, "admin-page-fan-out.png")
	r.stop(t)
}
