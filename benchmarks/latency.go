package benchmarks

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/bootstrap"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/sinks"
)

// recorder is a destination that accepts everything at once and notes when
// each row arrived.
type recorder struct {
	mu   sync.Mutex
	seen map[string]time.Time
	// progress shows the rows as they arrive.
	progress *progress
}

func (r *recorder) Publish(_ context.Context, msgs []sinks.Message) []error {
	now := time.Now()
	r.mu.Lock()
	for i := range msgs {
		if _, ok := r.seen[msgs[i].ID]; !ok {
			r.seen[msgs[i].ID] = now
		}
	}
	r.mu.Unlock()
	r.progress.add(len(msgs))
	return make([]error, len(msgs))
}

func (r *recorder) Close() error         { return nil }
func (r *recorder) MaxOrderedBatch() int { return 1000 }

// latencyProducers share the steady rate.
const latencyProducers = 4

// runLatency inserts single keyed rows (1,000 keys) at a steady rate from
// several producers, each an application transaction of one insert, and
// measures each row from its commit to its arrival at the destination. The
// first second is a warm-up and is not counted.
func runLatency(ctx context.Context, e *env) ([]Result, error) {
	d, _, err := e.fresh(ctx, "latency")
	if err != nil {
		return nil, err
	}
	cfg := e.config(d)
	eng, rec, stop, err := e.recording(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer stop()
	m := e.meter()
	warmup := time.Now().Add(time.Second)
	end := warmup.Add(time.Duration(e.o.Seconds) * time.Second)
	load := e.steadily(ctx, d, e.o.Rate, 1000, end)
	committed := map[string]time.Time{}
	for id, at := range load.committed {
		if at.After(warmup) {
			committed[id] = at
		}
	}
	failed := load.failed
	rec.waitFor(committed, 30*time.Second)
	var lat []float64
	missing := 0
	rec.mu.Lock()
	for id, at := range committed {
		got, ok := rec.seen[id]
		if !ok {
			missing++
			continue
		}
		lat = append(lat, float64(got.Sub(at))/float64(time.Millisecond))
	}
	rec.mu.Unlock()
	r := Result{Scenario: "latency", Variant: fmt.Sprintf("%d rows/s offered", e.o.Rate), Rows: len(committed), Keys: 1000,
		Replicas: 1, BatchSize: cfg.Outbox.BatchSize, Mailbox: mailboxes(cfg), Failed: failed + int64(missing)}
	m.stop(&r)
	r.RowsPerSec = float64(len(committed)) / float64(e.o.Seconds)
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(p float64) *float64 { return ptr(lat[min(len(lat)-1, int(p*float64(len(lat))))]) }
		r.P50, r.P95, r.P99 = q(0.50), q(0.95), q(0.99)
	}
	r.Note = fmt.Sprintf("%d producers, one insert per transaction; latency from the producer's commit to the destination", latencyProducers)
	st := &eng.Stats
	if c := st.ClaimStatements.Load(); c > 0 {
		r.Note += fmt.Sprintf("; %d claims (%.1f ms each), %d completions (%.1f ms each); %s", c, float64(st.ClaimTime.Load())/1e6/float64(c),
			st.CompleteStatements.Load(), float64(st.CompleteTime.Load())/1e6/float64(max(1, st.CompleteStatements.Load())), st.ClaimKinds())
	}
	return []Result{r}, nil
}

// recording starts an engine built from cfg as `queuebox run` builds it,
// whose destination is a recorder; stop stops it and closes its database.
func (e *env) recording(ctx context.Context, cfg *bootstrap.Config) (eng *actors.Engine, rec *recorder, stop func(), err error) {
	l, err := bootstrap.FromConfig(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	rd, err := bootstrap.OpenDialect(ctx, l)
	if err != nil {
		return nil, nil, nil, err
	}
	opts, err := bootstrap.EngineOptions(l, rd, e.log)
	if err != nil {
		rd.Close()
		return nil, nil, nil, err
	}
	rec = &recorder{seen: map[string]time.Time{}, progress: e.progress}
	opts.Destinations = map[string]actors.SinkFactory{"bench": func() (sinks.Sink, error) { return rec, nil }}
	if eng, err = actors.New(opts); err == nil {
		err = eng.Start(ctx)
	}
	if err != nil {
		rd.Close()
		return nil, nil, nil, err
	}
	return eng, rec, func() {
		_ = eng.Stop(context.WithoutCancel(ctx))
		rd.Close()
	}, nil
}

// steadyLoad is what steadily inserted: when each row's transaction
// committed, by id, and how many transactions failed.
type steadyLoad struct {
	committed map[string]time.Time
	// keys holds each committed row's key.
	keys   map[string]string
	failed int64
}

// steadily inserts single keyed rows (over keys) at a steady rate until
// end, from latencyProducers producers, each row an application transaction
// of one insert.
func (e *env) steadily(ctx context.Context, d dialects.Operator, rate, keys int, end time.Time) steadyLoad {
	var mu sync.Mutex
	load := steadyLoad{committed: map[string]time.Time{}, keys: map[string]string{}}
	interval := time.Duration(float64(time.Second) * latencyProducers / float64(rate))
	var wg sync.WaitGroup
	for p := range latencyProducers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(p), 7))
			// Producers start spread over one interval, then keep their pace.
			next := time.Now().Add(time.Duration(p) * interval / latencyProducers)
			for ctx.Err() == nil {
				time.Sleep(time.Until(next))
				next = next.Add(interval)
				if time.Now().After(end) {
					return
				}
				id := uuid.New()
				key := fmt.Sprintf("key-%d", rnd.IntN(keys))
				err := e.insertOne(ctx, d, id, key)
				at := time.Now()
				mu.Lock()
				if err != nil {
					load.failed++
				} else {
					load.committed[id.String()] = at
					load.keys[id.String()] = key
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return load
}

// waitFor waits until every committed row has arrived, or for at most d.
func (r *recorder) waitFor(committed map[string]time.Time, d time.Duration) {
	arrived := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for id := range committed {
			if _, ok := r.seen[id]; !ok {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(d); !arrived() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}

// insertOne is one application transaction: a single keyed row.
func (e *env) insertOne(ctx context.Context, d dialects.Operator, id uuid.UUID, key string) error {
	return d.OutboxInsert(ctx, []dialects.NewRow{{ID: &id, Topic: "bench.row", Key: &key, Payload: e.payload}})
}
