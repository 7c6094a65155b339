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
	l, err := bootstrap.FromConfig(cfg)
	if err != nil {
		return nil, err
	}
	rd, err := bootstrap.OpenDialect(ctx, l)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	opts, err := bootstrap.EngineOptions(l, rd, e.log)
	if err != nil {
		return nil, err
	}
	rec := &recorder{seen: map[string]time.Time{}}
	opts.Destinations = map[string]actors.SinkFactory{"bench": func() (sinks.Sink, error) { return rec, nil }}
	eng, err := actors.New(opts)
	if err != nil {
		return nil, err
	}
	m := e.meter()
	if err := eng.Start(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = eng.Stop(context.WithoutCancel(ctx)) }()

	var mu sync.Mutex
	committed := map[string]time.Time{}
	warmup := time.Now().Add(time.Second)
	end := warmup.Add(time.Duration(e.o.Seconds) * time.Second)
	interval := time.Duration(float64(time.Second) * latencyProducers / float64(e.o.Rate))
	var failed int64
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
				key := fmt.Sprintf("key-%d", rnd.IntN(1000))
				err := e.insertOne(ctx, d, id, key)
				at := time.Now()
				mu.Lock()
				if err != nil {
					failed++
				} else if at.After(warmup) {
					committed[id.String()] = at
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// Let the last rows arrive.
	arrived := func() bool {
		mu.Lock()
		defer mu.Unlock()
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for id := range committed {
			if _, ok := rec.seen[id]; !ok {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(30 * time.Second); !arrived() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
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

// insertOne is one application transaction: a single keyed row.
func (e *env) insertOne(ctx context.Context, d dialects.Operator, id uuid.UUID, key string) error {
	return d.OutboxInsert(ctx, []dialects.NewRow{{ID: &id, Topic: "bench.row", Key: &key, Payload: e.payload}})
}
