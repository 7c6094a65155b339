package benchmarks

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"
)

// runReplicas drains the same backlog (1,000 keys) with one `queuebox run`
// process and then with three, each a separate process of this binary on
// the same table, started and ready before the backlog is committed, and
// timed from that commit to an empty backlog. The two take
// turns in three rounds (one, three, three, one, one, three), each on a
// fresh table, and each reports its median: one pair of drains on a
// durable cluster moves by a fifth either way from one moment to the next.
func runReplicas(ctx context.Context, e *env) ([]Result, error) {
	bin, err := e.binary()
	if err != nil {
		return nil, err
	}
	runs := map[int][]Result{}
	for _, n := range []int{1, 3, 3, 1, 1, 3} {
		r, err := e.replicas(ctx, bin, n)
		if err != nil {
			return nil, err
		}
		// The replicas' rows are counted by round: the drain is timed
		// by a probe that counts nothing, and must stay as cheap.
		e.progress.add(r.Rows - int(r.Failed))
		runs[n] = append(runs[n], r)
	}
	one, three := medianRun(runs[1]), medianRun(runs[3])
	if one.RowsPerSec > 0 {
		three.Ratio = ptr(three.RowsPerSec / one.RowsPerSec)
	}
	return []Result{one, three}, nil
}

// medianRun returns the run with the median rate, its note listing every
// run's rate.
func medianRun(rs []Result) Result {
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b Result) int { return cmp.Compare(a.RowsPerSec, b.RowsPerSec) })
	m := sorted[len(sorted)/2]
	rates := make([]string, len(rs))
	for i, r := range rs {
		rates[i] = fmt.Sprintf("%.0f", r.RowsPerSec)
	}
	m.Note = fmt.Sprintf("the real binary, median of %d rounds (%s rows/s, in the order run), timed from the commit of the backlog with the processes already running", len(rs), strings.Join(rates, ", "))
	return m
}

func (e *env) replicas(ctx context.Context, bin string, n int) (Result, error) {
	d, h, err := e.fresh(ctx, "replicas")
	if err != nil {
		return Result{}, err
	}
	// Each round's table goes when the round ends, so that its vacuum
	// does not run during the next round.
	defer e.dropSchema(d)
	rows := e.o.Rows
	cfg := e.config(d)
	dir, err := ownedTemp("queuebox-bench-replicas-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	procs := make([]*replicaProc, 0, n)
	exited := make(chan *replicaProc, n)
	stopAll := func() {
		for _, p := range procs {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			<-p.done
		}
	}
	for i := range n {
		// Each replica listens on a port of its own choosing (port 0), and
		// says which in its log: a port picked here and handed over could
		// be taken by another program in between.
		text, err := yaml.Marshal(map[string]any{
			// The URL, which may hold a password, goes in the replicas'
			// environment, not in a file that a killed bench leaves behind.
			"database":     map[string]any{"schema": cfg.Database.Schema},
			"destinations": map[string]any{"bench": map[string]any{"type": "null"}},
			"routes":       []any{map[string]any{"topicPattern": "#", "destination": "bench"}},
			"admin":        map[string]any{"listen": "127.0.0.1:0"},
			"log":          map[string]any{"level": "info", "format": "json"},
		})
		if err != nil {
			stopAll()
			return Result{}, err
		}
		file := filepath.Join(dir, fmt.Sprintf("queuebox-%d.yaml", i+1))
		if err := os.WriteFile(file, text, 0o600); err != nil {
			stopAll()
			return Result{}, err
		}
		p, err := startReplica(ctx, bin, file, withApplicationName(cfg.Database.URL, "queuebox-bench-"+e.run), exited)
		if err != nil {
			stopAll()
			return Result{}, err
		}
		procs = append(procs, p)
	}
	// The replicas run before the backlog arrives, as they do in
	// production: the drain is timed from the commit that makes the rows
	// visible, not from the processes' start (three starts and their
	// database sessions cost a fixed second or so that a long-running
	// replica never pays again).
	for _, p := range procs {
		if err := waitReady(ctx, p, exited, n > 1); err != nil {
			stopAll()
			return Result{}, err
		}
	}
	if err := e.seedAtOnce(ctx, d, h, rows, 1000); err != nil {
		stopAll()
		return Result{}, err
	}
	m := e.meter()
	var cpu0 time.Duration
	for _, p := range procs {
		cpu0 += procCPU(p.cmd.Process.Pid)
	}
	deadline := time.Now().Add(30 * time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			err = ctx.Err()
			break wait
		case p := <-exited:
			// A replica that ends before the backlog does would leave the
			// others to drain it, or nobody: say so rather than wait.
			err = fmt.Errorf("a replica (queuebox run) ended during the drain: %v; its last output: %s", p.err, p.output.tail())
			break wait
		case <-tick.C:
		}
		if more, err2 := anyOpen(ctx, d, h); err2 != nil || !more {
			err = err2
			break
		}
	}
	elapsed := since(m.start)
	open, _ := countOpen(ctx, d, h)
	variant := fmt.Sprintf("%d processes", n)
	if n == 1 {
		variant = "1 process"
	}
	r := Result{Scenario: "replicas", Variant: variant, Rows: rows, Keys: 1000, Replicas: n,
		BatchSize: cfg.Outbox.BatchSize, Mailbox: mailboxes(cfg), Failed: max(open, 0)}
	var cpu time.Duration
	for _, p := range procs {
		r.PeakRSSMB = max(r.PeakRSSMB, peakRSSMB(p.cmd.Process.Pid))
		cpu += procCPU(p.cmd.Process.Pid)
	}
	cpu -= cpu0
	r.RelayCPU = cpu.Seconds()
	if e.cluster != nil {
		db := e.dbCPU() - m.dbCPU
		r.DBCPU = db.Seconds()
		if db+cpu > 0 {
			r.DBCPUShare = ptr(float64(db) / float64(db+cpu))
		}
	}
	stopAll()
	r.Seconds = elapsed
	r.RowsPerSec = float64(rows) / elapsed
	if err != nil {
		return r, err
	}
	return r, nil
}

// replicaProc is one `queuebox run` of the replicas scenario.
type replicaProc struct {
	cmd    *exec.Cmd
	admin  adminAddr // its admin listener, from its log
	output *tailBuffer
	err    error
	done   chan struct{}
}

// startReplica starts `bin run --config file` against the database at url.
// The child gets none of the QUEUEBOX_ variables of the bench's
// environment (the user's QUEUEBOX_DATABASE_URL would point it at another
// database than the one seeded), dies with the bench even on SIGKILL, and
// keeps its output for the error that names it; its end is sent to
// exited.
func startReplica(ctx context.Context, bin, file, url string, exited chan<- *replicaProc) (*replicaProc, error) {
	p := &replicaProc{output: &tailBuffer{max: 4096}, done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, bin, "run", "--config", file)
	p.cmd.Stdout, p.cmd.Stderr = p.output, io.MultiWriter(p.output, &p.admin)
	p.cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "QUEUEBOX_") }),
		"QUEUEBOX_DATABASE_URL="+url)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s run: %w", bin, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		if p.err == nil {
			p.err = errors.New("it exited with status 0")
		}
		close(p.done)
		exited <- p
	}()
	return p, nil
}

// waitReady waits until the replica's /readyz answers 200 (it reaches the
// database and the schema is current) and its metrics show that it sees
// the other replicas' sessions (shared) or none (alone, after a round of
// three whose sessions may outlive their processes for a moment): until
// then it runs claims and completions as it would with the other number.
func waitReady(ctx context.Context, p *replicaProc, exited <-chan *replicaProc, shared bool) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(time.Minute)
	for {
		if admin := p.admin.get(); admin != "" {
			if n, ok := otherRelaySessions(client, admin); ok && (n > 0) == shared && replicaReady(client, admin) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case q := <-exited:
			return fmt.Errorf("a replica (queuebox run) ended before it was ready: %v; its last output: %s", q.err, q.output.tail())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a replica (queuebox run) was not ready, or did not see the others, a minute after its start (its /readyz and /metrics at %q); its last output: %s", p.admin.get(), p.output.tail())
		}
	}
}

func replicaReady(client *http.Client, admin string) bool {
	resp, err := client.Get("http://" + admin + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// otherRelaySessions reads queuebox_other_relay_sessions from the
// replica's metrics.
func otherRelaySessions(client *http.Client, admin string) (float64, bool) {
	resp, err := client.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), `queuebox_other_relay_sessions{outbox="default"} `); ok {
			n, err := strconv.ParseFloat(v, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// adminAddr reads a replica's JSON log lines until the one that says where
// its admin listener listens.
type adminAddr struct {
	mu      sync.Mutex
	partial []byte
	addr    string
}

func (a *adminAddr) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.addr != "" {
		return len(p), nil
	}
	a.partial = append(a.partial, p...)
	for {
		line, rest, ok := bytes.Cut(a.partial, []byte("\n"))
		if !ok {
			break
		}
		a.partial = rest
		var rec struct{ Msg, Address string }
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "admin listening" && rec.Address != "" {
			a.addr, a.partial = rec.Address, nil
			break
		}
	}
	return len(p), nil
}

func (a *adminAddr) get() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.addr
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = t.b[over:]
	}
	return len(p), nil
}

func (t *tailBuffer) tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.b))
	if s == "" {
		return "(none)"
	}
	return s
}

// withApplicationName names the sessions of a PostgreSQL URL (the URL form
// or the key=value form). The replicas of a run go by a name of the run's
// own: they count each other as relays, and not the relays that may run on
// a server given with --database-url, whose number the bench cannot set.
func withApplicationName(dsn, name string) string {
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return strings.TrimSpace(dsn) + " application_name=" + name
	}
	u, err := neturl.Parse(dsn)
	if err != nil {
		return dsn // the replicas then report the URL's fault themselves
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}
