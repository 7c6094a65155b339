package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/pgcluster"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// One relay, three outboxes on two clusters: two schemas of one database of
// the test cluster, and a database of a second cluster. Rows in each are
// delivered with their keys in order. The second cluster stops: the other
// outboxes keep delivering within seconds, and the relay keeps running and
// says which outbox is down. It starts again: its outbox resumes, and
// nothing is lost.
func TestOneRelayForThreeOutboxesOnTwoClusters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	second, err := pgcluster.Start(ctx, pgcluster.Options{TestSettings: true, Prefix: "queuebox-test-"})
	if err != nil {
		t.Fatalf("start a second PostgreSQL: %v", err)
	}
	t.Cleanup(second.Stop)
	conn, err := pgx.Connect(ctx, second.URL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE ledger"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	dbURL := testdb.Database(t)
	conn, err = pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA orders; CREATE SCHEMA billing"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	ledgerURL := second.URLFor("ledger")

	recv := testrecv.New(t, nil)
	cfg := writeConfig(t, fmt.Sprintf(`outboxes:
  orders:
    database: { url: %q, schema: orders }
  billing:
    database: { url: %q, schema: billing }
    outbox: { batchSize: 50 }
  ledger:
    database: { url: %q }
destinations:
  hook: { type: http, url: %q }
routes: [ { topicPattern: "#", destination: hook } ]
admin: { listen: "127.0.0.1:0" }
`, dbURL, dbURL, ledgerURL, recv.URL+"/{{ topic }}"))
	out, stderr, code := run(t, "migrate", "up", "--config", cfg)
	if code != 0 || strings.Count(out, "== outbox ") != 3 {
		t.Fatalf("migrate up did not migrate the three outboxes: exit %d\n%s%s", code, out, stderr)
	}
	open := func(url, schema string) *postgres.Dialect {
		names := dialects.DefaultNames()
		names.Schema = schema
		d, err := postgres.Open(ctx, postgres.Options{URL: url, Names: names})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		return d
	}
	outboxes := map[string]*postgres.Dialect{"orders": open(dbURL, "orders"), "billing": open(dbURL, "billing"), "ledger": open(ledgerURL, "")}
	batch := 0
	insert := func(name string, n int) {
		t.Helper()
		batch++
		rows := testkit.Rows(n, name+".changed", func(i int) []testkit.RowOption {
			return []testkit.RowOption{testkit.Key(fmt.Sprintf("%s-%d", name, i%5)), testkit.PayloadOf(map[string]int{"batch": batch, "i": i})}
		})
		// After the second cluster's restart the pool's first sessions
		// are dead: the insert is tried again on new ones.
		testkit.Eventually(t, "the insert into "+name, 30*time.Second, func() error {
			return outboxes[name].OutboxInsert(ctx, rows)
		})
	}
	delivered := func(topic string) int {
		ids := map[string]bool{}
		for _, r := range recv.Requests() {
			if r.Topic == topic && r.Status < 300 {
				ids[r.ID] = true
			}
		}
		return len(ids)
	}

	r := startRelay(t, "--config", cfg)
	page := r.pageURL(t)
	for _, name := range []string{"orders", "billing", "ledger"} {
		insert(name, 100)
	}
	recv.WaitDelivered(t, 300, time.Minute)
	for _, name := range []string{"orders", "billing", "ledger"} {
		if n := delivered(name + ".changed"); n < 100 {
			t.Errorf("%s: %d of 100 rows delivered", name, n)
		}
	}

	// The second cluster stops: the ledger's outbox waits, the others go on.
	second.Kill()
	stoppedAt := time.Now()
	before := recv.Delivered()
	insert("orders", 20)
	insert("billing", 20)
	recv.WaitDelivered(t, before+40, 15*time.Second)
	t.Logf("with the second cluster down, 40 rows of the other outboxes delivered %v after it stopped", time.Since(stoppedAt).Round(time.Millisecond))
	testkit.Eventually(t, "/readyz to name the ledger's outbox as not ready, and stay 200", 30*time.Second, func() error {
		code, body := httpGet(t, page+"readyz", "")
		if code != 200 || !strings.Contains(body, "outbox ledger: not ready") || !strings.Contains(body, "outbox orders: ready") || !strings.Contains(body, "ready: 2 of 3 outboxes") {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	if v := metric(t, page, `queuebox_outbox_up{outbox="ledger"}`); v != 0 {
		t.Errorf("queuebox_outbox_up of the ledger is %v while its database is down", v)
	}
	testkit.Eventually(t, "status --outbox orders to count its 120 delivered rows", 30*time.Second, func() error {
		if out, stderr, code := run(t, "status", "--outbox", "orders", "--config", cfg); code != 0 || !regexp.MustCompile(`(?m)^delivered +120$`).MatchString(out) {
			return fmt.Errorf("exit %d\n%s%s", code, out, stderr)
		}
		return nil
	})
	if _, stderr, code := run(t, "status", "--config", cfg); code != 1 || !strings.Contains(stderr, "outbox ledger") {
		t.Errorf("status of every outbox with one database down: exit %d, want 1 naming the ledger\n%s", code, stderr)
	}
	select {
	case err := <-r.ended:
		t.Fatalf("the relay exited when one outbox's database stopped (%v):\n%s", err, r.log())
	default:
	}

	// It starts again: the ledger's outbox resumes, with the rows written
	// now and nothing lost.
	if err := second.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	insert("ledger", 30)
	recv.WaitDelivered(t, before+70, time.Minute)
	testkit.Eventually(t, "the ledger's 130 rows delivered", time.Minute, func() error {
		if n := delivered("ledger.changed"); n < 130 {
			return fmt.Errorf("%d", n)
		}
		return nil
	})
	if dup := recv.CheckOrder(t); dup > 0 {
		t.Logf("%d duplicates (at least once)", dup)
	}
	testkit.Eventually(t, "every outbox ready again", 30*time.Second, func() error {
		if code, body := httpGet(t, page+"readyz", ""); code != 200 || !strings.Contains(body, "ready: 3 of 3 outboxes") {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})

	// The metrics and the API tell the outboxes apart.
	for _, name := range []string{"orders", "billing", "ledger"} {
		if v := metric(t, page, fmt.Sprintf(`queuebox_claimed_rows_total{outbox=%q}`, name)); v < 100 {
			t.Errorf("queuebox_claimed_rows_total of %s: %v", name, v)
		}
	}
	code, body := httpGet(t, page+"api/stats?outbox=ledger", "")
	var stats struct {
		Outbox   string `json:"outbox"`
		Outboxes []struct {
			Name    string `json:"name"`
			Running bool   `json:"running"`
		} `json:"outboxes"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &stats) != nil || stats.Outbox != "ledger" || len(stats.Outboxes) != 3 {
		t.Errorf("GET /api/stats?outbox=ledger: %d %s", code, body)
	}
	if code, body := httpGet(t, page+"api/stats?outbox=nope", ""); code != 400 || !strings.Contains(body, "billing, ledger, orders") {
		t.Errorf("GET /api/stats?outbox=nope: %d %s", code, body)
	}
	// A replay through the API acts on one outbox: without ?outbox= it is
	// refused, not sent to the first by name.
	if res, err := http.Post(page+"api/replay", "application/json", strings.NewReader(`{"states":["delivered"],"topic":"order.*"}`)); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 400 || !strings.Contains(string(b), "?outbox=NAME") || !strings.Contains(string(b), "billing, ledger, orders") {
			t.Errorf("POST /api/replay without ?outbox=: %d %s", res.StatusCode, b)
		}
	}
	if _, stderr, code := run(t, "dead", "list", "--config", cfg); code != 2 || !strings.Contains(stderr, "pass --outbox NAME") {
		t.Errorf("dead list of a file of several outboxes without --outbox: exit %d\n%s", code, stderr)
	}
	r.stop(t)
	if strings.Contains(r.log(), `"level":"ERROR","msg":"engine actor crashed`) {
		t.Errorf("an engine crashed:\n%s", r.log())
	}
}
