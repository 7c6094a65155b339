package benchmarks

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/bootstrap"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
)

// runRaw is the baseline: the claim and completion statements the engine
// uses, in two loops (one claims while the other completes), with the
// engine's batch size, and nothing around them.
func runRaw(ctx context.Context, e *env) ([]Result, error) {
	d, h, err := e.fresh(ctx, "raw")
	if err != nil {
		return nil, err
	}
	rows := e.o.Rows
	if err := e.seed(ctx, d, h, rows, 0); err != nil {
		return nil, err
	}
	batch := bootstrap.Defaults().Outbox.BatchSize
	m := e.meter()
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Load() < int64(rows) {
				c, err := d.OutboxClaim(ctx, dialects.ClaimParams{Limit: batch, Lease: 30 * time.Second, Token: uuid.New()})
				if err != nil {
					errs <- err
					return
				}
				claimed := c.Rows
				if len(claimed) == 0 {
					continue
				}
				out := make([]dialects.Outcome, len(claimed))
				for i, r := range claimed {
					out[i] = dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeDelivered}
				}
				if _, err := d.OutboxComplete(ctx, out); err != nil {
					errs <- err
					return
				}
				done.Add(int64(len(claimed)))
				e.progress.add(len(claimed))
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	r := Result{Scenario: "raw", Variant: "2 loops", Rows: rows, BatchSize: batch, Replicas: 1}
	m.stop(&r)
	r.RowsPerSec = float64(rows) / r.Seconds
	return []Result{r}, nil
}

func runDrain(keys int) func(ctx context.Context, e *env) ([]Result, error) {
	return func(ctx context.Context, e *env) ([]Result, error) {
		name := map[int]string{0: "drain", 1000: "drain-keys", 10: "hot-keys", 1: "one-key"}[keys]
		r, err := e.drain(ctx, name, e.o.Rows, keys, nil)
		if err != nil {
			return nil, err
		}
		return []Result{r}, nil
	}
}

// runBacklog drains ten times the rows over 1,000 keys: a claim's cost must
// not grow with the depth of the backlog.
func runBacklog(ctx context.Context, e *env) ([]Result, error) {
	r, err := e.drain(ctx, "backlog", 10*e.o.Rows, 1000, nil)
	if err != nil {
		return nil, err
	}
	return []Result{r}, nil
}

// runMailbox drains over 1,000 keys with every mailbox at one size.
func runMailbox(ctx context.Context, e *env) ([]Result, error) {
	var out []Result
	for _, size := range []int{1, 16, 256, 4096, 0} {
		r, err := e.drain(ctx, "mailbox", e.o.Rows, 1000, func(c *bootstrap.Config) {
			c.Engine.Mailbox = bootstrap.MailboxConfig{Claimer: size, Key: size, Sink: size, Completer: size}
		})
		if err != nil {
			return nil, err
		}
		r.Variant = fmt.Sprintf("mailbox=%d", size)
		if size == 0 {
			r.Variant = "mailbox=unbounded"
		}
		out = append(out, r)
	}
	return out, nil
}

// runBatch drains over 1,000 keys with claims of 100, 500 (the default) and
// 2,000 rows.
func runBatch(ctx context.Context, e *env) ([]Result, error) {
	var out []Result
	for _, size := range []int{100, 500, 2000} {
		r, err := e.drain(ctx, "batch", e.o.Rows, 1000, func(c *bootstrap.Config) {
			c.Outbox.BatchSize = size
		})
		if err != nil {
			return nil, err
		}
		r.Variant = fmt.Sprintf("batchSize=%d", size)
		out = append(out, r)
	}
	return out, nil
}

// runInFlight drains over 1,000 keys with at most 1,000, 10,000 (the
// default) and 50,000 rows in flight.
func runInFlight(ctx context.Context, e *env) ([]Result, error) {
	var out []Result
	for _, n := range []int{1000, 10000, 50000} {
		r, err := e.drain(ctx, "in-flight", e.o.Rows, 1000, func(c *bootstrap.Config) {
			c.Outbox.MaxInFlight = n
		})
		if err != nil {
			return nil, err
		}
		r.Variant = fmt.Sprintf("maxInFlight=%d", n)
		out = append(out, r)
	}
	return out, nil
}

// runHTTP drains to a local HTTP receiver that accepts every request at
// once: the cost of real requests, without a slow receiver.
func runHTTP(ctx context.Context, e *env) ([]Result, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/events/{{ topic }}"
	var out []Result
	for _, keys := range []int{0, 1000} {
		r, err := e.drain(ctx, "http", e.o.Rows, keys, func(c *bootstrap.Config) {
			c.Destinations = map[string]*bootstrap.DestinationConfig{"bench": {Type: "http", URL: url}}
		})
		if err != nil {
			return nil, err
		}
		r.Variant = "unkeyed, receiver in this process"
		if keys > 0 {
			r.Variant = fmt.Sprintf("%d keys, receiver in this process", keys)
		}
		out = append(out, r)
	}
	return out, nil
}

// completions counts the outcomes the engine has written, and shows them
// on the progress bar.
type completions struct {
	actors.NopObserver
	n        atomic.Int64
	progress *progress
}

func (c *completions) Completed(rows int, _ time.Duration) {
	c.n.Add(int64(rows))
	c.progress.add(rows)
}

// config is the default configuration on a scenario's schema, with the
// null destination for every topic.
func (e *env) config(d *postgres.Dialect) *bootstrap.Config {
	cfg := bootstrap.Defaults()
	cfg.Database.URL = e.url
	cfg.Database.Schema = d.Names().Schema
	cfg.Destinations = map[string]*bootstrap.DestinationConfig{"bench": {Type: "null"}}
	cfg.Routes = []bootstrap.RouteConfig{{TopicPattern: "#", Destination: "bench"}}
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Log.Level = "warn"
	return cfg
}

// drain seeds rows and times the engine, built as `queuebox run` builds it,
// from its start to the last outcome written.
func (e *env) drain(ctx context.Context, name string, rows, keys int, tweak func(*bootstrap.Config)) (Result, error) {
	d, h, err := e.fresh(ctx, name)
	if err != nil {
		return Result{}, err
	}
	if err := e.seed(ctx, d, h, rows, keys); err != nil {
		return Result{}, err
	}
	if name == "backlog" {
		e.explainClaim(ctx, d)
	}
	return e.drainSeeded(ctx, d, name, rows, keys, tweak)
}

// drainSeeded times the engine on a table seeded already (drain seeds it
// the usual way; the broker scenarios with topics that take turns).
func (e *env) drainSeeded(ctx context.Context, d *postgres.Dialect, name string, rows, keys int, tweak func(*bootstrap.Config)) (Result, error) {
	cfg := e.config(d)
	if tweak != nil {
		tweak(cfg)
	}
	l, err := bootstrap.FromConfig(cfg)
	if err != nil {
		return Result{}, err
	}
	l.Tracer = e.tracer
	rd, err := bootstrap.OpenDialect(ctx, l)
	if err != nil {
		return Result{}, err
	}
	defer rd.Close()
	opts, err := bootstrap.EngineOptions(l, rd, e.log)
	if err != nil {
		return Result{}, err
	}
	obs := &completions{progress: e.progress}
	opts.Observer = obs
	eng, err := actors.New(opts)
	if err != nil {
		return Result{}, err
	}
	m := e.meter()
	if err := eng.Start(ctx); err != nil {
		return Result{}, err
	}
	deadline := time.Now().Add(30 * time.Minute)
	halfway := false
	st := &eng.Stats
	// Every row has its last outcome written once the outcomes written,
	// less those that send a row round again (retries and releases, counted
	// when decided, so never fewer than written), reach the rows: a broker
	// may fail a delivery that a later attempt makes good.
	final := func() int64 { return obs.n.Load() - st.Retried.Load() - st.Released.Load() }
	for final() < int64(rows) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(2 * time.Millisecond)
		if !halfway && final() >= int64(rows/2) {
			halfway = true
			e.heapProfile(name)
		}
	}
	r := Result{Scenario: name, Rows: rows, Keys: keys, Replicas: 1, BatchSize: cfg.Outbox.BatchSize, Mailbox: mailboxes(cfg)}
	m.stop(&r)
	if name == "backlog" {
		r.ClaimPlans = e.plan
	}
	// A route to several destinations delivers each row to each of them.
	per := int64(1)
	for _, rc := range cfg.Routes {
		per = max(per, int64(len(rc.Destinations)))
	}
	delivered := st.Delivered.Load() / per
	r.Failed = int64(rows) - delivered
	r.RowsPerSec = float64(delivered) / r.Seconds
	if per > 1 {
		r.Note = fmt.Sprintf("%.0f deliveries/s; ", float64(st.Delivered.Load())/r.Seconds)
	}
	if c := st.ClaimStatements.Load(); c > 0 {
		r.Note += fmt.Sprintf("%d claims of %.0f rows (%.1f ms each), %d completions (%.1f ms each)", c,
			float64(st.Claimed.Load())/float64(c), float64(st.ClaimTime.Load())/1e6/float64(c),
			st.CompleteStatements.Load(), float64(st.CompleteTime.Load())/1e6/float64(max(1, st.CompleteStatements.Load())))
		r.Note += " (" + st.ClaimKinds() + ")"
	}
	if n := st.Retried.Load(); n > 0 {
		r.Note += fmt.Sprintf("; %d deliveries failed and were retried", n)
	}
	_ = eng.Stop(context.WithoutCancel(ctx))
	return r, ctx.Err()
}

func mailboxes(c *bootstrap.Config) string {
	mb := c.Engine.Mailbox
	if mb.Claimer == mb.Key && mb.Key == mb.Sink && mb.Sink == mb.Completer {
		if mb.Key == 0 {
			return "unbounded"
		}
		return fmt.Sprint(mb.Key)
	}
	return "default"
}

// explainClaim records the plans of both claims on the seeded table, each
// run and rolled back, for the table's notes: by key (what the engine runs
// on a keyed backlog) and in schedule order, with every row settled.
func (e *env) explainClaim(ctx context.Context, d *postgres.Dialect) {
	batch := bootstrap.Defaults().Outbox.BatchSize
	var out []string
	for _, c := range []struct {
		name string
		walk dialects.ClaimWalk
	}{{"by key", dialects.WalkKeys}, {"in schedule order", dialects.WalkSchedule}} {
		plan, err := d.ExplainClaim(ctx, dialects.ClaimParams{Limit: batch, Lease: 30 * time.Second, Token: uuid.New(),
			MaxHeads: batch / 128, Gate: &dialects.Gate{Settled: 1 << 62}, Walk: c.walk})
		if err != nil {
			plan = "EXPLAIN failed: " + err.Error()
		}
		out = append(out, "-- "+c.name+":\n"+plan)
	}
	e.plan = strings.Join(out, "\n\n")
}
