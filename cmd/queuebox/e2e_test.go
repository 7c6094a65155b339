package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/queuebox/queuebox/internal/testbin"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testlog"
	"github.com/queuebox/queuebox/internal/testrecv"
)

func TestMain(m *testing.M) { testdb.Main(removeBinary{m}) }

// removeBinary deletes the binary the tests built once they are done.
type removeBinary struct{ m *testing.M }

func (r removeBinary) Run() int {
	code := r.m.Run()
	testbin.Remove()
	return code
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "queuebox.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(testbin.Path(t), args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// startRun starts `queuebox run` on cfg, with its stderr in a buffer that
// the test reads while it runs; done hears its end. It is killed when the
// test ends.
func startRun(t *testing.T, cfg string) (relay *exec.Cmd, done chan error, logs *testlog.Buffer) {
	t.Helper()
	logs = &testlog.Buffer{}
	relay = exec.Command(testbin.Path(t), "run", "--config", cfg)
	relay.Stderr = logs
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	done = make(chan error, 1)
	go func() { done <- relay.Wait() }()
	t.Cleanup(func() { _ = relay.Process.Kill() })
	return relay, done, logs
}

// Bad configuration fails with a message that names the key and the reason,
// and exit code 2; so does a usage error.
func TestBadConfigurationExitsTwo(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, `database:
  url: postgres://localhost/app
  columnMapping:
    outbox: { key: "not valid" }
outbox:
  batchSize: 0
  pollIntervalMS: 5
destinations:
  hook: { type: http, url: "https://example.com/{{ nope }}" }
routes:
  - { topicPattern: "a.b*", destination: hook }
  - { topicPattern: "#", destination: missing }
`)
	_, stderr, code := run(t, "config", "check", "--config", cfg)
	if code != 2 {
		t.Fatalf("exit code %d, want 2; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{
		"database.columnMapping.outbox.key (line 4)", "not a valid identifier",
		"outbox.batchSize (line 6): 0 is out of range",
		"outbox.pollIntervalMS (line 7): unknown key (did you mean pollIntervalMs?)",
		"destinations.hook.url (line 9)", "unknown placeholder {{ nope }}",
		"routes[0].topicPattern (line 11)", "mixes a wildcard",
		`routes[1].destination (line 12): "missing" is not a defined destination`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
		t.Errorf("stderr holds a stack trace:\n%s", stderr)
	}
	if _, stderr, code = run(t, "replay", "--nonsense"); code != 2 || !strings.Contains(stderr, "unknown flag: --nonsense") {
		t.Errorf("a usage error: exit %d, %s", code, stderr)
	}
	if _, stderr, code = run(t, "run", "--config", filepath.Join(t.TempDir(), "none.yaml")); code != 2 || !strings.Contains(stderr, "does not exist") {
		t.Errorf("a missing file: exit %d, %s", code, stderr)
	}
}

// config check reports every problem of a block in one run: each
// problem of a cloudEvents block, and a rateLimit that is no mapping once.
func TestConfigCheckReportsEveryProblemOfABlock(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, `database: { url: postgres://localhost/app }
destinations:
  a: { type: http, url: "http://x/", cloudEvents: { mode: structured, source: "/shop orders", type: "{{ nope }}" } }
  b: { type: http, url: "http://x/", cloudEvents: { mode: batch, source: "/shop orders", type: "{{ nope }}" } }
  c: { type: http, url: "http://x/", rateLimit: 50 }
routes: [ { topicPattern: "#", destination: a } ]
`)
	_, stderr, code := run(t, "config", "check", "--config", cfg)
	if code != 2 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	for _, want := range []string{
		`destinations.a.cloudEvents.source (line 3): "/shop orders" is not a URI reference`,
		`destinations.a.cloudEvents.type (line 3): "{{ nope }}": unknown placeholder {{ nope }}`,
		`destinations.b.cloudEvents.mode (line 4): "batch": use binary`,
		`destinations.b.cloudEvents.source (line 4): "/shop orders" is not a URI reference`,
		`destinations.b.cloudEvents.type (line 4): "{{ nope }}": unknown placeholder {{ nope }}`,
		`destinations.c.rateLimit (line 5): expected a mapping of keys, got "50"`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("config check lacks %q:\n%s", want, stderr)
		}
	}
	if n := strings.Count(stderr, "destinations.c."); n != 1 {
		t.Errorf("rateLimit: 50 is reported %d times, want once:\n%s", n, stderr)
	}
	if !strings.Contains(stderr, "has 6 problems") {
		t.Errorf("config check does not count 6 problems:\n%s", stderr)
	}
}

// A zero or a negative the user wrote is refused with its reason, never
// replaced by a default: config check says so for each, and one message
// covers perSecond's whole range below it.
func TestConfigCheckRefusesZerosItWouldReplace(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, `database: { url: postgres://localhost/app }
destinations:
  a: { type: http, url: "http://x/", circuitBreaker: { window: 0s, probeInterval: 0s } }
  b: { type: http, url: "http://x/", rateLimit: { perSecond: 5, burst: 0 } }
  c: { type: http, url: "http://x/", rateLimit: { perSecond: -5 } }
  d: { type: http, url: "http://x/", rateLimit: { perSecond: 0 } }
  e: { type: http, url: "http://x/", timeoutMs: 0, maxConnections: 0 }
routes: [ { topicPattern: "#", destination: a } ]
`)
	_, stderr, code := run(t, "config", "check", "--config", cfg)
	if code != 2 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	for _, want := range []string{
		"destinations.a.circuitBreaker.window (line 3): 0s is too short; use at least 100ms, or leave window out for 5s",
		"destinations.a.circuitBreaker.probeInterval (line 3): 0s is too short; use at least 100ms, or leave probeInterval out for 5s",
		"destinations.b.rateLimit.burst (line 4): 0 would let no row through;",
		"destinations.c.rateLimit.perSecond (line 5): -5 is out of range; use a number above 0, up to 1000000",
		"destinations.d.rateLimit.perSecond (line 6): 0 would let no row through;",
		"destinations.e.timeoutMs (line 7): 0 would give a request no time at all;",
		"destinations.e.maxConnections (line 7): 0 would leave no connection to send with;",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("config check lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "is required with rateLimit") || strings.Contains(stderr, "from 0 to 1000000") {
		t.Errorf("perSecond is refused in two ways:\n%s", stderr)
	}
	// Left out, the same keys take their defaults, and config check shows them.
	cfg = writeConfig(t, `database: { url: postgres://localhost/app }
destinations:
  a: { type: http, url: "http://x/", rateLimit: { perSecond: 5 } }
routes: [ { topicPattern: "#", destination: a } ]
`)
	out, stderr, code := run(t, "config", "check", "--config", cfg)
	for _, want := range []string{"burst: 5", "window: 5s", "probeInterval: 5s", "timeoutMs: 10000", "maxConnections: 64"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("config check without the keys lacks %q: exit %d\n%s%s", want, code, out, stderr)
		}
	}
}

// Mistyped commands and flag values are usage errors (exit 2) that say
// what was meant, and a command that reads no configuration file refuses
// --config instead of ignoring it.
func TestUsageErrorsExitTwoAndSayWhatToDo(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"statsu"}, `unknown command "statsu" for "queuebox" (did you mean status?)`},
		// Nearly every real command line carries --config: the mistyped
		// word is still what is reported, with the suggestion.
		{[]string{"statsu", "--config", "f.yaml"}, `unknown command "statsu" for "queuebox" (did you mean status?)`},
		{[]string{"dead", "lst", "--config=f.yaml", "--limit", "5"}, `unknown command "lst" for "queuebox dead" (did you mean list?)`},
		{[]string{"config", "chek"}, `unknown command "chek" for "queuebox config" (did you mean check?)`},
		{[]string{"dead", "lst"}, `unknown command "lst" for "queuebox dead" (did you mean list?)`},
		{[]string{"completion", "tcsh"}, `unknown command "tcsh" for "queuebox completion"`},
		{[]string{"dev", "--rate", "abc"}, `--rate: "abc" is not a number`},
		{[]string{"dev", "--rate", "-1"}, "--rate: -1 is negative"},
		{[]string{"dead", "list", "--limit", "many"}, `--limit: "many" is not a whole number`},
		{[]string{"dev", "--config", "mine.yaml"}, "--config: `queuebox dev` reads no configuration file"},
		{[]string{"bench", "--config", "mine.yaml"}, "it uses --database-url"},
		{[]string{"completion", "bash", "--config", "mine.yaml"}, "--config: `queuebox completion bash` reads no configuration file"},
	} {
		_, stderr, code := run(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("queuebox %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
		if strings.Contains(stderr, "strconv.") {
			t.Errorf("queuebox %s quotes Go's parser: %s", strings.Join(c.args, " "), stderr)
		}
	}
	// A group alone still prints its help.
	if out, stderr, code := run(t, "config"); code != 0 || !strings.Contains(out, "check") {
		t.Errorf("queuebox config: exit %d, %s%s", code, out, stderr)
	}
}

// Replicas of the real binary share one database; one is killed with
// SIGKILL mid-run. At the receiver nothing is lost, every key stays in
// order, and the only duplicates are rows that were in flight at the kill,
// with the same X-Message-Id. SIGTERM then drains the others with exit 0.
func TestReplicasSurviveKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three replicas of the binary")
	}
	t.Parallel()
	dbURL := testdb.Database(t)
	recv := testrecv.New(t, nil)
	recv.SetDelay(2 * time.Millisecond)
	cfg := writeConfig(t, fmt.Sprintf(`database:
  url: %s
  maxConnections: 5
outbox:
  claimTimeoutMs: 2000
  batchSize: 50
  maxInFlight: 150
  pollIntervalMs: 50
  backoff: { initialMs: 50, maxMs: 500 }
engine:
  unorderedConcurrency: 16
shutdown:
  drainTimeoutMs: 10000
destinations:
  hook: { type: http, url: "%s/events/{{ topic }}" }
routes:
  - { topicPattern: "#", destination: hook }
log: { format: json, level: info }
admin: { listen: "127.0.0.1:0" }
`, dbURL, recv.URL))
	if out, stderr, code := run(t, "migrate", "up", "--config", cfg); code != 0 {
		t.Fatalf("migrate up: %d %s %s", code, out, stderr)
	}
	d, err := postgres.Open(context.Background(), postgres.Options{URL: dbURL, Names: dialects.DefaultNames()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const keys, perKey, unkeyed = 60, 40, 600
	var rows []dialects.NewRow
	for n := range perKey {
		rows = append(rows, testkit.Rows(keys, "order.updated", func(k int) []testkit.RowOption {
			return []testkit.RowOption{testkit.Key(fmt.Sprintf("k%d", k))}
		}, testkit.Payload(fmt.Sprintf(`{"n":%d}`, n)))...)
	}
	rows = append(rows, testkit.Rows(unkeyed, "audit", func(i int) []testkit.RowOption {
		return []testkit.RowOption{testkit.Payload(fmt.Sprintf(`{"i":%d}`, i))}
	})...)
	if err := d.OutboxInsert(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	total := len(rows)

	type replica struct {
		cmd    *exec.Cmd
		stderr *bytes.Buffer
		done   chan error
	}
	start := func() *replica {
		r := &replica{cmd: exec.Command(testbin.Path(t), "run", "--config", cfg), stderr: &bytes.Buffer{}, done: make(chan error, 1)}
		r.cmd.Stderr = r.stderr
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { r.done <- r.cmd.Wait() }()
		t.Cleanup(func() { _ = r.cmd.Process.Kill() })
		return r
	}
	reps := []*replica{start(), start(), start()}
	recv.WaitDelivered(t, total/5, time.Minute)
	if err := reps[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-reps[0].done
	killedAt := len(recv.Requests())
	recv.WaitDelivered(t, total, 2*time.Minute)
	// The receiver can hold every row before the database does: rows the
	// killed replica delivered but could not record stay processing until
	// their leases pass, and are then sent again (duplicates). Wait for the
	// database to record every row delivered.
	if err := testkit.Poll(time.Minute, func() error {
		st, err := d.OutboxStats(context.Background())
		if err == nil && st.Rows[dialects.Delivered] != int64(total) {
			err = fmt.Errorf("the database holds %v", st.Rows)
		}
		return err
	}); err != nil {
		t.Fatalf("after the receiver had every row: %v", err)
	}

	dups := recv.CheckOrder(t)
	// Duplicates: only rows the killed replica had claimed (at most its
	// maxInFlight), each sent again under the same id.
	if dups > 150 {
		t.Errorf("%d duplicates; the killed replica held at most 150 rows", dups)
	}
	t.Logf("%d rows, %d requests, %d duplicates after the kill at request %d", total, len(recv.Requests()), dups, killedAt)

	// SIGTERM drains the others: exit code 0, nothing left processing.
	for _, r := range reps[1:] {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
	}
	for i, r := range reps[1:] {
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("replica %d exited with %v after SIGTERM:\n%s", i+1, err, r.stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("replica %d did not exit after SIGTERM", i+1)
		}
	}
	st, err := d.OutboxStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows[dialects.Delivered] != int64(total) || st.Rows[dialects.Processing] != 0 {
		t.Fatalf("database after the run: %v", st.Rows)
	}
}

// `queuebox dev` (what `make run` runs) shows rows being delivered, and
// Ctrl-C stops it with exit 0, leaving no process and no folder behind.
func TestDevModeDeliversAndCleansUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own PostgreSQL")
	}
	t.Parallel()
	cmd := exec.Command(testbin.Path(t), "dev", "--rate", "20")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	lines := make(chan string, 100)
	go func() {
		buf := make([]byte, 0, 4096)
		tmp := make([]byte, 1024)
		for {
			n, err := stdout.Read(tmp)
			buf = append(buf, tmp[:n]...)
			for {
				i := bytes.IndexByte(buf, '\n')
				if i < 0 {
					break
				}
				lines <- string(buf[:i])
				buf = buf[i+1:]
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	var folder, adminPage string
	deliveries := 0
	deadline := time.After(60 * time.Second)
	for deliveries < 5 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("queuebox dev ended early:\n%s", stderr.String())
			}
			if f, ok := strings.CutPrefix(strings.TrimSpace(l), "folder"); ok {
				folder = strings.TrimSpace(f)
			}
			if f, ok := strings.CutPrefix(strings.TrimSpace(l), "admin page"); ok {
				adminPage = strings.Fields(f)[0]
			}
			if strings.HasPrefix(l, "-> ") {
				deliveries++
			}
		case <-deadline:
			t.Fatalf("no deliveries within a minute; stderr:\n%s", stderr.String())
		}
	}
	if folder == "" || !strings.HasPrefix(folder, "/tmp/queuebox-dev-") {
		t.Fatalf("the banner did not name the cluster folder: %q", folder)
	}
	// The banner names the admin page, on a free loopback port, and it
	// answers with the rows dev inserts.
	if !strings.HasPrefix(adminPage, "http://127.0.0.1:") {
		t.Fatalf("the banner did not name the admin page: %q", adminPage)
	}
	if code, body := httpGet(t, adminPage+"healthz", ""); code != 200 {
		t.Errorf("the admin page's /healthz: %d %s", code, body)
	}
	if code, body := httpGet(t, adminPage, ""); code != 200 || !strings.Contains(body, "<title>QueueBox admin</title>") {
		t.Errorf("the admin page: %d %s", code, body)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range lines {
		}
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("queuebox dev exited with %v after Ctrl-C:\n%s", err, stderr.String())
	}
	if _, err := os.Stat(folder); !os.IsNotExist(err) {
		t.Fatalf("the cluster folder %s is still there", folder)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte(folder)) {
			t.Fatalf("a process still runs from %s: %s", folder, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		}
	}
}

// Operators' commands against a real database: status, dead list, replay
// with a dry run and with filters.
func TestStatusDeadListAndReplay(t *testing.T) {
	t.Parallel()
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
destinations: { n: { type: "null" } }
routes: [ { topicPattern: "order.#", destination: n } ]
admin: { listen: "127.0.0.1:0" }
`, dbURL))
	// Before the migrations, status says what to do.
	if _, stderr, code := run(t, "status", "--config", cfg); code != 1 || !strings.Contains(stderr, "the outbox table does not exist") || !strings.Contains(stderr, "queuebox migrate up") {
		t.Fatalf("status before migrate: %d %s", code, stderr)
	}
	if _, stderr, code := run(t, "migrate", "up", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	out, _, code := run(t, "migrate", "status", "--config", cfg)
	if code != 0 || !strings.Contains(out, "V11") || strings.Contains(out, "pending: run") {
		t.Fatalf("migrate status:\n%s", out)
	}
	d, err := postgres.Open(context.Background(), postgres.Options{URL: dbURL, Names: dialects.DefaultNames()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var rows []dialects.NewRow
	for i := range 6 {
		topic := "order.created"
		if i%2 == 0 {
			topic = "user.created" // no route: dead
		}
		rows = append(rows, testkit.Row(topic))
	}
	if err := d.OutboxInsert(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	// Run the relay until the rows are settled, then stop it.
	relay := exec.Command(testbin.Path(t), "run", "--config", cfg)
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the rows to settle", 0, func() error {
		st, err := d.OutboxStats(context.Background())
		if err == nil && (st.Rows[dialects.Dead] != 3 || st.Rows[dialects.Delivered] != 3) {
			err = fmt.Errorf("rows %v", st.Rows)
		}
		return err
	})
	_ = relay.Process.Signal(syscall.SIGTERM)
	if err := relay.Wait(); err != nil {
		t.Fatalf("run exited with %v after SIGTERM", err)
	}

	out, _, _ = run(t, "status", "--config", cfg, "--json")
	if !strings.Contains(out, `"dead":3`) || !strings.Contains(out, `"delivered":3`) || !strings.Contains(out, `"user.created":3`) {
		t.Fatalf("status --json: %s", out)
	}
	out, _, _ = run(t, "dead", "list", "--config", cfg)
	if len(strings.Split(strings.TrimSpace(out), "\n")) != 4 || !strings.Contains(out, `no route matches topic "user.created"`) {
		t.Fatalf("dead list:\n%s", out)
	}
	out, _, code = run(t, "replay", "--config", cfg, "--topic", "user.#", "--dry-run")
	if code != 0 || !strings.Contains(out, "3 rows would be replayed") {
		t.Fatalf("dry run: %d %s", code, out)
	}
	if st, _ := d.OutboxStats(context.Background()); st.Rows[dialects.Dead] != 3 {
		t.Fatal("the dry run changed rows")
	}
	out, _, _ = run(t, "replay", "--config", cfg, "--error-contains", "no route", "--topic", "user.*")
	if !strings.Contains(out, "3 rows replayed") {
		t.Fatalf("replay: %s", out)
	}
	st, _ := d.OutboxStats(context.Background())
	if st.Rows[dialects.Pending] != 3 || st.Rows[dialects.Dead] != 0 {
		t.Fatalf("after replay: %v", st.Rows)
	}
	if _, stderr, code := run(t, "replay", "--config", cfg); code != 2 || !strings.Contains(stderr, "say which rows") {
		t.Fatalf("a bare replay: %d %s", code, stderr)
	}
	if _, stderr, code := run(t, "replay", "--config", cfg, "--since", "yesterday"); code != 2 || !strings.Contains(stderr, "--since") {
		t.Fatalf("a bad --since: %d %s", code, stderr)
	}
}

// A secret from the environment used in a destination header never appears
// in last_error or in the logs, even when the receiver echoes it back, and
// last_error stays within http.maxErrorBodyBytes.
func TestEnvironmentSecretNeverLeaks(t *testing.T) {
	const secret = "tok-9f8e7d6c5b4a-from-env"
	dbURL := testdb.Database(t)
	recv := testrecv.New(t, func(r *testrecv.Request) (int, string, map[string]string) {
		return 401, "bad credentials: " + r.Header.Get("Authorization") + " " + strings.Repeat("ü", 400), nil
	})
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
http: { maxErrorBodyBytes: 100 }
destinations:
  hook:
    type: http
    url: %s/hook
    headers: { Authorization: "Bearer ${HOOK_TOKEN}" }
routes: [ { topicPattern: "#", destination: hook } ]
log: { level: debug }
admin: { listen: "127.0.0.1:0" }
`, dbURL, recv.URL))
	t.Setenv("HOOK_TOKEN", secret)
	if _, stderr, code := run(t, "migrate", "up", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	d, err := postgres.Open(context.Background(), postgres.Options{URL: dbURL, Names: dialects.DefaultNames()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.OutboxInsert(context.Background(), []dialects.NewRow{testkit.Row("x", testkit.MaxAttempts(0))}); err != nil {
		t.Fatal(err)
	}
	relay := exec.Command(testbin.Path(t), "run", "--config", cfg)
	var logs bytes.Buffer
	relay.Stderr = &logs
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	var listed []dialects.ListedRow
	_ = testkit.Poll(0, func() error { // checked below
		var err error
		if listed, _, err = dialects.List(context.Background(), d, dialects.Filter{}, nil, 1); err == nil && len(listed) == 0 {
			err = errors.New("no row listed yet")
		}
		return err
	})
	_ = relay.Process.Signal(syscall.SIGTERM)
	_ = relay.Wait()
	if len(listed) != 1 || listed[0].LastError == nil {
		t.Fatalf("the row did not go dead: %+v", listed)
	}
	le := *listed[0].LastError
	if !strings.Contains(recv.Requests()[0].Header.Get("Authorization"), secret) {
		t.Fatal("the secret did not reach the receiver; the test proves nothing")
	}
	if strings.Contains(le, secret) || !strings.Contains(le, "[REDACTED]") || len(le) > 100 {
		t.Fatalf("last_error (%d bytes) = %q", len(le), le)
	}
	if !utf8.ValidString(le) {
		t.Fatalf("last_error was cut inside a character: %q", le)
	}
	if strings.Contains(logs.String(), secret) || !strings.Contains(logs.String(), "row dead") {
		t.Fatalf("logs:\n%s", logs.String())
	}
}

// What `config check` prints is a configuration file: fed back to
// `config check`, it validates and prints the same.
func TestConfigCheckOutputLoadsBack(t *testing.T) {
	cfg := writeConfig(t, `database:
  url: postgres://app:${QB_TEST_DB_PASSWORD}@db.internal:5432/app
destinations:
  orders: { type: http, url: "https://hooks.example.com/{{ topic }}", headers: { Authorization: "Bearer ${QB_TEST_TOKEN}" } }
  events: { type: kafka, brokers: ["127.0.0.1:9092"], topic: events, tls: { enabled: true } }
routes:
  - { topicPattern: "order.#", destination: orders }
  - { topicPattern: "#", destination: events }
`)
	t.Setenv("QB_TEST_DB_PASSWORD", "pw-never-printed")
	t.Setenv("QB_TEST_TOKEN", "token-never-printed")
	out, stderr, code := run(t, "config", "check", "--config", cfg)
	if code != 0 || !strings.Contains(stderr, "is valid") {
		t.Fatalf("config check: %d %s", code, stderr)
	}
	// enabled: true is the attempt history's, the inbox relay's, the Kafka
	// destination's tls and both destinations' circuitBreaker.
	if strings.Contains(out, "never-printed") || strings.Count(out, "brokers:") != 1 || strings.Count(out, "enabled: true") != 5 {
		t.Fatalf("config check printed a secret or foreign keys:\n%s", out)
	}
	again, stderr, code := run(t, "config", "check", "--config", writeConfig(t, out))
	if code != 0 {
		t.Fatalf("the printed configuration does not load back (exit %d):\n%s\n%s", code, stderr, out)
	}
	if again != out {
		t.Fatalf("printed twice, the configuration differs:\n%s\n---\n%s", out, again)
	}
}

// The quick start's step 3, read from docs/quickstart.md and run as a user
// would in a shell: its configuration file, then its commands with the
// built binary on PATH, against a fresh database and a receiver in place
// of `queuebox dev`'s. The only change to the commands: `kill %1` waits
// until status shows the row delivered, as the page says to do.
func TestQuickStartStepThree(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick start")
	}
	if _, err := exec.LookPath("psql"); err != nil {
		t.Skip("psql is not installed (the PostgreSQL server package brings it)")
	}
	t.Parallel()
	page, err := os.ReadFile("../../docs/quickstart.md")
	if err != nil {
		t.Fatal(err)
	}
	_, step3, ok := strings.Cut(string(page), "## 3.")
	if !ok {
		t.Fatal("docs/quickstart.md has no step 3")
	}
	var yamlBlock, runBlock string
	for _, part := range strings.Split(step3, "```")[1:] {
		switch {
		case strings.HasPrefix(part, "yaml\n"):
			yamlBlock = strings.TrimPrefix(part, "yaml\n")
		case strings.HasPrefix(part, "sh\n") && strings.Contains(part, "queuebox run"):
			runBlock = strings.TrimPrefix(part, "sh\n")
		}
	}
	if yamlBlock == "" || !strings.Contains(runBlock, "kill %1") {
		t.Fatalf("step 3 lost its configuration or its commands:\n%s", step3)
	}
	dir := t.TempDir()
	// The admin listener on a free port, so that tests running at once do
	// not compete for the default one.
	if strings.Contains(yamlBlock, "\nadmin:") {
		t.Fatal("step 3's configuration sets admin: the test's own admin.listen would clash")
	}
	yamlBlock += "admin: { listen: \"127.0.0.1:0\" }\n"
	if err := os.WriteFile(filepath.Join(dir, "queuebox.yaml"), []byte(yamlBlock), 0o600); err != nil {
		t.Fatal(err)
	}
	script := strings.Replace(runBlock, "kill %1",
		`for i in $(seq 300); do queuebox status --config queuebox.yaml --json | grep -q '"delivered":1' && break; sleep 0.1; done; kill %1`, 1)
	recv := testrecv.New(t, nil)
	cmd := exec.Command("bash", "-e", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"PATH="+filepath.Dir(testbin.Path(t))+":"+os.Getenv("PATH"),
		"QUEUEBOX_DATABASE_URL="+testdb.Database(t),
		"ORDERS_URL="+recv.URL,
		"ORDERS_TOKEN=try-me",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("step 3 failed: %v\n%s", err, out)
	}
	for _, want := range []string{"queuebox.yaml is valid.", "INSERT 0 1", "STATE       ROWS", `"msg":"stopped"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	reqs := recv.Requests()
	if len(reqs) != 1 || reqs[0].Header.Get("Authorization") != "Bearer try-me" || reqs[0].Topic != "order.created" ||
		reqs[0].Key != "cust-7" || !strings.Contains(string(reqs[0].Body), `"orderId": 7`) {
		t.Fatalf("the receiver got %+v", reqs)
	}
}

// An open transaction that inserted outbox rows holds back keyed rows
// inserted after it began: status names it (process, how long, since when,
// application), in text and JSON, and forgets it once it commits.
func TestStatusNamesALongTransaction(t *testing.T) {
	t.Parallel()
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
destinations: { n: { type: "null" } }
routes: [ { topicPattern: "#", destination: n } ]
`, dbURL))
	if _, stderr, code := run(t, "migrate", "up", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pid int64
	if _, err := tx.Exec(ctx, `SET LOCAL application_name = 'billing-batch'`); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `INSERT INTO outbox (topic, key, payload) VALUES ('invoice.created', 'acct-1', '{}') RETURNING pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// Status names a transaction once it has been open for a second.
	testkit.Eventually(t, "status to name the open transaction", 0, func() error {
		out, stderr, code := run(t, "status", "--config", cfg)
		if code != 0 || !strings.Contains(out, "wait until they commit or roll back") || !strings.Contains(out, fmt.Sprint(pid)) ||
			!strings.Contains(out, "billing-batch") || !strings.Contains(out, "idle in transaction") {
			return fmt.Errorf("status while a transaction holds rows back (pid %d): exit %d\n%s%s", pid, code, out, stderr)
		}
		return nil
	})
	out, _, code := run(t, "status", "--json", "--config", cfg)
	var st struct {
		HeldBackBy []struct {
			PID         int64   `json:"pid"`
			OpenSeconds float64 `json:"openSeconds"`
			Application string  `json:"application"`
		} `json:"heldBackBy"`
	}
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st.HeldBackBy) != 1 ||
		st.HeldBackBy[0].PID != pid || st.HeldBackBy[0].OpenSeconds < 1 || st.HeldBackBy[0].Application != "billing-batch" {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if out, _, _ = run(t, "status", "--config", cfg); strings.Contains(out, "wait until they commit") {
		t.Fatalf("status names a committed transaction:\n%s", out)
	}
}

// A SIGTERM that arrives while the relay is still starting (loading its
// configuration, opening the pool, migrating) stops it cleanly with exit 0,
// as an orchestrator expects of a rollout that is cancelled at once. The
// configuration file is a FIFO, so the test knows when the relay is reading
// it (and has its signal handling in place: a signal before the program's
// first instructions kills any process, whatever it does).
func TestSIGTERMWhileStartingExitsZero(t *testing.T) {
	dbURL := testdb.Database(t)
	text := fmt.Sprintf(`database: { url: %q }
destinations: { hook: { type: http, url: "http://127.0.0.1:9/hook" } }
routes: [ { topicPattern: "#", destination: hook } ]
admin: { listen: "127.0.0.1:0" }
`, dbURL)
	// start starts a relay on a FIFO and returns once it is reading it,
	// with the FIFO's write end.
	start := func(name string) (*exec.Cmd, *bytes.Buffer, chan error, *os.File) {
		fifo := filepath.Join(t.TempDir(), "queuebox.yaml")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		relay := exec.Command(testbin.Path(t), "run", "--migrate", "--config", fifo)
		logs := &bytes.Buffer{}
		relay.Stderr = logs
		if err := relay.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- relay.Wait() }()
		var w *os.File
		if err := testkit.Poll(0, func() error {
			// A non-blocking open succeeds once the relay has opened the
			// FIFO for reading; until then it fails with ENXIO.
			var err error
			if w, err = os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				return nil
			}
			select {
			case err := <-done:
				t.Fatalf("%s: the relay ended before reading its configuration: %v\n%s", name, err, logs.String())
			default:
			}
			return err
		}); err != nil {
			_ = relay.Process.Kill()
			t.Fatalf("%s: the relay did not read its configuration: %v", name, err)
		}
		return relay, logs, done, w
	}
	wait := func(name string, relay *exec.Cmd, logs *bytes.Buffer, done chan error) {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v (want exit 0); its log:\n%s", name, err, logs.String())
			}
		case <-time.After(30 * time.Second):
			_ = relay.Process.Kill()
			t.Fatalf("%s: still running 30 s later; its log:\n%s", name, logs.String())
		}
	}

	// While the configuration is being read.
	relay, logs, done, w := start("SIGTERM while reading the configuration")
	_ = relay.Process.Signal(syscall.SIGTERM)
	// A sleep that no signal can replace: the relay shows nothing of the
	// signal while it reads, and the test wants it to arrive first.
	time.Sleep(100 * time.Millisecond)
	_, _ = w.WriteString(text)
	_ = w.Close()
	wait("SIGTERM while reading the configuration", relay, logs, done)

	// At moments after it: opening the pool, migrating, starting.
	for _, after := range []time.Duration{0, 20 * time.Millisecond, 80 * time.Millisecond, 160 * time.Millisecond} {
		name := fmt.Sprintf("SIGTERM %v after the configuration was read", after)
		relay, logs, done, w := start(name)
		_, _ = w.WriteString(text)
		_ = w.Close()
		time.Sleep(after) // the moments are the test's subject
		_ = relay.Process.Signal(syscall.SIGTERM)
		wait(name, relay, logs, done)
	}
}
