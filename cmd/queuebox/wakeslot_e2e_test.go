package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
)

// The WAL the server keeps for the wake-up slot shows in /metrics, status
// and /api/stats. A transaction that wrote and stays open holds the slot's
// restart position back, so the WAL written meanwhile elsewhere stays kept
// for it: all three report at least that much.
func TestWakeupSlotLagIsReported(t *testing.T) {
	t.Parallel()
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q, wakeups: logical }
destinations: { n: { type: "null" } }
routes: [ { topicPattern: "#", destination: n } ]
admin: { listen: "127.0.0.1:0" }
`, dbURL))
	if _, stderr, code := run(t, "migrate", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	r := startRelay(t, "--config", cfg)
	page := r.pageURL(t)
	testkit.Eventually(t, "the relay to listen with its slot", time.Minute, func() error {
		if !strings.Contains(r.log(), "listening for inserts with logical replication") {
			return fmt.Errorf("not listening yet")
		}
		return nil
	})
	ctx := context.Background()
	open, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close(ctx)
	other, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	for _, q := range []string{"CREATE TABLE side (n int, pad text)", "BEGIN", "INSERT INTO side VALUES (0, 'open')"} {
		if _, err := open.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// About 25 MB of WAL from another table, committed, while the first
	// transaction stays open.
	if _, err := other.Exec(ctx, "INSERT INTO side SELECT g, repeat('x', 1000) FROM generate_series(1, 20000) AS g"); err != nil {
		t.Fatal(err)
	}
	const least = 20 << 20
	testkit.Eventually(t, "/metrics to report the WAL kept for the slot", time.Minute, func() error {
		if v := metric(t, page, `queuebox_wakeups_slot_retained_bytes{outbox="default"}`); v < least {
			return fmt.Errorf("queuebox_wakeups_slot_retained_bytes %.0f", v)
		}
		return nil
	})
	if code, body := httpGet(t, page+"metrics", ""); code != 200 || !regexp.MustCompile(`(?m)^queuebox_wakeups_slot_behind_bytes\{outbox="default"\} \d`).MatchString(body) {
		t.Errorf("/metrics has no queuebox_wakeups_slot_behind_bytes")
	}
	if code, body := httpGet(t, page+"api/stats", ""); code != 200 || !regexp.MustCompile(`"wakeupSlot": \{\s*"slot": "queuebox_[0-9a-f]+_[0-9a-f]+",\s*"retainedBytes": \d{8,}`).MatchString(body) {
		t.Errorf("GET /api/stats has no wake-up slot keeping 20 MB or more:\n%s", body)
	}
	out, stderr, code := run(t, "status", "--config", cfg)
	m := regexp.MustCompile(`wake-up slot queuebox_[0-9a-f]+_[0-9a-f]+: the server keeps (\d+) (MB|GB) of WAL for it; its confirmed position is \d+ (bytes|kB|MB|GB) behind the server's`).FindStringSubmatch(out)
	if code != 0 || m == nil || m[2] == "MB" && len(m[1]) < 2 {
		t.Errorf("status does not report the slot keeping 20 MB or more: exit %d\n%s%s", code, out, stderr)
	}
	if _, err := open.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	r.stop(t)
}
