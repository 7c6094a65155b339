package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testbin"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// relayProcess is `queuebox run` of the real binary, its logs read as they
// come.
type relayProcess struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	logs  strings.Builder
	page  chan string
	ended chan error
}

// startRelay runs the binary and waits for the admin listener's log line,
// which names the address it picked.
func startRelay(t *testing.T, args ...string) *relayProcess {
	t.Helper()
	r := &relayProcess{cmd: exec.Command(testbin.Path(t), append([]string{"run"}, args...)...), page: make(chan string, 1), ended: make(chan error, 1)}
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.cmd.Process.Kill() })
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			r.mu.Lock()
			r.logs.WriteString(line + "\n")
			r.mu.Unlock()
			var rec struct {
				Msg  string `json:"msg"`
				Page string `json:"page"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "admin listening" {
				r.page <- rec.Page
			}
		}
		r.ended <- r.cmd.Wait()
	}()
	return r
}

func (r *relayProcess) log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.logs.String()
}

// pageURL waits for the admin listener's address.
func (r *relayProcess) pageURL(t *testing.T) string {
	t.Helper()
	select {
	case u := <-r.page:
		return u
	case err := <-r.ended:
		t.Fatalf("queuebox run ended (%v) before the admin listener listened:\n%s", err, r.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("no admin listening line:\n%s", r.log())
	}
	return ""
}

// stop sends SIGTERM and expects exit 0.
func (r *relayProcess) stop(t *testing.T) {
	t.Helper()
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-r.ended:
		if err != nil {
			t.Errorf("queuebox run exited with %v after SIGTERM:\n%s", err, r.log())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("queuebox run did not stop after SIGTERM")
	}
}

func httpGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func openPostgres(t *testing.T, dbURL string) *postgres.Dialect {
	t.Helper()
	d, err := postgres.Open(context.Background(), postgres.Options{URL: dbURL, Names: dialects.DefaultNames()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// A bare `migrate` applies the migrations; status reports the oldest due
// row (not one scheduled ahead), the rows scheduled later, and rows whose
// state was written by hand.
func TestMigrateBareAndStatusOfDueRows(t *testing.T) {
	t.Parallel()
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
destinations: { n: { type: "null" } }
routes: [ { topicPattern: "#", destination: n } ]
`, dbURL))
	if _, stderr, code := run(t, "migrate", "nope", "--config", cfg); code != 2 || !strings.Contains(stderr, `unknown command "nope" for "queuebox migrate"`) {
		t.Fatalf("migrate nope: %d %s", code, stderr)
	}
	if out, _, code := run(t, "migrate", "status", "--config", cfg); code != 0 || !strings.Contains(out, "pending: run `queuebox migrate up`") {
		t.Fatalf("a refused migrate applied something:\n%s", out)
	}
	out, stderr, code := run(t, "migrate", "--config", cfg)
	if code != 0 || !strings.Contains(out, "applied V1 create_outbox") {
		t.Fatalf("bare migrate: %d %s %s", code, out, stderr)
	}
	if out, _, code = run(t, "migrate", "--config", cfg); code != 0 || !strings.Contains(out, "The schema is current") {
		t.Fatalf("bare migrate again: %d %s", code, out)
	}

	d := openPostgres(t, dbURL)
	ctx := context.Background()
	due, ahead := time.Now().Add(-90*time.Minute), time.Now().Add(time.Hour)
	if err := d.OutboxInsert(ctx, []dialects.NewRow{
		testkit.Row("late", testkit.ScheduledAt(due)),
		testkit.Row("ahead", testkit.ScheduledAt(ahead)),
		testkit.Row("ahead", testkit.ScheduledAt(ahead)),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `INSERT INTO outbox (topic, payload, state) VALUES ('manual', '{}', 'paused')`); err != nil {
		t.Fatal(err)
	}
	out, _, code = run(t, "status", "--config", cfg)
	for _, want := range []string{"pending     3", "oldest due pending: 1h30m", "scheduled later: 2 (pending rows not due yet",
		"paused      1  (not a QueueBox state: written by hand"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = run(t, "status", "--json", "--config", cfg)
	var st struct {
		Rows           map[string]int64 `json:"rows"`
		OtherStates    map[string]int64 `json:"otherStates"`
		OldestDue      float64          `json:"oldestDuePendingSeconds"`
		ScheduledLater int64            `json:"scheduledLater"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.OtherStates["paused"] != 1 || st.ScheduledLater != 2 ||
		st.OldestDue < 5390 || st.OldestDue > 5500 || st.Rows["pending"] != 3 {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
}

// The admin listener of the binary: /healthz open, everything else behind
// the token; a listener beyond loopback without a token, or a port in use,
// stops the start and touches nothing.
func TestAdminListenerOfTheBinary(t *testing.T) {
	t.Parallel()
	dbURL := testdb.Database(t)
	const token = "admin-t0ken-for-the-test"
	body := fmt.Sprintf(`database: { url: %q }
destinations: { n: { type: "null" } }
routes: [ { topicPattern: "#", destination: n } ]
`, dbURL)

	// Refused at start: beyond loopback without a token (exit 2), a port
	// in use (exit 1). Neither migrates anything.
	_, stderr, code := run(t, "run", "--migrate", "--config", writeConfig(t, body+"admin: { listen: \"0.0.0.0:0\" }\n"))
	if code != 2 || !strings.Contains(stderr, `admin.listen (line 4): "0.0.0.0:0" is reachable from other machines, and admin.token is empty; set admin.token, or listen on 127.0.0.1`) {
		t.Errorf("beyond loopback without a token: exit %d\n%s", code, stderr)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, stderr, code = run(t, "run", "--migrate", "--config", writeConfig(t, body+fmt.Sprintf("admin: { listen: %q }\n", busy.Addr())))
	if code != 1 || !strings.Contains(stderr, "admin.listen "+busy.Addr().String()+": the address is already in use") {
		t.Errorf("a port in use: exit %d\n%s", code, stderr)
	}
	if out, _, _ := run(t, "migrate", "status", "--config", writeConfig(t, body)); !strings.Contains(out, "pending: run `queuebox migrate up`") {
		t.Fatalf("a refused start migrated the database:\n%s", out)
	}

	cfg := writeConfig(t, body+fmt.Sprintf("admin: { listen: \"127.0.0.1:0\", token: %q }\n", token))
	r := startRelay(t, "--migrate", "--config", cfg)
	page := r.pageURL(t)
	if !strings.HasPrefix(page, "http://127.0.0.1:") || strings.HasSuffix(page, ":0/") {
		t.Fatalf("the log names %q as the page", page)
	}
	if code, body := httpGet(t, page+"healthz", ""); code != 200 || body != "ok\n" {
		t.Errorf("/healthz without a token: %d %q", code, body)
	}
	for _, path := range []string{"readyz", "metrics", "api/stats", "api/rows", "api/dead-groups", "api/blocked-keys"} {
		if code, body := httpGet(t, page+path, ""); code != 401 || !strings.Contains(body, "needs the admin token: send Authorization: Bearer <admin.token>") {
			t.Errorf("/%s without a token: %d %s", path, code, body)
		}
		if code, body := httpGet(t, page+path, "wrong"); code != 401 || !strings.Contains(body, "the token does not match admin.token") {
			t.Errorf("/%s with a wrong token: %d %s", path, code, body)
		}
	}
	testkit.Eventually(t, "/readyz to answer ready", 0, func() error {
		if code, body := httpGet(t, page+"readyz", token); code != 200 || body != "ready\n" {
			return fmt.Errorf("/readyz: %d %s", code, body)
		}
		return nil
	})
	if code, body := httpGet(t, page+"api/rows?id=12", token); code != 400 || !strings.Contains(body, `id \"12\": is not a row id`) {
		t.Errorf("a malformed id: %d %s", code, body)
	}
	if code, body := httpGet(t, page+"metrics", token); code != 200 || !strings.Contains(body, "queuebox_claimed_rows_total") ||
		!regexp.MustCompile(`(?m)^queuebox_build_info\{commit="[^"]+",goversion="go[^"]+",version="[^"]+"\} 1$`).MatchString(body) {
		t.Errorf("/metrics with the token: %d, or no queuebox_build_info", code)
	}
	r.stop(t)
	if strings.Contains(r.log(), token) {
		t.Errorf("the token appears in the logs:\n%s", r.log())
	}
}

// chromium is the path of the browser the page test drives: the
// distribution's, which scripts/install-chromium.sh installs, or
// QUEUEBOX_CHROMIUM. scripts/test.sh sets QUEUEBOX_CHROMIUM, so under `make
// test` a missing browser fails the test; a plain `go test` without it
// skips.
func chromium(t *testing.T) string {
	p, set := os.LookupEnv("QUEUEBOX_CHROMIUM")
	if !set || p == "" {
		p = "/usr/bin/chromium"
	}
	if _, err := os.Stat(p); err != nil {
		if set {
			t.Fatalf("no browser at %s (QUEUEBOX_CHROMIUM): scripts/install-chromium.sh installs Debian's chromium there", p)
		}
		t.Skipf("no browser at %s: scripts/install-chromium.sh installs it (scripts/test.sh runs it), or set QUEUEBOX_CHROMIUM", p)
	}
	return p
}

// browserTab starts the headless browser with a profile of its own and
// returns its first tab; both end with the test.
func browserTab(t *testing.T, browser string) context.Context {
	t.Helper()
	profile, err := os.MkdirTemp("", "queuebox-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The browser's helpers may write a moment after it stops.
		_ = testkit.Poll(5*time.Second, func() error { return os.RemoveAll(profile) })
	})
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(browser),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 1000),
		chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true), chromedp.Flag("no-first-run", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
	)
	tab, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	return tab
}

// The page in a real headless browser: it shows the counts, the dead rows
// grouped by failure, a blocked key and the inbox's received messages per
// source; the replay button of one group puts its rows back, and the page
// then shows them delivered. A screenshot is kept in artifacts/
// (docs/images/admin-page.png is a copy).
func TestAdminPageInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a browser")
	}
	browser := chromium(t)
	t.Parallel()
	var accepting atomic.Bool
	recv := testrecv.New(t, func(r *testrecv.Request) (int, string, map[string]string) {
		switch {
		case strings.HasPrefix(r.Topic, "invoice."):
			return 503, "ledger service unavailable, retry later", nil
		case !accepting.Load():
			return 410, fmt.Sprintf("order %s is gone (request %d)", r.ID, r.Sequence), nil
		}
		return 204, "", nil
	})
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
outbox:
  pollIntervalMs: 100
  backoff: { initialMs: 120000, maxMs: 600000 }
destinations:
  orders-webhook: { type: http, url: "%s/orders", nonRetryableStatus: [410] }
  ledger: { type: http, url: "%s/ledger" }
routes:
  - { name: orders, topicPattern: "order.#", destination: orders-webhook }
  - { topicPattern: "invoice.#", destination: ledger }
admin: { listen: "127.0.0.1:0" }
inbox:
  relay: { enabled: false }
  sources:
    web: { type: http, topic: "web.in" }
`, dbURL, recv.URL, recv.URL))
	if _, stderr, code := run(t, "migrate", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	d := openPostgres(t, dbURL)
	ctx := context.Background()
	rows := testkit.Rows(4, "order.created", func(i int) []testkit.RowOption {
		return []testkit.RowOption{testkit.Payload(fmt.Sprintf(`{"order": %d}`, i))}
	})
	rows = append(rows, testkit.Rows(2, "shipment.sent", nil)...)
	rows = append(rows, testkit.Row("invoice.sent", testkit.Key("acct-7"), testkit.Payload(`{"n": 1}`)),
		testkit.Row("invoice.sent", testkit.Key("acct-7"), testkit.Payload(`{"n": 2}`)))
	if err := d.OutboxInsert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	r := startRelay(t, "--config", cfg)
	page := r.pageURL(t)
	if err := testkit.Poll(0, func() error {
		st, err := d.OutboxStats(ctx)
		if err == nil && (st.Rows[dialects.Dead] != 6 || st.ScheduledLater != 1) {
			err = fmt.Errorf("%+v", st)
		}
		return err
	}); err != nil {
		t.Fatalf("the rows did not fail as planned: %v\n%s", err, r.log())
	}
	accepting.Store(true)

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
	count := func(state string) string { return `document.querySelector("#count-` + state + `").textContent` }
	until("6 dead rows and 2 pending", count("dead")+` === "6" && `+count("pending")+` === "2"`)
	// Three messages through the HTTP inbox source, one of them twice; the
	// inbox relay is off, so they stay received.
	for _, id := range []string{"m-1", "m-2", "m-3", "m-1"} {
		req, _ := http.NewRequest("POST", page+"inbox/web", strings.NewReader(`{"n": 1}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Message-Id", id)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusAccepted && res.StatusCode != http.StatusOK {
			t.Fatalf("POST /inbox/web: %s", res.Status)
		}
	}
	until("3 received inbox messages", `document.querySelector("#inbox-received").textContent === "3" && `+
		`document.querySelector("#inbox-oldest").textContent !== "none waiting" && `+
		`/web\s+3\s+1\s+0/.test(document.querySelector("#inbox-sources tbody").innerText)`)
	// A transaction held open elsewhere holds the database's horizon back:
	// the page names it, as status and /api/stats do; and it shows the WAL
	// the server keeps for the wake-up slot.
	holder, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "SELECT count(*) FROM pg_class"); err != nil {
		t.Fatal(err)
	}
	// Tests running beside this one share the server: the oldest holder
	// may be one of theirs, but some holder it is.
	until("the transaction that holds the horizon back", `document.querySelector("#horizon-holder").textContent.startsWith(`+
		jsString(fmt.Sprintf("a transaction (pid %d), open ", holder.PgConn().PID()))+`) && `+
		`document.querySelector("#horizon-holder").textContent.includes("idle in transaction") || `+
		`/^a (transaction|standby|prepared transaction|replication slot)\b.*, open \d/.test(document.querySelector("#horizon-holder").textContent)`)
	until("the wake-up slot's WAL", `/^\d+ (bytes|kB|MB)$/.test(document.querySelector("#slot-retained").textContent) && `+
		`/^slot queuebox_[0-9a-f]+_[0-9a-f]+; its confirmed position is \d+ (bytes|kB|MB) behind the server's WAL$/.test(document.querySelector("#slot-behind").textContent)`)
	if _, err := holder.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	until("two groups of dead rows", `document.querySelectorAll("#dead-groups tr.dead-group").length === 2`)
	until("the blocked key", `document.querySelector("#blocked-keys").innerText.includes("acct-7") && document.querySelector("#blocked-keys").innerText.includes("ledger service unavailable")`)
	// The table is drawn again at every refresh: read its rows' text in
	// the page, until it says what it should.
	rowText := func(dest string) string {
		return `(document.querySelector('#dead-groups tr[data-destination="` + dest + `"]') || {innerText: ""}).innerText`
	}
	// Both groups' failures recur on a replay (a final 410, no route): each
	// row says so, with the group's id for `queuebox replay --group`.
	until("the orders group's failure, why a replay will not help, its id and its replay button",
		rowText("orders-webhook")+`.includes("HTTP 410 Gone: order <id> is gone (request #)") && `+
			rowText("orders-webhook")+`.includes("Replay 4") && `+
			rowText("orders-webhook")+`.includes("Replaying will not help yet: orders-webhook answered HTTP 410, which its nonRetryableStatus makes final.") && `+
			`/\bg-[0-9a-f]{8}\b/.test(`+rowText("orders-webhook")+`)`)
	until("the group of rows without a route", rowText("")+`.includes('no route matches topic "shipment.sent"') && `+
		rowText("")+`.includes('Replaying will not help yet: No route matches topic "shipment.sent" in the configuration.')`)
	group := `#dead-groups tr[data-destination="orders-webhook"]`
	shot(t, tab, "admin-page-before-replay.png")

	// The group's replay button: a first click arms it, a second replays.
	button := group + " button.replay"
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(button))); err != nil {
		t.Fatal(err)
	}
	until("the armed button", `document.querySelector(`+jsString(button)+`).classList.contains("confirm")`)
	// Armed, it says what a replay will do before it does it.
	until("the warning before the replay", `document.querySelector(`+jsString(button)+`).textContent === "Confirm: replay anyway" && `+
		`document.querySelector("#replay-result").textContent.startsWith("Before you replay: orders-webhook answered HTTP 410, which its nonRetryableStatus makes final. If it still answers 410 for these rows, a replay sends each of them dead again after one try.")`)
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(button))); err != nil {
		t.Fatal(err)
	}
	// The result promises no delivery. (The receiver accepts the rows by
	// now, so they are delivered below.)
	until("the replay's result", `document.querySelector("#replay-result").textContent.startsWith("4 rows back to pending. If it still answers 410")`)
	until("the replayed rows delivered", count("delivered")+` === "4" && `+count("dead")+` === "2"`)
	until("one group left", `document.querySelectorAll("#dead-groups tr.dead-group").length === 1`)
	st, err := d.OutboxStats(ctx)
	if err != nil || st.Rows[dialects.Delivered] != 4 || st.Rows[dialects.Dead] != 2 {
		t.Fatalf("the database after the replay: %+v %v", st.Rows, err)
	}
	if recv.Delivered() != 4 {
		t.Fatalf("the receiver accepted %d rows, want the 4 replayed", recv.Delivered())
	}
	// The row view of a replayed row: its payload, the 410 that sent it
	// dead, and the delivery after the replay (a first try that succeeded,
	// told by the row: what it cannot know is unknown), each with its try
	// and its attempt as the receiver saw it, and between them the replay,
	// made on the page.
	delivered, _, err := dialects.List(ctx, d, dialects.Filter{States: []dialects.State{dialects.Delivered}}, nil, 1)
	if err != nil || len(delivered) != 1 {
		t.Fatalf("a delivered row: %v %v", delivered, err)
	}
	if _, err := chromedp.Run(tab, chromedp.Evaluate[bool](`document.querySelector("#row-id").value = `+jsString(delivered[0].ID.String())+
		`; document.querySelector("#row-form button").click(); true`)); err != nil {
		t.Fatal(err)
	}
	until("the row's payload and attempts", `document.querySelectorAll("#row-attempts tr.attempt").length === 2 && `+
		`document.querySelector("#row-attempts tr.attempt.dead").innerText.includes("HTTP 410 Gone") && `+
		`document.querySelector("#row-attempts tr.attempt.delivered.from-row").innerText.includes("told by the row, not recorded") && `+
		`!document.querySelector("#row-attempts tr.attempt.delivered").innerText.includes("HTTP 204") && `+
		`document.querySelector("#row-payload").innerText.includes('"order":')`)
	until("the replay between the attempts, and the tries' numbers",
		`Array.from(document.querySelectorAll("#row-attempts tbody tr")).map((tr) => tr.className).join(",") === "attempt dead,replay,attempt delivered from-row" && `+
			`document.querySelector("#row-attempts tr.replay").innerText.includes("by the admin page, from 127.0.0.1; the tries count from 1 again") && `+
			`/^1 \(from the row\)\s+0\s.*\sunknown\s+delivered\s+unknown\s+unknown\s/.test(document.querySelector("#row-attempts tr.attempt.delivered").innerText) && `+
			`document.querySelector("#row-detail dl").innerText.includes("try 1 of 6, attempt 0")`)
	until("the throughput chart's step", `document.querySelector("#chart-step").textContent.includes("step")`)
	// The row view of a row that matched no route: no try was made, and
	// it says when the row went dead instead.
	unrouted, _, err := dialects.List(ctx, d, dialects.Filter{States: []dialects.State{dialects.Dead}, TopicMatch: func(t string) bool { return t == "shipment.sent" }}, nil, 1)
	if err != nil || len(unrouted) != 1 {
		t.Fatalf("a dead row without a route: %v %v", unrouted, err)
	}
	if _, err := chromedp.Run(tab, chromedp.Evaluate[bool](`document.querySelector("#row-id").value = `+jsString(unrouted[0].ID.String())+
		`; document.querySelector("#row-form button").click(); true`)); err != nil {
		t.Fatal(err)
	}
	at := jsString(unrouted[0].UpdatedAt.UTC().Format(time.RFC3339Nano))
	until("the unrouted row's view", `document.querySelector("#row-detail").innerText.includes("none: no route matched its topic at " + `+at+` + "; nothing was sent") && `+
		`document.querySelector("#row-attempts").innerText.startsWith('None: no route matched the topic "shipment.sent" when the relay took the row') && `+
		`!document.querySelector("#row-detail").innerText.includes("try 1 of")`)
	// What a replay of one row says (the row view's button) speaks of it,
	// not of "them".
	if one, err := chromedp.Run(tab, chromedp.Evaluate[string](`replayedText(1, null)`)); err != nil ||
		one != "1 row back to pending: the relay tries it again from the first try; if it fails again, it goes dead again and shows up here." {
		t.Errorf("the page's text after replaying one row: %q (%v)", one, err)
	}
	shot(t, tab, "admin-page.png")
	r.stop(t)
}

// shot saves a screenshot of the whole page in artifacts/ (not committed).
func shot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := filepath.Join("..", "..", "artifacts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", filepath.Join("artifacts", name))
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Every command's bad input is a usage error (exit 2) with a message that
// names the input, and changes nothing; version and dead list --limit work.
func TestCommandsRefuseBadInput(t *testing.T) {
	t.Parallel()
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
destinations: { n: { type: "null" } }
routes: [ { topicPattern: "#", destination: n } ]
`, dbURL))
	if _, stderr, code := run(t, "migrate", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	d := openPostgres(t, dbURL)
	ctx := context.Background()
	if err := d.OutboxInsert(ctx, testkit.Rows(3, "order.created", nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `UPDATE outbox SET state = 'dead', last_error = 'HTTP 410 Gone'`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", "--id", "12"}, `--id "12": is not a row id`},
		{[]string{"replay", "--state", "pending"}, `--state "pending": replay does not select pending rows; use dead or delivered`},
		{[]string{"replay", "--since", "2h", "--until", "3h"}, `--until "3h": is not after --since "2h", so no row can match`},
		{[]string{"replay", "--until", "tomorrow"}, `--until "tomorrow": is neither an RFC 3339 time nor a duration`},
		{[]string{"replay", "--topic", "order.*x"}, "--topic: "},
		{[]string{"replay"}, "say which rows; give --id, or at least one filter"},
		{[]string{"replay", "--stat", "dead"}, "unknown flag: --stat"},
		{[]string{"dead", "list", "--limit", "0"}, `--limit "0": is out of range; use a number from 1 to 10000`},
		{[]string{"dead", "list", "--state", "delivered"}, `--state "delivered": dead list does not select delivered rows; use dead`},
		{[]string{"dead", "list", "--id", "nope"}, `--id "nope": is not a row id`},
		{[]string{"status", "--all"}, "unknown flag: --all"},
		{[]string{"status", "extra"}, `unknown command "extra" for "queuebox status"`},
		{[]string{"migrate", "down"}, `unknown command "down" for "queuebox migrate"`},
		{[]string{"config", "check", "extra"}, `unknown command "extra" for "queuebox config check"`},
	} {
		_, stderr, code := run(t, append(c.args, "--config", cfg)...)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("queuebox %s: exit %d, want 2 and one line with %q:\n%s", strings.Join(c.args, " "), code, c.want, stderr)
		}
	}
	if st, err := d.OutboxStats(ctx); err != nil || st.Rows[dialects.Dead] != 3 {
		t.Fatalf("refused commands changed rows: %v %v", st.Rows, err)
	}
	out, _, code := run(t, "dead", "list", "--limit", "2", "--config", cfg)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 4 || !strings.Contains(out, "HTTP 410 Gone") ||
		lines[3] != "showing 2 of more than 2; raise --limit (up to 10000) or narrow the filter" {
		t.Errorf("dead list --limit 2:\n%s", out)
	}
	out, _, code = run(t, "version")
	if code != 0 || !strings.HasPrefix(out, "queuebox ") || !strings.Contains(out, "commit ") || !strings.Contains(out, "go1.") {
		t.Errorf("version: %d %s", code, out)
	}
}
