package e2ebrokers

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testbin"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkafka"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testnats"
	"github.com/queuebox/queuebox/internal/testrabbit"
)

// BenchmarkBrokerDrain measures the binary draining a backlog of 100,000
// rows over 1,000 keys into each broker (and into null, for reference),
// with the default configuration. The clock runs from the start of
// `queuebox run` until the database shows every row delivered; rows/s is
// the figure. RabbitMQ is the shared server; Kafka (kfake) and NATS run in
// this process, on the same cores as the binary and PostgreSQL.
//
//	QUEUEBOX_TEST_DURABLE=1 scripts/test.sh -run '^$' -bench BrokerDrain -benchtime 1x -timeout 30m ./cmd/queuebox/e2ebrokers/
func BenchmarkBrokerDrain(b *testing.B) {
	const keys, perKey = 1000, 100
	type dest struct {
		name  string
		setup func(b *testing.B) string // the destination's YAML
	}
	for _, d := range []dest{
		{"null", func(*testing.B) string { return `{ type: "null" }` }},
		{"rabbitmq", func(b *testing.B) string {
			url := testrabbit.URL(b)
			q := testrabbit.NewQueue(b, url, "#")
			return fmt.Sprintf(`{ type: rabbitmq, url: "%s", exchange: "%s" }`, url, q.Exchange)
		}},
		{"kafka", func(b *testing.B) string {
			c := testkafka.New(b)
			c.CreateTopic(b, "bench", 6)
			return fmt.Sprintf(`{ type: kafka, brokers: ["%s"], topic: bench }`, strings.Join(c.Brokers, `", "`))
		}},
		{"nats-jetstream", func(b *testing.B) string {
			s := testnats.Start(b)
			s.NewStream(b, "BENCH", "bench.>")
			return fmt.Sprintf(`{ type: nats, url: "%s", subject: "bench.{{ topic }}" }`, s.URL)
		}},
		{"nats-core", func(b *testing.B) string {
			s := testnats.Start(b)
			return fmt.Sprintf(`{ type: nats, url: "%s", subject: "bench.{{ topic }}", jetstream: false }`, s.URL)
		}},
	} {
		b.Run(d.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				rate := drain(b, d.setup(b), keys, perKey)
				b.ReportMetric(rate, "rows/s")
				b.StartTimer()
			}
		})
	}
}

func drain(b *testing.B, destination string, keys, perKey int) float64 {
	ctx := context.Background()
	dbURL := testdb.Database(b)
	cfg := filepath.Join(b.TempDir(), "queuebox.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`database:
  url: "%s"
destinations:
  target: %s
routes:
  - { topicPattern: "#", destination: target }
log: { level: warn }
admin: { listen: "127.0.0.1:0" }
`, dbURL, destination)), 0o600); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command(testbin.Path(b), "migrate", "up", "--config", cfg).CombinedOutput(); err != nil {
		b.Fatalf("migrate: %v\n%s", err, out)
	}
	d, err := postgres.Open(ctx, postgres.Options{URL: dbURL, Names: dialects.DefaultNames()})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	for n := range perKey {
		rows := testkit.Rows(keys, "order.updated", func(k int) []testkit.RowOption {
			return []testkit.RowOption{testkit.Key(fmt.Sprintf("k%d", k))}
		}, testkit.Payload(fmt.Sprintf(`{"n":%d}`, n)))
		if err := d.OutboxInsert(ctx, rows); err != nil {
			b.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	cmd := exec.Command(testbin.Path(b), "run", "--config", cfg)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	total := keys * perKey
	// Polled with one probe of the partial index the claim reads: a count
	// of the delivered rows every 100 ms would scan a growing range and take
	// a share of the database from the drain it times. The pace is fixed
	// (not testkit.Poll's, which backs off to 200 ms): it bounds the error
	// of the time measured.
	for {
		var open bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM public.outbox WHERE state IN ('pending', 'processing'))").Scan(&open); err != nil {
			b.Fatal(err)
		}
		if !open {
			break
		}
		if time.Since(start) > 15*time.Minute {
			b.Fatalf("rows still open after 15 minutes:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	rate := float64(total) / time.Since(start).Seconds()
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM public.outbox WHERE state = 'delivered'").Scan(&n); err != nil {
		b.Fatal(err)
	}
	if n != total {
		b.Fatalf("%d of %d rows delivered (the others went dead):\n%s", n, total, stderr.String())
	}
	return rate
}
