package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// The page of a relay with two outboxes offers both in its picker, each
// with its counts; it shows the first by name, and picking the other shows
// that one's rows; a replay from the page acts on the outbox it shows, and
// only on it.
func TestThePagePicksAnOutbox(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a browser")
	}
	browser := chromium(t)
	t.Parallel()
	ctx := context.Background()
	var accepting atomic.Bool
	recv := testrecv.New(t, func(r *testrecv.Request) (int, string, map[string]string) {
		if !accepting.Load() {
			return 410, "gone for now", nil
		}
		return 204, "", nil
	})
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`outboxes:
  shop: { database: { url: %q, schema: shop } }
  billing: { database: { url: %q, schema: billing } }
outbox: { pollIntervalMs: 100 }
destinations:
  hook: { type: http, url: "%s/{{ topic }}", nonRetryableStatus: [410] }
routes:
  - { topicPattern: "#", destination: hook }
admin: { listen: "127.0.0.1:0" }
`, dbURL, dbURL, recv.URL))
	if out, stderr, code := run(t, "migrate", "up", "--config", cfg); code != 0 {
		t.Fatalf("migrate up: exit %d\n%s%s", code, out, stderr)
	}
	open := func(schema string) *postgres.Dialect {
		names := dialects.DefaultNames()
		names.Schema = schema
		d, err := postgres.Open(ctx, postgres.Options{URL: dbURL, Names: names})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		return d
	}
	shop, billing := open("shop"), open("billing")
	if err := shop.OutboxInsert(ctx, testkit.Rows(2, "shop.order", nil)); err != nil {
		t.Fatal(err)
	}
	if err := billing.OutboxInsert(ctx, testkit.Rows(5, "billing.invoice", nil)); err != nil {
		t.Fatal(err)
	}
	r := startRelay(t, "--config", cfg)
	page := r.pageURL(t)
	for name, d := range map[string]*postgres.Dialect{"shop": shop, "billing": billing} {
		want := map[string]int64{"shop": 2, "billing": 5}[name]
		testkit.Eventually(t, "the rows of "+name+" dead", 30*time.Second, func() error {
			st, err := d.OutboxStats(ctx)
			if err == nil && st.Rows[dialects.Dead] != want {
				err = fmt.Errorf("%d dead", st.Rows[dialects.Dead])
			}
			return err
		})
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
			picker, _ := chromedp.Run(tab, chromedp.Evaluate[string](`(() => { const p = document.querySelector("#outbox"); return "hidden " + p.hidden + ", value " + p.value + ", options: " + Array.from(p.options).map(o => o.textContent).join(" | "); })()`))
			t.Fatalf("the page never showed %s (%v); its picker: %s; it shows:\n%s\n%s", what, err, picker, text, r.log())
		}
	}
	dead := `document.querySelector("#count-dead").textContent`
	options := `Array.from(document.querySelectorAll("#outbox option")).map(o => o.textContent).join(" | ")`
	until("the picker with both outboxes, and the first one's rows",
		`!document.querySelector("#outbox").hidden && /shop — 0 pending, 2 dead/.test(`+options+`) && /billing — 0 pending, 5 dead/.test(`+options+`) && `+
			`document.querySelector("#outbox").value === "billing" && `+dead+` === "5"`)
	if _, err := chromedp.Run(tab, chromedp.Evaluate[bool](`(() => { const p = document.querySelector("#outbox"); p.value = "shop"; return p.dispatchEvent(new Event("change")); })()`)); err != nil {
		t.Fatal(err)
	}
	// The picker loads the page again with ?outbox=shop.
	if err := testkit.Poll(10*time.Second, func() error {
		loaded, err := chromedp.Run(tab, chromedp.Evaluate[bool](`location.search === "?outbox=shop" && document.readyState === "complete"`))
		if err == nil && !loaded {
			err = fmt.Errorf("not loaded yet")
		}
		return err
	}); err != nil {
		t.Fatalf("the page did not load shop's figures: %v", err)
	}
	until("shop's rows once it is picked", `location.search === "?outbox=shop" && document.querySelector("#outbox").value === "shop" && `+dead+` === "2"`)
	until("shop's group of dead rows", `document.querySelectorAll("#dead-groups tr.dead-group").length === 1 && document.querySelector("#dead-groups").innerText.includes("shop.order")`)
	// The group's replay button: the first click arms it (a final 410
	// may come again), the second replays.
	button := `#dead-groups tr.dead-group button.replay`
	for range 2 {
		if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(button))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the page arms the button
	}
	testkit.Eventually(t, "shop's rows replayed and delivered", 30*time.Second, func() error {
		st, err := shop.OutboxStats(ctx)
		if err == nil && st.Rows[dialects.Delivered] != 2 {
			err = fmt.Errorf("%v", st.Rows)
		}
		return err
	})
	until("shop with no dead row", dead+` === "0"`)
	if st, err := billing.OutboxStats(ctx); err != nil || st.Rows[dialects.Dead] != 5 {
		t.Errorf("the replay from shop's page touched billing: %v %v", st.Rows, err)
	}
}
