package benchmarks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/benchmarks"
	"github.com/queuebox/queuebox/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// A small run against a given server: one line per scenario with the
// fields the JSON promises, ratios against the raw loop of the same run,
// every row drained, and nothing of the run left in the database.
func TestBenchAgainstAServer(t *testing.T) {
	dbURL := testdb.Database(t)
	out := filepath.Join(t.TempDir(), "bench.json")
	var table, progress bytes.Buffer
	results, err := benchmarks.Run(context.Background(), benchmarks.Options{
		DatabaseURL: dbURL, Scenarios: []string{"hot-keys", "latency"}, Rows: 600, Seconds: 1, Rate: 50,
		JSON: out, Out: &table, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	// hot-keys compares against drain and raw: they run too, first.
	var names []string
	for _, r := range results {
		names = append(names, r.Scenario)
	}
	if strings.Join(names, ",") != "raw,drain,hot-keys,latency" {
		t.Fatalf("scenarios run: %v", names)
	}
	for _, r := range results {
		if r.RowsPerSec <= 0 || r.Failed != 0 {
			t.Errorf("%s: %.0f rows/s, %d failed", r.Scenario, r.RowsPerSec, r.Failed)
		}
	}
	if hot := results[2]; hot.RatioToRaw == nil || hot.Keys != 10 || hot.Rows != 600 || hot.PeakRSSMB <= 0 {
		t.Errorf("hot-keys: %+v", hot)
	}
	if lat := results[3]; lat.P50 == nil || lat.P99 == nil || *lat.P99 < *lat.P50 {
		t.Errorf("latency: %+v", lat)
	}
	var fromFile []map[string]any
	b, err := os.ReadFile(out)
	if err != nil || json.Unmarshal(b, &fromFile) != nil || len(fromFile) != 4 {
		t.Fatalf("--json: %v\n%s", err, b)
	}
	for _, field := range []string{"scenario", "rows", "keys", "rows_per_sec", "peak_rss_mb"} {
		if _, ok := fromFile[2][field]; !ok {
			t.Errorf("the JSON lacks %s: %v", field, fromFile[2])
		}
	}
	if _, ok := fromFile[2]["ratio_to_raw"]; !ok {
		t.Errorf("a drain's JSON lacks ratio_to_raw")
	}
	if !strings.Contains(table.String(), "hot-keys") || !strings.Contains(table.String(), "rows/s") {
		t.Errorf("the table:\n%s", table.String())
	}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var left int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'qb_bench_%'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d bench schemas left behind (%v)", left, err)
	}
}

// A name that is not a scenario is a usage error that lists the scenarios.
func TestUnknownScenario(t *testing.T) {
	_, err := benchmarks.Run(context.Background(), benchmarks.Options{Scenarios: []string{"drian"}})
	if !benchmarks.IsUsage(err) || !strings.Contains(err.Error(), `"drian" is not a scenario`) || !strings.Contains(err.Error(), "drain-keys") {
		t.Fatalf("%v", err)
	}
}

// Without a server, bench starts a throwaway cluster and removes it.
func TestBenchLeavesNothingBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster")
	}
	before, _ := filepath.Glob("/tmp/queuebox-bench-*")
	var table, progress bytes.Buffer
	if _, err := benchmarks.Run(context.Background(), benchmarks.Options{Scenarios: []string{"raw"}, Rows: 200, Out: &table, Progress: &progress}); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	after, _ := filepath.Glob("/tmp/queuebox-bench-*")
	if len(after) > len(before) {
		t.Fatalf("left behind: %v", after)
	}
	if !strings.Contains(table.String(), "durable settings") {
		t.Errorf("the table does not say the cluster was durable:\n%s", table.String())
	}
}
