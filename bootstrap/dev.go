package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/pgcluster"
)

// DevOptions tune the local default.
type DevOptions struct {
	// Rate is how many sample rows to insert per second (0: none).
	Rate float64
	Out  io.Writer
	// Abort cuts the relay's drain short, as RunOptions.Abort does.
	Abort context.Context
}

// Dev is `queuebox dev`: a throwaway PostgreSQL cluster, the migrations, a
// built-in HTTP receiver that prints what it receives, a configuration that
// routes every topic to it, and sample rows inserted as an application would.
// It runs until ctx ends (Ctrl-C), then drains the relay, stops the cluster
// and removes its folder.
func Dev(ctx context.Context, o DevOptions) error {
	out := o.Out
	fmt.Fprintln(out, "Starting a throwaway PostgreSQL cluster ...")
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Prefix: "queuebox-dev-"})
	if err != nil {
		if ctx.Err() != nil {
			// Stopped while the cluster started: Start removed what it made.
			fmt.Fprintln(out, "Stopped before PostgreSQL was up; nothing is left behind.")
			return nil
		}
		if errors.Is(err, pgcluster.ErrNoServer) {
			return &ExitError{Code: 1, Err: fmt.Errorf("%w (`make run` does this for you)", err)}
		}
		return &ExitError{Code: 1, Err: fmt.Errorf("could not start a throwaway PostgreSQL: %w", err)}
	}
	defer func() {
		cluster.Stop()
		fmt.Fprintln(out, "Stopped; the throwaway cluster is removed.")
	}()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var received atomic.Int64
	srv := &http.Server{Handler: receiver(out, &received), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close(); <-served }()
	recvURL := "http://" + ln.Addr().String()

	cfg := Defaults()
	cfg.Database.URL = cluster.URL()
	cfg.Log.Format = "text"
	cfg.Log.Level = "info"
	cfg.Outbox.PollIntervalMs = 250
	cfg.Outbox.Backoff.InitialMs = 500
	cfg.Shutdown.DrainTimeoutMs = 5000
	cfg.Admin.Listen = "127.0.0.1:0" // a free port: the banner says which
	cfg.Destinations = map[string]*DestinationConfig{"receiver": {Type: "http", URL: recvURL + "/events/{{ topic }}"}}
	cfg.Routes = []RouteConfig{{TopicPattern: "#", Destination: "receiver"}}
	l, err := FromConfig(cfg)
	if err != nil {
		return err
	}
	log := NewLogger(l, Stderr)
	d, err := OpenDialect(context.WithoutCancel(ctx), l)
	if err != nil {
		return err
	}
	defer d.Close()

	// The sample rows stop with ctx: none is inserted during the drain.
	var sampling sync.WaitGroup
	defer sampling.Wait()
	sampleCtx, stopSamples := context.WithCancel(ctx)
	defer stopSamples()
	var adminURL string
	started := func(*actors.Engine) {
		fmt.Fprintf(out, `
QueueBox dev is running.
  admin page %s   (counts, throughput, dead rows, replay)
  database   %s   (throwaway: removed when you stop)
  folder     %s
  receiver   %s   (prints every delivery below)
  routes     every topic (#) -> receiver

Insert a row the way your application would:
  psql "%s" -c "INSERT INTO outbox (topic, key, payload) VALUES ('order.created', 'cust-42', '{\"orderId\": 42}')"

`, adminURL, cluster.URL(), cluster.Dir, recvURL, cluster.URL())
		if o.Rate > 0 {
			fmt.Fprintf(out, "Sample traffic: %.3g rows per second. Ctrl-C stops everything.\n\n", o.Rate)
			sampling.Add(1)
			go func() { defer sampling.Done(); samples(sampleCtx, d, o.Rate, log) }()
		} else {
			fmt.Fprintln(out, "Ctrl-C stops everything.")
		}
	}
	err = Run(ctx, l, d, log, RunOptions{Migrate: true, Started: started, Abort: o.Abort, AdminListening: func(u string) { adminURL = u }})
	stopSamples()
	sampling.Wait()
	if n := received.Load(); n == 1 {
		fmt.Fprintln(out, "The receiver got 1 delivery.")
	} else {
		fmt.Fprintf(out, "The receiver got %d deliveries.\n", n)
	}
	return err
}

func receiver(out io.Writer, n *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
		n.Add(1)
		key := r.Header.Get("X-Key")
		if key == "" {
			key = "-"
		}
		fmt.Fprintf(out, "-> %-18s key=%-8s seq=%-5s attempt=%s  %s\n",
			r.Header.Get("X-Topic"), key, r.Header.Get("X-Sequence"), r.Header.Get("X-Attempt"), body)
		w.WriteHeader(http.StatusNoContent)
	})
}

// samples inserts rows as an application would, through the outbox table.
func samples(ctx context.Context, d dialects.Dialect, rate float64, log *slog.Logger) {
	topics := []string{"order.created", "order.paid", "order.shipped", "customer.updated"}
	t := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer t.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		row := dialects.NewRow{
			Topic:   topics[rand.IntN(len(topics))],
			Payload: []byte(fmt.Sprintf(`{"n": %d, "amount": %d}`, i, 10+rand.IntN(90))),
		}
		if i%5 != 0 {
			k := fmt.Sprintf("cust-%d", 1+rand.IntN(4))
			row.Key = &k
		}
		if err := d.OutboxInsert(ctx, []dialects.NewRow{row}); err != nil && ctx.Err() == nil {
			log.Warn("sample insert failed", "error", err)
		}
	}
}
