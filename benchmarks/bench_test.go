package benchmarks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/queuebox/queuebox/benchmarks"
	"github.com/queuebox/queuebox/internal/testbin"
	"github.com/queuebox/queuebox/internal/testdb"
)

func TestMain(m *testing.M) {
	if os.Getenv("QB_FAKE_REPLICA") != "" {
		fakeReplica()
		return
	}
	testdb.Main(removeBinary{m})
}

// removeBinary deletes the queuebox binary that the replicas test built
// (internal/testbin) once the tests are done.
type removeBinary struct{ m *testing.M }

func (r removeBinary) Run() int {
	code := r.m.Run()
	testbin.Remove()
	return code
}

// fakeReplica stands in for `queuebox run --config FILE` when the test
// binary is given to the bench as the replicas' binary: it answers
// /readyz and /metrics on the config's admin address (port 0: a free one,
// named in its log as a real replica does; ready, and alone, as
// in the first round), then ends with status 3 after
// two seconds, as a replica that dies during the drain would.
func fakeReplica() {
	var cfg struct {
		Admin struct {
			Listen string `yaml:"listen"`
		} `yaml:"admin"`
	}
	file := os.Args[len(os.Args)-1]
	b, err := os.ReadFile(file)
	if err == nil {
		err = yaml.Unmarshal(b, &cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake replica:", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake replica:", err)
		os.Exit(2)
	}
	// The bench learns the address from this line of the log, as from a
	// real replica's.
	fmt.Fprintf(os.Stderr, "{\"level\":\"INFO\",\"msg\":\"admin listening\",\"address\":%q}\n", ln.Addr().String())
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/metrics" {
				fmt.Fprintln(w, `queuebox_other_relay_sessions{outbox="default"} 0`) // alone, as in the first round
			}
		}))
	}()
	time.Sleep(2 * time.Second) // the fake replica's life, before it fails
	fmt.Fprintln(os.Stderr, "lost the database (from the fake replica)")
	os.Exit(3)
}

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
	// Only the columns that some line fills: drains and latency, without
	// a scenario's own ratio, a broker's ceiling or a throwaway cluster's
	// CPU.
	header := ""
	for _, line := range strings.Split(table.String(), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "scenario ") {
			header = strings.Join(strings.Fields(line), " ")
		}
	}
	if header != "scenario variant rows keys replicas batch mailbox rows/s vs raw p50 ms p95 ms p99 ms peak RSS MB failed" {
		t.Errorf("the table's columns: %q\n%s", header, table.String())
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

// Bad input is refused before any cluster starts or scenario runs, with
// the flag it came from and what to do.
func TestBadInputIsRefusedFirst(t *testing.T) {
	dbURL := testdb.Database(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	role := fmt.Sprintf("qb_bench_nocreate_%d", time.Now().UnixNano()%1e9)
	if _, err := conn.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "DROP ROLE "+role) })
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	missing := filepath.Join(t.TempDir(), "no-such-folder", "bench.json")
	for _, c := range []struct {
		name  string
		o     benchmarks.Options
		usage bool
		want  []string
	}{
		{"a negative row count", benchmarks.Options{Rows: -5}, true, []string{"--rows: -5 is not a positive number"}},
		{"an empty scenario list", benchmarks.Options{Scenarios: []string{}}, true, []string{"--scenarios is empty", "drain-keys"}},
		{"a JSON file in a folder that does not exist", benchmarks.Options{Scenarios: []string{"raw"}, JSON: missing, DatabaseURL: dbURL}, true, []string{"--json " + missing, "no such file or directory", "a folder that exists"}},
		{"a URL that is not one", benchmarks.Options{Scenarios: []string{"raw"}, DatabaseURL: "postgres://[::1"}, true, []string{"--database-url is not a PostgreSQL URL"}},
		{"no server at the URL", benchmarks.Options{Scenarios: []string{"raw"}, DatabaseURL: "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=5"}, false, []string{"--database-url: could not reach the database", "127.0.0.1:1", "connection refused", "leave --database-url out"}},
		{"a database that does not exist", benchmarks.Options{Scenarios: []string{"raw"}, DatabaseURL: strings.Replace(dbURL, u.Path, "/qb_no_such_database", 1)}, false, []string{"refused the login", `database "qb_no_such_database" does not exist`, "database name in the URL"}},
		{"a role that may not create schemas", benchmarks.Options{Scenarios: []string{"raw"}, DatabaseURL: u.String()}, false, []string{"the role " + role + " may not create schemas", "GRANT CREATE ON DATABASE"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var table, progress bytes.Buffer
			c.o.Out, c.o.Progress = &table, &progress
			_, err := benchmarks.Run(ctx, c.o)
			if err == nil || benchmarks.IsUsage(err) != c.usage {
				t.Fatalf("err = %v (usage error: %v), want usage error %v", err, benchmarks.IsUsage(err), c.usage)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error %q does not say %q", err, w)
				}
			}
			if table.Len() > 0 || strings.Contains(progress.String(), "throwaway") {
				t.Errorf("something ran: table %q, progress %q", table.String(), progress.String())
			}
		})
	}
	if _, err := os.Stat(filepath.Dir(missing)); !os.IsNotExist(err) {
		t.Errorf("the missing folder was made: %v", err)
	}
}

// A replica that ends, before it is ready or during the drain, fails the
// scenario at once with its last output, and the scenarios that finished
// before are still printed and written.
func TestAReplicaThatEndsIsReportedAndTheRestKept(t *testing.T) {
	dbURL := testdb.Database(t)
	dir := t.TempDir()
	notReady := filepath.Join(dir, "queuebox")
	if err := os.WriteFile(notReady, []byte("#!/bin/sh\necho 'the schema is not current (from the fake replica)' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary as a replica that is ready, then dies (fakeReplica).
	t.Setenv("QB_FAKE_REPLICA", "1")
	for _, c := range []struct {
		name, bin, says, output string
	}{
		{"before it is ready", notReady, "a replica (queuebox run) ended before it was ready", "the schema is not current (from the fake replica)"},
		{"during the drain", self, "a replica (queuebox run) ended during the drain", "lost the database (from the fake replica)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "bench.json")
			var table, progress bytes.Buffer
			start := time.Now()
			results, err := benchmarks.Run(context.Background(), benchmarks.Options{
				DatabaseURL: dbURL, Scenarios: []string{"raw", "replicas"}, Rows: 500, Binary: c.bin,
				JSON: out, Out: &table, Progress: &progress,
			})
			if err == nil || !strings.Contains(err.Error(), c.says) ||
				!strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), c.output) {
				t.Fatalf("err = %v", err)
			}
			if took := time.Since(start); took > 30*time.Second {
				t.Errorf("the failure took %v to notice", took)
			}
			if len(results) != 1 || results[0].Scenario != "raw" || !strings.Contains(table.String(), "2 loops") {
				t.Fatalf("results %+v, table:\n%s", results, table.String())
			}
			var fromFile []map[string]any
			if b, err := os.ReadFile(out); err != nil || json.Unmarshal(b, &fromFile) != nil || len(fromFile) != 1 {
				t.Fatalf("--json after a failure: %v %s", err, b)
			}
		})
	}
}

// The replicas scenario with the real binary, against a server where a
// relay of the default name runs: each round's replicas see each other
// (three) or none (one), and not that relay, so every round starts, and
// every row of both variants drains.
func TestReplicasScenarioWithTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary in six rounds")
	}
	bin := testbin.Path(t)
	dbURL := testdb.Database(t)
	// A stranger: sessions named as a relay's by default, held all along.
	stranger, err := pgx.Connect(context.Background(), testdb.WithParam(dbURL, "application_name", "queuebox"))
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close(context.Background())
	var table, progress bytes.Buffer
	results, err := benchmarks.Run(context.Background(), benchmarks.Options{
		DatabaseURL: dbURL, Scenarios: []string{"replicas"}, Rows: 2000, Binary: bin, Out: &table, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if len(results) != 2 {
		t.Fatalf("results %+v", results)
	}
	for i, want := range []int{1, 3} {
		r := results[i]
		if r.Scenario != "replicas" || r.Replicas != want || r.Failed != 0 || r.RowsPerSec <= 0 {
			t.Errorf("result %d: %+v, want %d replicas, nothing failed", i, r, want)
		}
	}
	if results[1].Ratio == nil {
		t.Errorf("three replicas have no ratio to one: %+v", results[1])
	}
}

// A run that fails before any scenario finishes leaves an earlier --json
// file as it was; one that finishes replaces it.
func TestAnEarlierJSONFileIsReplacedOnlyByResults(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bench.json")
	if err := os.WriteFile(out, []byte("yesterday's results\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var table, progress bytes.Buffer
	_, err := benchmarks.Run(context.Background(), benchmarks.Options{Scenarios: []string{"raw"}, Rows: 200, JSON: out,
		DatabaseURL: "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=5", Out: &table, Progress: &progress})
	if err == nil {
		t.Fatal("a run against no server succeeded")
	}
	if b, _ := os.ReadFile(out); string(b) != "yesterday's results\n" {
		t.Fatalf("a failed run changed the earlier file: %q", b)
	}
	if _, err := benchmarks.Run(context.Background(), benchmarks.Options{Scenarios: []string{"raw"}, Rows: 200, JSON: out,
		DatabaseURL: testdb.Database(t), Out: &table, Progress: &progress}); err != nil {
		t.Fatal(err)
	}
	var fromFile []map[string]any
	if b, err := os.ReadFile(out); err != nil || json.Unmarshal(b, &fromFile) != nil || len(fromFile) != 1 {
		t.Fatalf("after a run: %v %s", err, b)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".queuebox-bench-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
