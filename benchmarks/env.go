package benchmarks

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/pgcluster"
	"github.com/queuebox/queuebox/migrations"
	"github.com/queuebox/queuebox/sinks/tracing"
)

//go:embed harness.sql
var harnessFS embed.FS

// benchApplicationName names the sessions of the bench's own seeding and
// counting, which the relays it measures must not count as other relays.
const benchApplicationName = "queuebox-bench"

// harness are the benchmark's own statements: making, seeding and measuring
// its tables. They are not QueueBox's (those live in the dialects); the
// producer scenario's application statements are in producer.go.
type harness struct {
	Seed, SeedTopics, Analyze, CountOpen, AnyOpen, DropSchema, PlainTable string
}

// env is one run's database and bookkeeping.
type env struct {
	o       Options
	url     string
	cluster *pgcluster.Cluster
	log     *slog.Logger
	n       int
	// run tells this run's schemas from another's on a shared server.
	run string
	// schemas made by the running scenario, dropped when it ends (a
	// server the user gave keeps nothing of the run).
	schemas []*postgres.Dialect
	payload []byte
	// plan is the claim's plan on the backlog table.
	plan string
	// progress counts the rows the running scenario moves.
	progress *progress
	// tracer, when set, makes the spans of the drains (tracing.go).
	tracer *tracing.Tracer
}

func newEnv(ctx context.Context, o Options) (*env, error) {
	e := &env{o: o, url: o.DatabaseURL, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		run: fmt.Sprintf("%08x", rand.Uint32()), progress: newProgress(o)}
	if e.url != "" {
		if err := checkServer(ctx, e.url); err != nil {
			return nil, err
		}
	} else {
		fmt.Fprintln(o.Progress, "Starting a throwaway PostgreSQL cluster (durable settings) ...")
		c, err := pgcluster.Start(ctx, pgcluster.Options{Prefix: "queuebox-bench-"})
		if err != nil {
			return nil, err
		}
		e.cluster, e.url = c, c.URL()
	}
	e.payload = payload(o.PayloadBytes)
	return e, nil
}

// checkServer connects to the server the user gave, before anything runs,
// and says in the terms of the bench's own flag what is wrong: no server,
// a refused login, or a role that may not create the scenarios' schemas.
func checkServer(ctx context.Context, url string) error {
	if _, err := pgx.ParseConfig(url); err != nil {
		return &UsageError{fmt.Sprintf("--database-url is not a PostgreSQL URL (%v); write postgres://user:password@host:5432/database", redactedParseError(err))}
	}
	d, err := postgres.Open(ctx, postgres.Options{URL: url, Names: dialects.DefaultNames(), MaxConnections: 1, ApplicationName: benchApplicationName})
	if err != nil {
		return fmt.Errorf("--database-url: %w", err)
	}
	defer d.Close()
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	err = d.Ping(cctx)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, dialects.ErrLoginRefused):
		return fmt.Errorf("--database-url: %v; check the user, the password and the database name in the URL", err)
	case errors.Is(err, dialects.ErrUnreachable):
		return fmt.Errorf("--database-url: %v; start the server, check the host and the port, or leave --database-url out to use a throwaway cluster", err)
	default:
		return fmt.Errorf("--database-url: %w", err)
	}
	var user, db string
	var create bool
	if err := d.Pool().QueryRow(cctx, "SELECT current_user, current_database(), has_database_privilege(current_database(), 'CREATE')").Scan(&user, &db, &create); err != nil {
		return fmt.Errorf("--database-url: %w", err)
	}
	if !create {
		return fmt.Errorf("--database-url: the role %s may not create schemas in the database %s, and every scenario makes one (dropped when it ends); GRANT CREATE ON DATABASE %s TO %s, or use another role",
			user, db, pgx.Identifier{db}.Sanitize(), pgx.Identifier{user}.Sanitize())
	}
	return nil
}

// redactedParseError is pgx's parse error without the URL it quotes, which
// may hold a password.
func redactedParseError(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return "cannot parse it"
}

// payload is a JSON object of about n bytes.
func payload(n int) []byte {
	base := `{"orderId":"11111111-1111-1111-1111-111111111111","amount":99.99,"currency":"EUR","note":""}`
	pad := max(0, n-len(base))
	return []byte(strings.Replace(base, `"note":""`, `"note":"`+strings.Repeat("x", pad)+`"`, 1))
}

func (e *env) close() {
	e.dropSchemas()
	if e.cluster != nil {
		e.cluster.Stop()
	}
}

// dropSchemas drops the running scenario's schemas and closes their pools,
// so that a scenario's tables, the million rows of backlog included, do not
// outlive it. On the throwaway cluster too: a table left behind, with its
// dead row versions, is autovacuumed while a later scenario runs, and that
// vacuum's seconds of CPU would count against whichever drain it met.
func (e *env) dropSchemas() {
	for len(e.schemas) > 0 {
		e.dropSchema(e.schemas[0]) // which takes it off the list
	}
}

// dropSchema drops one scenario table's schema and closes its pool.
func (e *env) dropSchema(d *postgres.Dialect) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if h, err := e.harness(d.Names()); err == nil {
		_, _ = d.Pool().Exec(ctx, h.DropSchema)
	}
	d.Close()
	e.schemas = slices.DeleteFunc(e.schemas, func(x *postgres.Dialect) bool { return x == d })
}

func (e *env) harness(names dialects.Names) (*harness, error) {
	h := &harness{}
	if err := dialects.Catalog(names, postgres.Quoting, harnessFS, "harness.sql", h); err != nil {
		return nil, err
	}
	return h, nil
}

// fresh makes a migrated schema of its own for one scenario.
func (e *env) fresh(ctx context.Context, name string) (*postgres.Dialect, *harness, error) {
	return e.freshAt(ctx, e.url, name)
}

// freshAt is fresh in the database of url.
func (e *env) freshAt(ctx context.Context, url, name string) (*postgres.Dialect, *harness, error) {
	e.n++
	names := dialects.DefaultNames()
	names.Schema = fmt.Sprintf("qb_bench_%s_%d_%s", e.run, e.n, strings.ReplaceAll(name, "-", "_"))
	d, err := postgres.Open(ctx, postgres.Options{URL: url, Names: names, MaxConnections: 20, ApplicationName: benchApplicationName})
	if err != nil {
		return nil, nil, err
	}
	e.schemas = append(e.schemas, d)
	if _, err := migrations.Up(ctx, d); err != nil {
		return nil, nil, err
	}
	h, err := e.harness(names)
	return d, h, err
}

// seed inserts rows (over keys; 0 keys: unkeyed) and analyses the table.
func (e *env) seed(ctx context.Context, d *postgres.Dialect, h *harness, rows, keys int) error {
	return e.seedWith(ctx, d, h, h.Seed, rows, keys)
}

// seedWith is seed with another of the harness's seeding statements, which
// take the same arguments.
func (e *env) seedWith(ctx context.Context, d *postgres.Dialect, h *harness, statement string, rows, keys int) error {
	const chunk = 50000
	for done := 0; done < rows; done += chunk {
		n := min(chunk, rows-done)
		if _, err := d.Pool().Exec(ctx, statement, n, keys, done, string(e.payload)); err != nil {
			return err
		}
	}
	if _, err := d.Pool().Exec(ctx, h.Analyze); err != nil {
		return err
	}
	// Every seeded phase (the raw loop, the drains, replicas; not latency,
	// producer or inbox-http, which seed nothing) starts right after a
	// checkpoint: the full-page
	// images that follow one, and the checkpoint's own writes, then fall
	// alike in every phase instead of in whichever phase one happens to
	// start in. Skipped where the role may not checkpoint.
	_, _ = d.Pool().Exec(ctx, "CHECKPOINT")
	return nil
}

// seedAtOnce inserts the backlog and analyzes it in one transaction: the
// relays that are already running see every row, and statistics that
// describe them, at the commit. A checkpoint first, as in seed.
func (e *env) seedAtOnce(ctx context.Context, d *postgres.Dialect, h *harness, rows, keys int) error {
	_, _ = d.Pool().Exec(ctx, "CHECKPOINT")
	tx, err := d.Pool().Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, h.Seed, rows, keys, 0, string(e.payload)); err != nil {
		return err
	}
	// ANALYZE counts the rows its own transaction inserted.
	if _, err := tx.Exec(ctx, h.Analyze); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// profiled runs one scenario, under a CPU profile when asked.
func (e *env) profiled(name string, f func() ([]Result, error)) ([]Result, error) {
	if e.o.CPUProfile == "" {
		return f()
	}
	if err := os.MkdirAll(e.o.CPUProfile, 0o755); err != nil {
		return nil, err
	}
	file, err := os.Create(filepath.Join(e.o.CPUProfile, name+".pprof"))
	if err != nil {
		return nil, err
	}
	defer file.Close()
	if err := pprof.StartCPUProfile(file); err != nil {
		return nil, err
	}
	defer pprof.StopCPUProfile()
	return f()
}

// heapProfile writes the heap of the moment next to the CPU profiles (a
// drain writes one halfway).
func (e *env) heapProfile(name string) {
	if e.o.CPUProfile == "" {
		return
	}
	f, err := os.Create(filepath.Join(e.o.CPUProfile, name+".heap.pprof"))
	if err != nil {
		return
	}
	defer f.Close()
	_ = pprof.WriteHeapProfile(f)
}

// conditions is the first line of the table: what the figures mean.
func (e *env) conditions() string {
	server := "the PostgreSQL server at --database-url"
	if e.cluster != nil {
		server = "a throwaway PostgreSQL cluster with durable settings (fsync on, synchronous_commit on)"
	}
	return fmt.Sprintf("queuebox bench: %s; %d-byte payloads; drains in this process with the default configuration and the null destination; %d CPUs, %s",
		server, len(e.payload), runtime.NumCPU(), runtime.Version())
}

// meter measures one scenario's resources: this process's peak memory and
// CPU time, and the database server's CPU time when it runs here.
type meter struct {
	e       *env
	start   time.Time
	selfCPU time.Duration
	dbCPU   time.Duration
}

func (e *env) meter() *meter {
	// What earlier scenarios left on the heap is collected and returned
	// first, so that the peak is this scenario's.
	debug.FreeOSMemory()
	resetPeakRSS()
	return &meter{e: e, start: time.Now(), selfCPU: selfCPU(), dbCPU: e.dbCPU()}
}

// stop fills r's seconds, peak memory and database share.
func (m *meter) stop(r *Result) {
	r.Seconds = since(m.start)
	r.PeakRSSMB = peakRSSMB(os.Getpid())
	self := selfCPU() - m.selfCPU
	r.RelayCPU = self.Seconds()
	if m.e.cluster != nil {
		db := m.e.dbCPU() - m.dbCPU
		r.DBCPU = db.Seconds()
		if db+self > 0 {
			r.DBCPUShare = ptr(float64(db) / float64(db+self))
		}
	}
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// dbCPU adds up the CPU time of the server and every process it started,
// those that ended (backends of closed connections, autovacuum workers)
// included: the server counts them when it reaps them.
func (e *env) dbCPU() time.Duration {
	if e.cluster == nil || e.cluster.PID() == 0 {
		return 0
	}
	root := e.cluster.PID()
	total := procCPU(root) + reapedCPU(root)
	entries, _ := os.ReadDir("/proc")
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil || pid == root {
			continue
		}
		if parent(pid) == root {
			total += procCPU(pid)
		}
	}
	return total
}

// clockTicks is the kernel's USER_HZ, 100 on Linux.
const clockTicks = 100

// procStat returns the fields of /proc/pid/stat after the command.
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

func parent(pid int) int {
	f := procStat(pid)
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

func procCPU(pid int) time.Duration { return cpuAt(pid, 11) }

// cpuAt reads the user and system clock ticks at field i and i+1 of
// /proc/pid/stat, counted after the command.
func cpuAt(pid, i int) time.Duration {
	f := procStat(pid)
	if len(f) < i+2 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[i], 10, 64)
	st, _ := strconv.ParseInt(f[i+1], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks
}

// reapedCPU is the CPU time of pid's children that ended and were waited
// for (cutime and cstime).
func reapedCPU(pid int) time.Duration { return cpuAt(pid, 13) }

// resetPeakRSS starts a new peak for this process (Linux 4.0 and later).
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// peakRSSMB reads a process's peak resident memory.
func peakRSSMB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// anyOpen tells whether rows are not yet delivered or dead.
func anyOpen(ctx context.Context, d *postgres.Dialect, h *harness) (bool, error) {
	var open bool
	err := d.Pool().QueryRow(ctx, h.AnyOpen).Scan(&open)
	return open, err
}

// countOpen counts the rows not yet delivered or dead.
func countOpen(ctx context.Context, d *postgres.Dialect, h *harness) (int64, error) {
	var n int64
	err := d.Pool().QueryRow(ctx, h.CountOpen).Scan(&n)
	return n, err
}

// ownedTemp makes a folder under /tmp with an owner file, so that the next
// run that starts a throwaway cluster removes it at once should this one be
// killed (pgcluster.RemoveStale, whose prefix, queuebox-bench-, it shares).
func ownedTemp(prefix string) (string, error) {
	dir, err := os.MkdirTemp("/tmp", prefix)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// binary is the queuebox executable that the scenarios which run the
// binary start: --binary, or this one.
func (e *env) binary() (string, error) {
	if e.o.Binary != "" {
		return e.o.Binary, nil
	}
	return os.Executable()
}
