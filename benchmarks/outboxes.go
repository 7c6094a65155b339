package benchmarks

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/queuebox/queuebox/dialects/postgres"
)

// The outboxes scenario runs one relay (the real binary) for many outboxes:
// the schemas of one database, as a team with a schema per tenant has. It
// measures what the relay costs that database while idle, per outbox; the
// first row after a quiet spell on any outbox; the relay's memory; and a
// backlog drained from all the outboxes at once against the same rows in
// one outbox.

// manyOutboxes is how many outboxes the relay serves; outboxRows how many
// single rows, each after a quiet spell, are timed.
const (
	manyOutboxes = 50
	outboxRows   = 20
)

// outboxesRelay is a relay of several outboxes: its schemas, its
// destination and its process.
type outboxesRelay struct {
	url  string
	ds   []*postgres.Dialect
	dest *arrivals
	proc *replicaProc
	file string
	stop func()
}

func runOutboxes(ctx context.Context, e *env) ([]Result, error) {
	bin, err := e.binary()
	if err != nil {
		return nil, err
	}
	quiet := defaultQuiet
	if e.o.secondsGiven {
		quiet = time.Duration(e.o.Seconds) * time.Second
	}
	db, err := e.ownDatabase(ctx, "outboxes")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	var out []Result
	r, err := e.startOutboxesRelay(ctx, bin, db.url, manyOutboxes)
	if err != nil {
		return nil, err
	}
	defer func() { r.stop() }()

	// Idle: the transactions of the whole database, per outbox.
	idle, err := e.idleCost(ctx, &wakeRelay{kind: fmt.Sprintf("%d outboxes", manyOutboxes)}, db, 1)
	if err != nil {
		return out, err
	}
	perOutbox := *idle.TransactionsPerSec / manyOutboxes
	idle.Scenario, idle.Variant = "outboxes", fmt.Sprintf("%d outboxes, idle", manyOutboxes)
	idle.TransactionsPerSec = ptr(perOutbox)
	idle.PeakRSSMB = peakRSSMB(r.proc.cmd.Process.Pid)
	idle.Note = fmt.Sprintf("%.3f transactions per second per outbox (%.2f in all) over %s, one relay of %d outboxes (schemas of one database of their own), idle; budget 2 per outbox; wake-ups: %s; %s",
		perOutbox, perOutbox*manyOutboxes, idleWindow, manyOutboxes, wakeupKinds(r), idle.Note)
	out = append(out, idle)

	// The first row after a quiet spell, on a different outbox each time.
	var lat []float64
	var missing int64
	for i := range outboxRows {
		if err := sleepCtx(ctx, quiet); err != nil {
			return out, err
		}
		d := r.ds[(i*7)%len(r.ds)]
		ms, ok, err := e.oneRowAfterQuiet(ctx, &wakeRelay{d: d, dest: r.dest})
		if err != nil {
			return out, err
		}
		if !ok {
			missing++
			continue
		}
		lat = append(lat, ms)
		e.progress.add(1)
	}
	first := Result{Scenario: "outboxes", Variant: fmt.Sprintf("%d outboxes, first row after quiet", manyOutboxes), Rows: len(lat), Replicas: 1,
		Failed: missing, Seconds: quiet.Seconds(), PeakRSSMB: peakRSSMB(r.proc.cmd.Process.Pid)}
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(p float64) *float64 { return ptr(lat[min(len(lat)-1, int(p*float64(len(lat))))]) }
		first.P50, first.P95, first.P99 = q(0.50), q(0.95), q(0.99)
	}
	first.Note = fmt.Sprintf("%d rows, each on another of the %d outboxes after %s in which the relay had nothing to do; from the insert's commit to its arrival at an HTTP destination; budget 100 ms", len(lat), manyOutboxes, quiet)
	out = append(out, first)
	r.stop()

	// A drain of the same rows spread over the outboxes, then in one.
	rows := e.o.Rows
	for _, n := range []int{manyOutboxes, 1} {
		res, err := e.drainOutboxes(ctx, bin, db.url, n, rows)
		if err != nil {
			return out, err
		}
		out = append(out, res)
	}
	if len(out) == 4 && out[3].RowsPerSec > 0 {
		out[2].Ratio = ptr(out[2].RowsPerSec / out[3].RowsPerSec)
	}
	return out, nil
}

// drainOutboxes starts a relay of n empty outboxes, waits until every one
// is ready, then commits rows spread over them (1,000 keys in all), one
// transaction an outbox, and times the drain from the first commit to the
// last row's arrival.
func (e *env) drainOutboxes(ctx context.Context, bin, url string, n, rows int) (Result, error) {
	r, err := e.outboxesRelay(ctx, url, n)
	if err != nil {
		return Result{}, err
	}
	defer r.stop()
	if err := r.start(ctx, bin); err != nil {
		return Result{}, err
	}
	hs := make([]*harness, len(r.ds))
	for i, d := range r.ds {
		if hs[i], err = e.harness(d.Names()); err != nil {
			return Result{}, err
		}
	}
	per, keys := rows/n, max(1, 1000/n)
	total := per * n
	_, _ = r.ds[0].Pool().Exec(ctx, "CHECKPOINT")
	pid := r.proc.cmd.Process.Pid
	relayCPU, dbCPU := procCPU(pid), e.dbCPU()
	began := time.Now()
	for i, d := range r.ds {
		if err := seedCommitted(ctx, d, hs[i], string(e.payload), per, keys); err != nil {
			return Result{}, err
		}
	}
	for r.dest.count() < total {
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-r.dest.ch:
		case <-time.After(10 * time.Millisecond):
		}
		if time.Since(began) > 30*time.Minute {
			return Result{}, fmt.Errorf("outboxes: %d of %d rows arrived in 30 minutes", r.dest.count(), total)
		}
	}
	took := time.Since(began)
	e.progress.add(rows)
	res := Result{Scenario: "outboxes", Variant: fmt.Sprintf("drain, %d outbox(es)", n), Rows: total, Keys: keys * n, Replicas: 1,
		RowsPerSec: float64(total) / took.Seconds(), Seconds: took.Seconds(), PeakRSSMB: peakRSSMB(pid)}
	// The relay's CPU is the binary's, not this process's.
	relay := procCPU(pid) - relayCPU
	res.RelayCPU = relay.Seconds()
	if e.cluster != nil {
		db := e.dbCPU() - dbCPU
		res.DBCPU = db.Seconds()
		if db+relay > 0 {
			res.DBCPUShare = ptr(float64(db) / float64(db+relay))
		}
	}
	res.Note = fmt.Sprintf("%d rows over %d outbox(es) of one database, committed one transaction an outbox while one relay of them ran, drained to an HTTP destination; from the first commit to the last arrival", total, n)
	if n > 1 {
		res.Note += "; ratio: against the same rows in one outbox"
	}
	return res, nil
}

// seedCommitted inserts rows over keys into one outbox in one transaction,
// with its statistics, so that a relay that runs sees them all at once.
func seedCommitted(ctx context.Context, d *postgres.Dialect, h *harness, payload string, rows, keys int) error {
	tx, err := d.Pool().Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, h.Seed, rows, keys, 0, payload); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, h.Analyze); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// count is how many rows arrived.
func (a *arrivals) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seen)
}

// startOutboxesRelay makes n migrated outboxes in the database of url and
// starts a relay of them that delivers to a destination of this process.
func (e *env) startOutboxesRelay(ctx context.Context, bin, url string, n int) (*outboxesRelay, error) {
	r, err := e.outboxesRelay(ctx, url, n)
	if err != nil {
		return nil, err
	}
	if err := r.start(ctx, bin); err != nil {
		r.stop()
		return nil, err
	}
	return r, nil
}

// outboxesRelay makes n migrated outboxes and the relay's configuration,
// without starting it.
func (e *env) outboxesRelay(ctx context.Context, url string, n int) (*outboxesRelay, error) {
	dest := &arrivals{seen: map[string]time.Time{}, ch: make(chan struct{}, 1)}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: dest, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	dir, err := ownedTemp("queuebox-bench-outboxes-")
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	r := &outboxesRelay{dest: dest, url: withApplicationName(url, "queuebox-bench-"+e.run)}
	r.stop = func() {
		if r.proc != nil {
			_ = r.proc.cmd.Process.Signal(syscall.SIGTERM)
			<-r.proc.done
			r.proc = nil
		}
		_ = srv.Close()
		_ = os.RemoveAll(dir)
		for _, d := range r.ds {
			e.dropSchema(d)
		}
		r.ds = nil
	}
	outboxes := map[string]any{}
	for i := range n {
		d, _, err := e.freshAt(ctx, url, fmt.Sprintf("ob%d", i))
		if err != nil {
			r.stop()
			return nil, err
		}
		// The bench's own sessions of the migration go: fifty idle pools
		// would take the server's connections from the relay.
		d.Pool().Reset()
		d.ClaimPool().Reset()
		r.ds = append(r.ds, d)
		outboxes[fmt.Sprintf("ob%02d", i)] = map[string]any{"database": map[string]any{"url": "${QUEUEBOX_DATABASE_URL}", "schema": d.Names().Schema}}
	}
	text, err := yaml.Marshal(map[string]any{
		"outboxes": outboxes,
		// Two connections an outbox (and, with logical wake-ups, one
		// replication connection each), within the server's 200.
		"engine":       map[string]any{"maxConnections": 2 * n},
		"destinations": map[string]any{"bench": map[string]any{"type": "http", "url": "http://" + l.Addr().String() + "/"}},
		"routes":       []any{map[string]any{"topicPattern": "#", "destination": "bench"}},
		"admin":        map[string]any{"listen": "127.0.0.1:0"},
		"log":          map[string]any{"level": "info", "format": "json"},
	})
	if err != nil {
		r.stop()
		return nil, err
	}
	r.file = filepath.Join(dir, "queuebox.yaml")
	if err := os.WriteFile(r.file, text, 0o600); err != nil {
		r.stop()
		return nil, err
	}
	return r, nil
}

// start starts the relay and waits until every outbox is ready.
func (r *outboxesRelay) start(ctx context.Context, bin string) error {
	exited := make(chan *replicaProc, 1)
	// Every outbox's url is ${QUEUEBOX_DATABASE_URL}: the one database.
	p, err := startReplica(ctx, bin, r.file, r.url, exited)
	if err != nil {
		return err
	}
	r.proc = p
	client := &http.Client{Timeout: 5 * time.Second}
	want := fmt.Sprintf("ready: %d of %d outboxes", len(r.ds), len(r.ds))
	if len(r.ds) == 1 {
		want = "ready"
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if a := p.admin.get(); a != "" {
			if resp, err := client.Get("http://" + a + "/readyz"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 && strings.HasPrefix(string(b), want) {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case q := <-exited:
			return fmt.Errorf("the relay of %d outboxes ended before it was ready: %v; its last output: %s", len(r.ds), q.err, q.output.tail())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the relay of %d outboxes was not ready two minutes after its start; its last output: %s", len(r.ds), p.output.tail())
		}
	}
}

// wakeupKinds counts the outboxes by what wakes them, from the relay's
// metrics.
func wakeupKinds(r *outboxesRelay) string {
	a := r.proc.admin.get()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + a + "/metrics")
	if err != nil {
		return "unknown"
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	kinds := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "queuebox_wakeups{kind=\""); ok && strings.HasSuffix(line, " 1") {
			kind, _, _ := strings.Cut(rest, "\"")
			kinds[kind]++
		}
	}
	return fmt.Sprintf("%d logical, %d probing", kinds["logical"], kinds["probe"])
}
