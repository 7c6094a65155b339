package benchmarks

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/queuebox/queuebox/admin"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
)

// The wake-after-idle scenario measures what an idle relay costs its
// database and how soon it delivers the first row after a quiet spell, for
// both kinds of wake-up: logical replication (database.wakeups: auto, on a
// cluster with wal_level=logical) and probes (database.wakeups: probe). It
// runs the real binary, as `queuebox run` runs in production, with an HTTP
// destination in this process that notes when each row arrives.

// wakeRows is how many rows, each after a quiet spell, each kind of wake-up
// is timed on; idleWindow how long the idle cost is counted.
const (
	wakeRows   = 50
	idleWindow = 20 * time.Second
)

// defaultQuiet is the quiet spell before each row when --seconds is not
// given: longer than every idle pace takes to settle (a second to leave the
// busy pace, then the probe's back-off, or the 5 s safety probe while nudges
// flow), so that each row finds the relay as idle as it ever gets.
const defaultQuiet = 8 * time.Second

// arrivals is an HTTP destination that notes when each row arrives.
type arrivals struct {
	mu   sync.Mutex
	seen map[string]time.Time
	ch   chan struct{}
}

func (a *arrivals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	a.mu.Lock()
	if _, ok := a.seen[r.Header.Get("X-Message-Id")]; !ok {
		a.seen[r.Header.Get("X-Message-Id")] = at
	}
	a.mu.Unlock()
	select {
	case a.ch <- struct{}{}:
	default:
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *arrivals) at(id string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.seen[id]
	return t, ok
}

// wakeRelay is one kind of wake-up under test: its schema, its destination
// and its replicas.
type wakeRelay struct {
	kind  string
	d     *postgres.Dialect
	dest  *arrivals
	procs []*replicaProc
	stop  func()
}

func runWakeAfterIdle(ctx context.Context, e *env) ([]Result, error) {
	bin, err := e.binary()
	if err != nil {
		return nil, err
	}
	quiet := defaultQuiet
	if e.o.secondsGiven {
		quiet = time.Duration(e.o.Seconds) * time.Second
	}
	var out []Result
	relays := map[string]*wakeRelay{}
	defer func() {
		for _, r := range relays {
			r.stop()
		}
	}()
	// The idle cost first, with one replica and then three, each kind alone
	// on the server, in a database of their own: pg_stat_database then
	// counts their transactions and nobody else's.
	for _, kind := range []string{"logical", "probe"} {
		for _, n := range []int{1, 3} {
			db, err := e.ownDatabase(ctx, fmt.Sprintf("idle_%s_%d", kind, n))
			if err != nil {
				return out, err
			}
			r, err := e.startWakeRelays(ctx, bin, db.url, kind, n, false)
			if err != nil {
				db.drop()
				return out, err
			}
			res, err := e.idleCost(ctx, r, db, n)
			r.stop()
			db.drop()
			if err != nil {
				return out, err
			}
			out = append(out, res)
		}
	}
	// The latencies, with one replica of each kind, each on its table.
	for i, kind := range []string{"logical", "probe"} {
		r, err := e.startWakeRelays(ctx, bin, e.url, kind, 1, i > 0)
		if err != nil {
			return out, err
		}
		relays[kind] = r
	}
	// Rows to both, in turns: each relay sees a quiet spell before each.
	lat := map[string][]float64{}
	var missing int64
	for i := range wakeRows {
		if err := sleepCtx(ctx, quiet); err != nil {
			return out, err
		}
		for _, kind := range []string{"logical", "probe"} {
			ms, ok, err := e.oneRowAfterQuiet(ctx, relays[kind])
			if err != nil {
				return out, err
			}
			if !ok {
				missing++
				continue
			}
			lat[kind] = append(lat[kind], ms)
			e.progress.add(1)
		}
		if (i+1)%10 == 0 {
			fmt.Fprintf(e.o.Progress, "bench: wake-after-idle: %d of %d rows after %s of quiet each\n", i+1, wakeRows, quiet)
		}
	}
	for _, kind := range []string{"logical", "probe"} {
		l := lat[kind]
		r := Result{Scenario: "wake-after-idle", Variant: kind + ", first row after quiet", Rows: len(l), Replicas: 1,
			Failed: missing, Seconds: quiet.Seconds()}
		if len(l) > 0 {
			slices.Sort(l)
			q := func(p float64) *float64 { return ptr(l[min(len(l)-1, int(p*float64(len(l))))]) }
			r.P50, r.P95, r.P99 = q(0.50), q(0.95), q(0.99)
		}
		r.Note = fmt.Sprintf("%d rows, each inserted after %s in which the relay had nothing to do; latency from the insert's commit to its arrival at an HTTP destination (the real binary)",
			len(l), quiet)
		out = append(out, r)
	}
	return out, nil
}

// startWakeRelays starts n replicas of the binary on a fresh table in the
// database of url, with database.wakeups auto (logical) or probe,
// delivering to a destination of this process, and waits until they are
// ready and, with logical, listen. beside says other relays run on the
// server already.
func (e *env) startWakeRelays(ctx context.Context, bin, url, kind string, n int, beside bool) (*wakeRelay, error) {
	d, _, err := e.freshAt(ctx, url, "wake_"+kind)
	if err != nil {
		return nil, err
	}
	dest := &arrivals{seen: map[string]time.Time{}, ch: make(chan struct{}, 1)}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: dest, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	dir, err := ownedTemp("queuebox-bench-wake-")
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	wakeups := "auto"
	if kind == "probe" {
		wakeups = "probe"
	}
	r := &wakeRelay{kind: kind, d: d, dest: dest}
	exited := make(chan *replicaProc, n)
	r.stop = func() {
		for _, p := range r.procs {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range r.procs {
			<-p.done
		}
		_ = srv.Close()
		_ = os.RemoveAll(dir)
		e.dropSchema(d)
	}
	text, err := yaml.Marshal(map[string]any{
		"database":     map[string]any{"schema": d.Names().Schema, "wakeups": wakeups},
		"destinations": map[string]any{"bench": map[string]any{"type": "http", "url": "http://" + l.Addr().String() + "/"}},
		"routes":       []any{map[string]any{"topicPattern": "#", "destination": "bench"}},
		"admin":        map[string]any{"listen": "127.0.0.1:0"},
		"log":          map[string]any{"level": "info", "format": "json"},
	})
	if err != nil {
		r.stop()
		return nil, err
	}
	file := filepath.Join(dir, "queuebox.yaml")
	if err := os.WriteFile(file, text, 0o600); err != nil {
		r.stop()
		return nil, err
	}
	for range n {
		p, err := startReplica(ctx, bin, file, withApplicationName(url, "queuebox-bench-"+e.run), exited)
		if err != nil {
			r.stop()
			return nil, err
		}
		r.procs = append(r.procs, p)
	}
	for _, p := range r.procs {
		if err := waitReady(ctx, p, exited, n > 1 || beside); err != nil {
			r.stop()
			return nil, err
		}
	}
	if kind == "logical" {
		if err := e.waitListening(ctx, d, r.procs); err != nil {
			r.stop()
			return nil, err
		}
	}
	return r, nil
}

// waitListening waits until every replica listens (its metrics say so)
// and one temporary slot streams: the replicas of one outbox share one.
func (e *env) waitListening(ctx context.Context, d *postgres.Dialect, procs []*replicaProc) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(time.Minute)
	for {
		var active int
		if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE temporary AND active AND database = current_database()`).Scan(&active); err != nil {
			return err
		}
		listening := 0
		for _, p := range procs {
			if admin := p.admin.get(); admin != "" && metricIs(client, admin, `queuebox_wakeups{kind="logical",outbox="default",state="listening"} `, 1) {
				listening++
			}
		}
		if active == 1 && listening == len(procs) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("logical wake-ups: %d of %d replicas listen, with %d slots streaming (want 1), a minute after their start (the cluster needs wal_level=logical)",
				listening, len(procs), active)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// metricIs says whether the replica's metrics have the line that starts
// with prefix, with the value want.
func metricIs(client *http.Client, admin, prefix string, want float64) bool {
	resp, err := client.Get("http://" + admin + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			n, err := strconv.ParseFloat(v, 64)
			return err == nil && n == want
		}
	}
	return false
}

// idleDatabase is where the idle relays run: a database of their own
// (own), or, where the bench may not create one, the bench's.
type idleDatabase struct {
	url, name string
	own       bool
	why       string // why not own
	drop      func()
}

// ownDatabase creates a database for the idle relays. Where the role may
// not (CREATE DATABASE refused), the relays share the bench's database,
// and the count says so.
func (e *env) ownDatabase(ctx context.Context, name string) (*idleDatabase, error) {
	cfg, err := pgx.ParseConfig(e.url)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	db := &idleDatabase{url: e.url, name: cfg.Database, drop: func() {}}
	own := fmt.Sprintf("qb_bench_%s_%s", e.run, name)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{own}.Sanitize()); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		db.why = err.Error()
		return db, nil
	}
	url, err := withDatabase(e.url, own)
	if err != nil {
		return nil, err
	}
	db.url, db.name, db.own = url, own, true
	db.drop = func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if c, err := pgx.ConnectConfig(dctx, cfg); err == nil {
			_, _ = c.Exec(dctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{own}.Sanitize()+" WITH (FORCE)")
			_ = c.Close(dctx)
		}
	}
	return db, nil
}

// withDatabase is the connection string dsn naming the database db.
func withDatabase(dsn, db string) (string, error) {
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		// keyword=value: a later keyword overrides an earlier one.
		return strings.TrimSpace(dsn) + " dbname=" + db, nil
	}
	u, err := neturl.Parse(dsn)
	if err != nil {
		return "", err
	}
	u.Path = "/" + db
	return u.String(), nil
}

// idleCost counts the transactions the relays' database ran over
// idleWindow while the replicas had nothing to do, after letting them
// settle. It reads the count from the bench's own database, so that its
// reads are not counted. The start read each replica's /metrics, and a
// replica whose counts were read keeps its cheap reads going for
// admin.WatchedFor (as for an operator's open page): the count waits that
// out.
func (e *env) idleCost(ctx context.Context, r *wakeRelay, db *idleDatabase, n int) (Result, error) {
	if err := sleepCtx(ctx, max(defaultQuiet, admin.WatchedFor+5*time.Second)); err != nil {
		return Result{}, err
	}
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		return Result{}, err
	}
	defer conn.Close(context.Background())
	count := func() (int64, error) {
		var x int64
		err := conn.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, db.name).Scan(&x)
		return x, err
	}
	// The statistics reach pg_stat_database within a second of a
	// transaction; where the relays share the bench's database, the
	// bench's own first read counts too.
	x0, err := count()
	if err != nil {
		return Result{}, err
	}
	if err := sleepCtx(ctx, idleWindow); err != nil {
		return Result{}, err
	}
	x1, err := count()
	if err != nil {
		return Result{}, err
	}
	own := int64(0)
	if !db.own {
		own = 1
	}
	tx := float64(x1-x0-own) / idleWindow.Seconds()
	res := Result{Scenario: "wake-after-idle", Variant: fmt.Sprintf("%s, idle, %d replica(s)", r.kind, n), Replicas: n,
		Seconds: idleWindow.Seconds(), TransactionsPerSec: ptr(tx)}
	if db.own {
		res.Note = fmt.Sprintf("%.2f transactions per second over %s with %d idle replica(s) on an empty table, in a database of their own (pg_stat_database: theirs, and autovacuum's visits)",
			tx, idleWindow, n)
	} else {
		res.Note = fmt.Sprintf("%.2f transactions per second over %s with %d idle replica(s) on an empty table, in the bench's database (the whole database's, less the bench's reads: a database of their own was refused: %s)",
			tx, idleWindow, n, db.why)
	}
	return res, nil
}

// oneRowAfterQuiet inserts one row and waits for it at the destination; it
// returns the time from the commit to the arrival, in ms.
func (e *env) oneRowAfterQuiet(ctx context.Context, r *wakeRelay) (float64, bool, error) {
	id := uuid.New()
	if err := r.d.OutboxInsert(ctx, []dialects.NewRow{{ID: &id, Topic: "bench.wake", Payload: e.payload}}); err != nil {
		return 0, false, err
	}
	committed := time.Now() // the commit has returned
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for {
		if at, ok := r.dest.at(id.String()); ok {
			// A delivery can arrive before the commit's reply does.
			return max(0, float64(at.Sub(committed))/float64(time.Millisecond)), true, nil
		}
		select {
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-deadline.C:
			return 0, false, nil
		case <-r.dest.ch:
		case <-time.After(time.Millisecond):
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
