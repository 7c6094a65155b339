package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// destinationsSetup starts a receiver and writes a configuration on a
// database of its own, migrated, that routes order.# to an HTTP
// destination "hook" at the receiver (with hookKeys added to it) and
// everything else to a null destination.
func destinationsSetup(t *testing.T, hookKeys string) (recv *testrecv.Receiver, dbURL, cfg string) {
	t.Helper()
	recv = testrecv.New(t, nil)
	dbURL = testdb.Database(t)
	cfg = writeConfig(t, fmt.Sprintf(`database: { url: %q }
outbox: { pollIntervalMs: 100 }
destinations:
  hook: { type: http, url: "%s/hook"%s }
  audit: { type: "null" }
routes:
  - { topicPattern: "order.#", destination: hook }
  - { topicPattern: "#", destination: audit }
admin: { listen: "127.0.0.1:0" }
`, dbURL, recv.URL, hookKeys))
	if _, stderr, code := run(t, "migrate", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	return recv, dbURL, cfg
}

// metric reads one sample of a relay's /metrics (0 when absent).
func metric(t *testing.T, page, series string) float64 {
	t.Helper()
	code, body := httpGet(t, page+"metrics", "")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// With rateLimit {perSecond: 50}, 300 rows reach the destination in no
// less than 5 s: the bucket's 50 at once, then 50 a second.
func TestRateLimitOfTheBinary(t *testing.T) {
	t.Parallel()
	recv, dbURL, cfg := destinationsSetup(t, ", rateLimit: { perSecond: 50 }")
	if out, _, code := run(t, "destinations", "list", "--config", cfg); code != 0 || !strings.Contains(out, "50/s (burst 50)") {
		t.Fatalf("destinations list (exit %d):\n%s", code, out)
	}
	r := startRelay(t, "--config", cfg)
	page := r.pageURL(t)
	d := openPostgres(t, dbURL)
	rows := testkit.Rows(200, "order.created", func(i int) []testkit.RowOption {
		return []testkit.RowOption{testkit.Key(fmt.Sprintf("cust-%d", i%20))}
	})
	rows = append(rows, testkit.Rows(100, "order.viewed", nil)...)
	began := time.Now()
	if err := d.OutboxInsert(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	recv.WaitDelivered(t, 300, time.Minute)
	if took := time.Since(began); took < 5*time.Second {
		t.Fatalf("300 rows at 50 a second arrived in %v", took)
	} else {
		t.Logf("300 rows at 50 a second: %v", took.Round(time.Millisecond))
	}
	recv.CheckOrder(t)
	if v := metric(t, page, `queuebox_destination_throttled_seconds_total{destination="hook"}`); v <= 0 {
		t.Errorf("queuebox_destination_throttled_seconds_total is %v after a throttled drain", v)
	}
	r.stop(t)
}

// A pause holds rows back on purpose: the rows behind a paused key's head,
// and the unkeyed rows put back again and again, are not what the relay
// could claim, and do not age the oldest due row. Over 12 s of pause,
// queuebox_oldest_pending_age_seconds, GET /api/stats and status stay below
// 5 s; after the resume every row is delivered.
func TestAPauseDoesNotAgeTheOldestDueRow(t *testing.T) {
	t.Parallel()
	recv, dbURL, cfg := destinationsSetup(t, "")
	if _, stderr, code := run(t, "destinations", "pause", "hook", "--config", cfg); code != 0 {
		t.Fatalf("pause: %s", stderr)
	}
	r := startRelay(t, "--config", cfg)
	page := r.pageURL(t)
	d := openPostgres(t, dbURL)
	ctx := context.Background()
	rows := testkit.Rows(60, "order.created", func(i int) []testkit.RowOption {
		return []testkit.RowOption{testkit.Key(fmt.Sprintf("cust-%d", i%6))}
	})
	rows = append(rows, testkit.Rows(20, "order.viewed", nil)...)
	if err := d.OutboxInsert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	oldest := 0.0
	for end := time.Now().Add(12 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		oldest = max(oldest, metric(t, page, `queuebox_oldest_pending_age_seconds{outbox="default"}`))
	}
	if oldest >= 5 {
		t.Errorf("queuebox_oldest_pending_age_seconds reached %.1f s during a 12 s pause", oldest)
	}
	t.Logf("queuebox_oldest_pending_age_seconds during the pause: at most %.3f s", oldest)
	var st struct {
		Rows      map[string]int64 `json:"rows"`
		OldestDue float64          `json:"oldestDuePendingSeconds"`
	}
	if code, body := httpGet(t, page+"api/stats", ""); code != 200 || json.Unmarshal([]byte(body), &st) != nil || st.OldestDue >= 5 || st.Rows["pending"] != 80 {
		t.Errorf("GET /api/stats after 12 s of pause: %d %s", code, body)
	}
	out, _, _ := run(t, "status", "--json", "--config", cfg)
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.OldestDue >= 5 {
		t.Errorf("status --json after 12 s of pause: %v\n%s", err, out)
	}
	if n := len(recv.Requests()); n != 0 {
		t.Fatalf("the paused destination got %d requests", n)
	}
	if _, stderr, code := run(t, "destinations", "resume", "hook", "--config", cfg); code != 0 {
		t.Fatalf("resume: %s", stderr)
	}
	recv.WaitDelivered(t, len(rows), time.Minute)
	recv.CheckOrder(t)
	r.stop(t)
}

// A destination paused with the command line gets no request and no
// attempt from either of two relays for as long as it is paused, while the
// other destination's rows flow; after the resume every row is delivered,
// with no attempt counted. list, the API and the metrics show the pause.
func TestPauseHoldsOnTwoRelays(t *testing.T) {
	t.Parallel()
	recv, dbURL, cfg := destinationsSetup(t, "")
	_, stderr, code := run(t, "destinations", "pause", "hokk", "--config", cfg)
	if code != 2 || !strings.Contains(stderr, `NAME "hokk": is not a configured destination; the configured ones are audit, hook`) {
		t.Errorf("pausing a destination that does not exist: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := run(t, "destinations", "pause", "--config", cfg); code != 2 || !strings.Contains(stderr, "give the name of the destination to pause") {
		t.Errorf("pause without a name: exit %d\n%s", code, stderr)
	}
	out, stderr, code := run(t, "destinations", "pause", "hook", "--reason", "the receiver is being upgraded", "--config", cfg)
	if code != 0 || !strings.Contains(out, "hook is paused on every replica") {
		t.Fatalf("pause: exit %d\n%s%s", code, out, stderr)
	}
	r1, r2 := startRelay(t, "--config", cfg), startRelay(t, "--config", cfg)
	pages := []string{r1.pageURL(t), r2.pageURL(t)}
	d := openPostgres(t, dbURL)
	ctx := context.Background()
	rows := testkit.Rows(100, "order.created", func(i int) []testkit.RowOption {
		return []testkit.RowOption{testkit.Key(fmt.Sprintf("cust-%d", i%10))}
	})
	rows = append(rows, testkit.Rows(20, "order.viewed", nil)...)
	rows = append(rows, testkit.Rows(50, "audit.logged", nil)...)
	if err := d.OutboxInsert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	// Both relays read the pause, and hold the rows a while: the heads of
	// the ten keys and the unkeyed rows go back to pending time and again.
	testkit.Eventually(t, "both relays to hold the paused destination's rows", time.Minute, func() error {
		deferred := 0.0
		for _, p := range pages {
			if metric(t, p, `queuebox_destination_paused{destination="hook"}`) != 1 {
				return fmt.Errorf("%s does not report the pause", p)
			}
			deferred += metric(t, p, `queuebox_destination_deferred_rows_total{destination="hook",reason="paused"}`)
		}
		if deferred < 3*30 {
			return fmt.Errorf("%v rows deferred", deferred)
		}
		return nil
	})
	if n := len(recv.Requests()); n != 0 {
		t.Fatalf("the paused destination got %d requests", n)
	}
	st, err := d.OutboxStats(ctx)
	if err != nil || st.Rows[dialects.Delivered] != 50 || st.Rows[dialects.Dead] != 0 {
		t.Fatalf("while paused: %+v %v; want the 50 audit rows delivered, nothing dead", st.Rows, err)
	}
	var attempted int
	if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM outbox WHERE attempt > 0`).Scan(&attempted); err != nil || attempted != 0 {
		t.Fatalf("%d rows had an attempt counted while paused (%v)", attempted, err)
	}
	out, _, _ = run(t, "destinations", "list", "--config", cfg)
	for _, want := range []string{"hook   http  paused", "audit  null  delivering", "hook is paused: the receiver is being upgraded"} {
		if !strings.Contains(out, want) {
			t.Errorf("destinations list lacks %q:\n%s", want, out)
		}
	}
	if code, body := httpGet(t, pages[0]+"api/destinations", ""); code != 200 || !strings.Contains(body, `"pauseReason": "the receiver is being upgraded"`) || !strings.Contains(body, `"replica": {`) {
		t.Errorf("GET /api/destinations: %d\n%s", code, body)
	}

	out, stderr, code = run(t, "destinations", "resume", "hook", "--config", cfg)
	if code != 0 || !strings.Contains(out, "hook is resumed") {
		t.Fatalf("resume: exit %d\n%s%s", code, out, stderr)
	}
	recv.WaitDelivered(t, 120, time.Minute)
	recv.CheckOrder(t)
	testkit.Eventually(t, "every row delivered with no attempt counted", 0, func() error {
		var delivered, attempted int
		err := d.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'delivered'), count(*) FILTER (WHERE attempt > 0) FROM outbox`).Scan(&delivered, &attempted)
		if err == nil && (delivered != len(rows) || attempted != 0) {
			err = fmt.Errorf("%d delivered, %d with attempts", delivered, attempted)
		}
		return err
	})
	if out, _, _ := run(t, "destinations", "resume", "hook", "--config", cfg); !strings.Contains(out, "hook was not paused") {
		t.Errorf("resuming again:\n%s", out)
	}
	for _, r := range []*relayProcess{r1, r2} {
		if !strings.Contains(r.log(), `"msg":"destination paused`) || !strings.Contains(r.log(), `"msg":"destination resumed`) {
			t.Errorf("a relay did not log the pause and the resume:\n%s", r.log())
		}
		r.stop(t)
	}
}

// On the admin page: the Pause button asks for a reason and pauses on a
// second click; the command line then lists the pause; Resume takes two
// clicks too.
func TestPauseAndResumeOnTheAdminPage(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a browser")
	}
	browser := chromium(t)
	t.Parallel()
	_, _, cfg := destinationsSetup(t, ", rateLimit: { perSecond: 20 }, maxConcurrency: 4")
	r := startRelay(t, "--config", cfg)
	page := r.pageURL(t)
	tab := browserTab(t, browser)
	if err := chromedp.Do(tab, chromedp.Navigate(page)); err != nil {
		t.Fatal(err)
	}
	until := func(what, predicate string) {
		t.Helper()
		if _, err := chromedp.Run(tab, chromedp.Poll[bool](predicate, chromedp.WithPollingInterval(100*time.Millisecond),
			chromedp.WithPollingTimeout(60*time.Second))); err != nil {
			text, _ := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector("#destinations").innerText`))
			t.Fatalf("the page never showed %s (%v); its destinations read:\n%s\n%s", what, err, text, r.log())
		}
	}
	hook := `#destination-table tr[data-destination="hook"]`
	// reads: the hook's row says all of these (the row comes with the
	// page's first refresh).
	reads := func(texts ...string) string {
		js := `(document.querySelector(` + jsString(hook) + `)?.innerText || "")`
		var conds []string
		for _, text := range texts {
			conds = append(conds, js+`.includes(`+jsString(text)+`)`)
		}
		return strings.Join(conds, " && ")
	}
	until("the hook delivering, with its limits", reads("delivering", "20 / s (burst 20)", "5 attempts over 5.0 s; a probe every 5.0 s"))
	pause := hook + " button.pause"
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(pause))); err != nil {
		t.Fatal(err)
	}
	until("the armed pause and its reason", `document.querySelector(`+jsString(pause)+`).classList.contains("confirm") && !document.querySelector(`+jsString(hook+" input.reason")+`).hidden`)
	if err := chromedp.Do(tab, chromedp.SendKeys(chromedp.CSS(hook+" input.reason"), "maintenance window")); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(pause))); err != nil {
		t.Fatal(err)
	}
	until("the pause's result", `document.querySelector("#destination-result").textContent.startsWith("hook is paused on every replica")`)
	until("the hook paused", reads("paused", "maintenance window"))
	if out, _, _ := run(t, "destinations", "list", "--config", cfg); !strings.Contains(out, "hook is paused: maintenance window") {
		t.Fatalf("destinations list after a pause on the page:\n%s", out)
	}
	shot(t, tab, "admin-page-destinations.png")
	resume := hook + " button.resume"
	for range 2 {
		if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(resume))); err != nil {
			t.Fatal(err)
		}
	}
	until("the resume's result", `document.querySelector("#destination-result").textContent.startsWith("hook is resumed")`)
	until("the hook delivering again", reads("delivering"))
	if out, _, _ := run(t, "destinations", "list", "--config", cfg); !strings.Contains(out, "hook   http  delivering") {
		t.Fatalf("destinations list after a resume on the page:\n%s", out)
	}
	r.stop(t)
}
