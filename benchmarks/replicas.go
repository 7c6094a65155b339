package benchmarks

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"
)

// runReplicas drains the same backlog (1,000 keys) with one `queuebox run`
// process and then with three, each a separate process of this binary on
// the same table, timed from their start to an empty backlog.
func runReplicas(ctx context.Context, e *env) ([]Result, error) {
	bin := e.o.Binary
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		bin = self
	}
	var out []Result
	for _, n := range []int{1, 3} {
		r, err := e.replicas(ctx, bin, n)
		if err != nil {
			return nil, err
		}
		if n == 3 && out[0].RowsPerSec > 0 {
			r.Ratio = ptr(r.RowsPerSec / out[0].RowsPerSec)
		}
		out = append(out, r)
	}
	return out, nil
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
	if e.cluster != nil {
		if db := e.dbCPU() - m.dbCPU; db+cpu > 0 {
			r.DBCPUShare = ptr(float64(db) / float64(db+cpu))
		}
	}
	stopAll()
	r.Seconds = elapsed
	r.RowsPerSec = float64(rows) / elapsed
	r.Note = "the real binary; the rate includes each process's start"
	if err != nil {
		return r, err
	}
	return r, nil
}
