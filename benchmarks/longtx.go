package benchmarks

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects/postgres"
)

// A transaction left open anywhere in the database (a pg_dump, a report, a
// session idle in transaction) stops vacuum, and index scans can no longer
// mark the row versions that claims and completions leave behind as dead.
// The long-transaction scenario measures what that does to latency; the
// drain-held scenario what it does to a drain.

// holdWindow is the width of the windows that the long-transaction scenario
// reports, and how long it runs before and after the hold.
const holdWindow = 30 * time.Second

// warmUp is how long the rows flow before the first window: a relay
// started on an empty table starts at its idle pace (its first rows wait
// for a probe up to 250 ms apart), which is not what the window before the
// hold is there to show.
const warmUp = 3 * time.Second

// defaultHold is the hold when --seconds is not given.
const defaultHold = 90 * time.Second

// holder is one kind of long transaction.
type holder struct {
	name string
	what string
	// begin opens the transaction on conn.
	begin func(ctx context.Context, conn *pgx.Conn, d *postgres.Dialect) (pgx.Tx, error)
}

var holders = []holder{
	{"reader", "a REPEATABLE READ transaction that read pg_class and holds its snapshot (no transaction id)",
		func(ctx context.Context, conn *pgx.Conn, _ *postgres.Dialect) (pgx.Tx, error) {
			tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
			if err == nil {
				_, err = tx.Exec(ctx, "SELECT count(*) FROM pg_class")
			}
			return tx, err
		}},
	{"writer", "a transaction that inserted a row into another table and holds its transaction id",
		func(ctx context.Context, conn *pgx.Conn, d *postgres.Dialect) (pgx.Tx, error) {
			other := pgx.Identifier{d.Names().Schema, "bench_other"}.Sanitize()
			if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+other+" (n int)"); err != nil {
				return nil, err
			}
			tx, err := conn.Begin(ctx)
			if err == nil {
				_, err = tx.Exec(ctx, "INSERT INTO "+other+" VALUES (1)")
			}
			return tx, err
		}},
}

// hold returns the hold the options ask for.
func (e *env) hold() time.Duration {
	if e.o.Seconds > 0 && e.o.secondsGiven {
		return time.Duration(e.o.Seconds) * time.Second
	}
	return defaultHold
}

// runLongTransaction inserts single keyed rows (1,000 keys) at the steady
// rate for a window, then holds a transaction open for the hold while the
// rows go on, then a window more with it ended; for each holder. Each row
// is measured from its commit to its arrival at the destination, and the
// results are p50 and p99 per window of commit time.
func runLongTransaction(ctx context.Context, e *env) ([]Result, error) {
	var out []Result
	for _, h := range holders {
		// QUEUEBOX_BENCH_HOLDERS=reader or =writer runs that variant only
		// (a ten-minute hold takes about eleven minutes a variant).
		if only := os.Getenv("QUEUEBOX_BENCH_HOLDERS"); only != "" && !slices.Contains(strings.Split(only, ","), h.name) {
			continue
		}
		rs, err := e.longTransaction(ctx, h)
		out = append(out, rs...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func (e *env) longTransaction(ctx context.Context, h holder) ([]Result, error) {
	d, _, err := e.fresh(ctx, "long-transaction-"+h.name)
	if err != nil {
		return nil, err
	}
	// The next variant starts on a server without this one's table: its
	// versions, and autovacuum's work on them once the hold ends, are not
	// the next variant's.
	defer e.dropSchema(d)
	cfg := e.config(d)
	eng, rec, stop, err := e.recording(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer stop()
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	m := e.meter()
	hold := e.hold()
	start := time.Now().Add(warmUp)
	heldFrom, heldUntil := start.Add(holdWindow), start.Add(holdWindow+hold)
	end := heldUntil.Add(holdWindow)
	type held struct {
		dead int64
		err  error
	}
	done := make(chan held, 1)
	go func() {
		var r held
		defer func() { done <- r }()
		sleepUntil(ctx, heldFrom)
		tx, err := h.begin(ctx, conn, d)
		if err != nil {
			r.err = fmt.Errorf("open the %s: %w", h.name, err)
			return
		}
		sleepUntil(ctx, heldUntil)
		// The dead row versions that the hold kept (the statistics lag by
		// up to a second or so).
		_ = d.Pool().QueryRow(ctx, `SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'outbox'`,
			d.Names().Schema).Scan(&r.dead)
		r.err = tx.Rollback(ctx)
	}()
	// The claims of each window: how many, and how long each took; the
	// background looks that ran in it; and what the window cost: the CPU
	// of this process and of the server, autovacuum's runs on the outbox,
	// and the blocks the database read from outside its buffers.
	type claims struct{ n, took, released int64 }
	var perWindow []claims
	var looks, costs []string
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		sleepUntil(ctx, start)
		st := &eng.Stats
		last, lastLooks := claims{st.ClaimStatements.Load(), st.ClaimTime.Load(), st.Released.Load()}, st.LookCounts()
		lastCost := e.windowCost(ctx, d)
		for t := start.Add(holdWindow); !t.After(end.Add(holdWindow / 2)); t = t.Add(holdWindow) {
			sleepUntil(ctx, t)
			now := claims{st.ClaimStatements.Load(), st.ClaimTime.Load(), st.Released.Load()}
			perWindow = append(perWindow, claims{now.n - last.n, now.took - last.took, now.released - last.released})
			looks = append(looks, st.LookKinds(&lastLooks))
			cost := e.windowCost(ctx, d)
			costs = append(costs, cost.since(lastCost))
			last, lastLooks, lastCost = now, st.LookCounts(), cost
		}
	}()
	load := e.steadily(ctx, d, e.o.Rate, 1000, end)
	hr := <-done
	<-sampled
	if hr.err != nil {
		return nil, hr.err
	}
	rec.waitFor(load.committed, 60*time.Second)
	var total Result
	m.stop(&total)

	// Latency per window of commit time.
	windows := int((end.Sub(start) + holdWindow - 1) / holdWindow)
	lat := make([][]float64, windows)
	var missing []string
	// QUEUEBOX_BENCH_LATENCIES names a file to which every row's commit
	// time (ms since the variant began), latency and key are appended, for
	// a closer look at the tail.
	var dump *bufio.Writer
	if path := os.Getenv("QUEUEBOX_BENCH_LATENCIES"); path != "" {
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			defer f.Close()
			dump = bufio.NewWriter(f)
			defer dump.Flush()
		}
	}
	rec.mu.Lock()
	for id, at := range load.committed {
		got, ok := rec.seen[id]
		if !ok {
			missing = append(missing, id)
			continue
		}
		if at.Before(start) {
			continue // the warm-up
		}
		w := min(windows-1, int(at.Sub(start)/holdWindow))
		lat[w] = append(lat[w], float64(got.Sub(at))/float64(time.Millisecond))
		if dump != nil {
			fmt.Fprintf(dump, "%s,%.3f,%.3f,%s\n", h.name, float64(at.Sub(start))/float64(time.Millisecond), float64(got.Sub(at))/float64(time.Millisecond), load.keys[id])
		}
	}
	rec.mu.Unlock()
	var out []Result
	for w, l := range lat {
		from, to := time.Duration(w)*holdWindow, time.Duration(w+1)*holdWindow
		state := "nothing open"
		switch {
		case from >= holdWindow && to <= holdWindow+hold:
			state = "held"
		case from >= holdWindow+hold:
			state = "ended"
		}
		r := Result{Scenario: "long-transaction", Variant: fmt.Sprintf("%s %d-%d s %s", h.name, int(from.Seconds()), int(to.Seconds()), state),
			Rows: len(l), Keys: 1000, Replicas: 1, BatchSize: cfg.Outbox.BatchSize, Mailbox: mailboxes(cfg),
			RowsPerSec: float64(len(l)) / holdWindow.Seconds(), Seconds: holdWindow.Seconds()}
		if len(l) > 0 {
			slices.Sort(l)
			q := func(p float64) *float64 { return ptr(l[min(len(l)-1, int(p*float64(len(l))))]) }
			r.P50, r.P95, r.P99 = q(0.50), q(0.95), q(0.99)
		}
		if w < len(perWindow) && perWindow[w].n > 0 {
			r.Note = fmt.Sprintf("%d claims, %.2f ms each", perWindow[w].n, float64(perWindow[w].took)/1e6/float64(perWindow[w].n))
			if n := perWindow[w].released; n > 0 {
				r.Note += fmt.Sprintf("; %d rows released back to pending", n)
			}
		}
		if w < len(looks) && looks[w] != "" {
			r.Note += "; looks: " + looks[w]
		}
		if w < len(costs) && costs[w] != "" {
			r.Note += "; " + costs[w]
		}
		out = append(out, r)
	}
	// The verdict on the last window of the hold, against the window
	// before it began; the first and last minute of a long hold.
	last := holdWindow + hold - holdWindow
	lastW := int(last / holdWindow)
	before := out[0]
	sum := &out[min(lastW, len(out)-1)]
	sum.Failed = load.failed + int64(len(missing))
	sum.PeakRSSMB, sum.RelayCPU, sum.DBCPU, sum.DBCPUShare = total.PeakRSSMB, total.RelayCPU, total.DBCPU, total.DBCPUShare
	sum.Note += fmt.Sprintf("; %s, open %s; %d dead row versions in the outbox when it ended; %d rows not delivered of %d",
		h.what, hold, hr.dead, sum.Failed, len(load.committed))
	if len(missing) > 0 {
		sum.Note += "; " + undelivered(ctx, d, missing)
	}
	if before.P99 != nil && sum.P99 != nil && *before.P99 > 0 {
		sum.Ratio = ptr(*sum.P99 / *before.P99)
		sum.Note += fmt.Sprintf("; p99 of the hold's last window %.1f ms = %.2fx the window before the hold", *sum.P99, *sum.Ratio)
	}
	// Growth: the last window against the 30 s just before it, which the
	// hold spans too when it lasts 60 s or more.
	if lastW >= 2 && lastW < len(out) {
		if prev := out[lastW-1]; prev.P99 != nil && sum.P99 != nil && *prev.P99 > 0 {
			sum.Note += fmt.Sprintf(" and %.2fx the 30 s before it (%.1f ms)", *sum.P99 / *prev.P99, *prev.P99)
		}
	}
	if hold >= 4*time.Minute {
		first, lastMin := minuteP99(lat, 1), minuteP99(lat, lastW-1)
		if first > 0 {
			sum.Note += fmt.Sprintf("; p99 of the hold's first minute %.1f ms, of its last minute %.1f ms (%.2fx)", first, lastMin, lastMin/first)
		}
	}
	st := &eng.Stats
	if c := st.ClaimStatements.Load(); c > 0 {
		sum.Note += fmt.Sprintf("; %d claims (%.1f ms each), %s", c, float64(st.ClaimTime.Load())/1e6/float64(c), st.ClaimKinds())
	}
	return out, nil
}

// minuteP99 is the p99 of the two windows from window w on (one minute).
func minuteP99(lat [][]float64, w int) float64 {
	if w < 0 || w+1 >= len(lat) {
		return 0
	}
	l := slices.Concat(lat[w], lat[w+1])
	if len(l) == 0 {
		return 0
	}
	slices.Sort(l)
	return l[min(len(l)-1, int(0.99*float64(len(l))))]
}

func sleepUntil(ctx context.Context, t time.Time) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(t)):
	}
}

// runDrainHeld drains the drain-keys backlog while a snapshot is held: the
// snapshot is taken before the rows are inserted and held until the drain
// ends, so that no row version the drain leaves behind can be removed.
func runDrainHeld(ctx context.Context, e *env) ([]Result, error) {
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := holders[0].begin(ctx, conn, nil)
	if err != nil {
		return nil, fmt.Errorf("open the reader: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	r, err := e.drain(ctx, "drain-held", e.o.Rows, 1000, nil)
	r.Note = "with a REPEATABLE READ snapshot held from before the rows were inserted until the drain ended; " + r.Note
	return []Result{r}, err
}

// cost is what a long-transaction window costs, as counters that stand at
// a moment.
type cost struct {
	relay, db time.Duration
	vacuums   int64
	read, hit int64
}

// windowCost reads the counters; those it cannot read stay zero.
func (e *env) windowCost(ctx context.Context, d *postgres.Dialect) cost {
	c := cost{relay: selfCPU(), db: e.dbCPU()}
	_ = d.Pool().QueryRow(ctx, `SELECT COALESCE((SELECT autovacuum_count + vacuum_count FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'outbox'), 0),
	        COALESCE((SELECT blks_read FROM pg_stat_database WHERE datname = current_database()), 0),
	        COALESCE((SELECT blks_hit FROM pg_stat_database WHERE datname = current_database()), 0)`,
		d.Names().Schema).Scan(&c.vacuums, &c.read, &c.hit)
	return c
}

// since describes the window from c0 to c.
func (c cost) since(c0 cost) string {
	s := fmt.Sprintf("CPU: this process %.1f s, the server %.1f s", (c.relay - c0.relay).Seconds(), (c.db - c0.db).Seconds())
	if n := c.vacuums - c0.vacuums; n > 0 {
		s += fmt.Sprintf("; %d vacuums of the outbox", n)
	}
	if hit, read := c.hit-c0.hit, c.read-c0.read; hit+read > 0 {
		s += fmt.Sprintf("; blocks %.1fM, %.2f%% read outside the buffers", float64(hit+read)/1e6, 100*float64(read)/float64(hit+read))
	}
	return s
}

// undelivered tells where the rows that did not arrive stand in the table:
// how many in each state, and the oldest one with the rows of its key
// around it, so that a run that lost sight of rows says why.
func undelivered(ctx context.Context, d *postgres.Dialect, ids []string) string {
	t := pgx.Identifier{d.Names().Schema, "outbox"}.Sanitize()
	rows, err := d.Pool().Query(ctx, `SELECT state, count(*), (EXTRACT(EPOCH FROM now() - min(scheduled_at)) * 1000)::bigint,
	       count(DISTINCT key), max(attempt) FROM `+t+` WHERE id = ANY($1::uuid[]) GROUP BY state ORDER BY state`, ids)
	if err != nil {
		return "where the undelivered rows stand: " + err.Error()
	}
	var parts []string
	for rows.Next() {
		var state string
		var n, oldest, keys, attempt int64
		if err := rows.Scan(&state, &n, &oldest, &keys, &attempt); err != nil {
			return "where the undelivered rows stand: " + err.Error()
		}
		parts = append(parts, fmt.Sprintf("%d %s (%d keys, the oldest due %d ms before this look, attempt up to %d)", n, state, keys, oldest, attempt))
	}
	rows.Close()
	var key string
	var seq int64
	if err := d.Pool().QueryRow(ctx, `SELECT COALESCE(key, ''), sequence FROM `+t+` WHERE id = ANY($1::uuid[]) ORDER BY sequence LIMIT 1`, ids).Scan(&key, &seq); err == nil {
		var around []string
		r, err := d.Pool().Query(ctx, `SELECT sequence, state, attempt, (EXTRACT(EPOCH FROM scheduled_at - created_at) * 1000)::bigint,
		       (EXTRACT(EPOCH FROM now() - scheduled_at) * 1000)::bigint
		  FROM `+t+` WHERE key = $1 AND sequence BETWEEN $2 - 3000 AND $2 + 3000 ORDER BY sequence`, key, seq)
		if err == nil {
			for r.Next() {
				var s, a, sched, ago int64
				var st string
				if r.Scan(&s, &st, &a, &sched, &ago) == nil {
					around = append(around, fmt.Sprintf("%d %s a%d due+%d ago %d", s, st, a, sched, ago))
				}
			}
			r.Close()
		}
		parts = append(parts, fmt.Sprintf("the oldest, key %s sequence %d, among its key's rows [%s]", key, seq, strings.Join(around, ", ")))
	}
	return "undelivered rows: " + strings.Join(parts, "; ")
}
