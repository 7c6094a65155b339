package benchmarks

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"
)

// runReplicas drains the same backlog (1,000 keys) with one `queuebox run`
// process and then with three, each a separate process of this binary on
// the same table, timed from their start to an empty backlog. The two take
// turns in three rounds (one, three, three, one, one, three), each on a
// fresh table, and each reports its median: one pair of drains on a
// durable cluster moves by a fifth either way from one moment to the next.
func runReplicas(ctx context.Context, e *env) ([]Result, error) {
	bin := e.o.Binary
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		bin = self
	}
	runs := map[int][]Result{}
	for _, n := range []int{1, 3, 3, 1, 1, 3} {
		r, err := e.replicas(ctx, bin, n)
		if err != nil {
			return nil, err
		}
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
	m.Note = fmt.Sprintf("the real binary, median of %d rounds (%s rows/s, in the order run); the rate includes each process's start", len(rs), strings.Join(rates, ", "))
	return m
}

func (e *env) replicas(ctx context.Context, bin string, n int) (Result, error) {
	d, h, err := e.fresh(ctx, "replicas")
	if err != nil {
		return Result{}, err
	}
	rows := e.o.Rows
	if err := e.seed(ctx, d, h, rows, 1000); err != nil {
		return Result{}, err
	}
	cfg := e.config(d)
	text, err := yaml.Marshal(map[string]any{
		"database":     map[string]any{"url": cfg.Database.URL, "schema": cfg.Database.Schema},
		"destinations": map[string]any{"bench": map[string]any{"type": "null"}},
		"routes":       []any{map[string]any{"topicPattern": "#", "destination": "bench"}},
		"admin":        map[string]any{"listen": "127.0.0.1:0"},
		"log":          map[string]any{"level": "warn"},
	})
	if err != nil {
		return Result{}, err
	}
	dir, err := os.MkdirTemp("", "queuebox-bench-replicas-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "queuebox.yaml")
	if err := os.WriteFile(file, text, 0o600); err != nil {
		return Result{}, err
	}
	m := e.meter()
	var procs []*exec.Cmd
	stopAll := func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			_ = p.Wait()
		}
	}
	for range n {
		cmd := exec.CommandContext(ctx, bin, "run", "--config", file)
		cmd.Stdout, cmd.Stderr = e.o.Progress, e.o.Progress
		if err := cmd.Start(); err != nil {
			stopAll()
			return Result{}, err
		}
		procs = append(procs, cmd)
	}
	deadline := time.Now().Add(30 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
		if more, err2 := anyOpen(ctx, d, h); err2 != nil || !more {
			err = err2
			break
		}
	}
	elapsed := since(m.start)
	open, _ := countOpen(ctx, d, h)
	r := Result{Scenario: "replicas", Variant: fmt.Sprintf("%d processes", n), Rows: rows, Keys: 1000, Replicas: n,
		BatchSize: cfg.Outbox.BatchSize, Mailbox: mailboxes(cfg), Failed: max(open, 0)}
	var cpu time.Duration
	for _, p := range procs {
		r.PeakRSSMB = max(r.PeakRSSMB, peakRSSMB(p.Process.Pid))
		cpu += procCPU(p.Process.Pid)
	}
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
