package actors_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testrecv"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
	nullsink "github.com/queuebox/queuebox/sinks/null"
)

// BenchmarkDrain drains a backlog of 100,000 rows through the whole engine
// (claims, key actors or the pool, group-committed completions), to the null
// destination and to a local HTTP receiver, with the default configuration.
// Run it with `make bench`; it reports rows/s.
func BenchmarkDrain(b *testing.B) {
	for _, dest := range []string{"null", "http"} {
		for _, keys := range []int{0, 1000} {
			b.Run(fmt.Sprintf("dest=%s/keys=%d", dest, keys), func(b *testing.B) { benchDrain(b, dest, keys, 100000) })
		}
	}
}

func benchDrain(b *testing.B, dest string, keys, rows int) {
	var elapsed time.Duration
	for range b.N {
		h := newHarness(b)
		h.opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		h.opts.BatchSize, h.opts.MaxInFlight, h.opts.UnorderedConcurrency = 500, 10000, 256
		h.opts.PollInterval, h.opts.KeyIdle = 500*time.Millisecond, 10*time.Second
		h.opts.Router = routing.NewRouter([]routing.Route{route("#", "dest")})
		if dest == "null" {
			h.opts.Destinations = map[string]actors.SinkFactory{"dest": func() (sinks.Sink, error) { return nullsink.New(), nil }}
		} else {
			recv := testrecv.New(b, nil)
			h.opts.Destinations = map[string]actors.SinkFactory{"dest": httpDest(b, recv.URL+"/in", nil)}
		}
		tbl := pgx.Identifier{h.d.Names().Schema, "outbox"}.Sanitize()
		keyExpr := "NULL"
		if keys > 0 {
			keyExpr = fmt.Sprintf("'k' || (g %% %d)", keys)
		}
		if _, err := h.d.Pool().Exec(context.Background(), `INSERT INTO `+tbl+` (topic, key, payload) SELECT 'bench.row', `+keyExpr+`, '{"amount":12.5,"currency":"EUR"}' FROM generate_series(1, $1) AS g`, rows); err != nil {
			b.Fatal(err)
		}
		_, _ = h.d.Pool().Exec(context.Background(), `ANALYZE `+tbl)
		start := time.Now()
		e := h.start()
		h.waitState(dialects.Delivered, int64(rows), 10*time.Minute)
		elapsed += time.Since(start)
		st := &e.Stats
		b.Logf("%d claims (%.0f rows, %.1f ms each), %d completions (%.1f ms each)", st.ClaimStatements.Load(),
			float64(st.Claimed.Load())/float64(st.ClaimStatements.Load()),
			float64(st.ClaimTime.Load())/1e6/float64(st.ClaimStatements.Load()),
			st.CompleteStatements.Load(), float64(st.CompleteTime.Load())/1e6/float64(max(1, st.CompleteStatements.Load())))
		_ = e.Stop(context.Background())
	}
	b.ReportMetric(float64(rows)*float64(b.N)/elapsed.Seconds(), "rows/s")
}
