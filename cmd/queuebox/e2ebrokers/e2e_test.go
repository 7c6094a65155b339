package e2ebrokers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testbin"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkafka"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testnats"
	"github.com/queuebox/queuebox/internal/testrabbit"
)

func TestMain(m *testing.M) {
	testdb.Main(runner(func() int { return testrabbit.Main(m) }))
}

type runner func() int

func (r runner) Run() int {
	code := r()
	testbin.Remove()
	testkafka.RemoveCommand()
	return code
}

func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(testbin.Path(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("queuebox %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// arrival is one message as a consumer saw it.
type arrival struct {
	id, key, aggregate, where string
	seq                       int64
}

// checkOrder checks a consumer's arrivals against the rows sent to it:
// every row arrived; within a key, rows arrived for the first time in
// sequence order; a row that came again (at least once delivery after a
// fault) carries its own id. It returns the number of duplicates.
func checkOrder(t *testing.T, dest string, got []arrival, want map[string]bool) int {
	t.Helper()
	seen := map[string]bool{}
	last := map[string]int64{}
	dups := 0
	for _, a := range got {
		if !want[a.id] {
			t.Errorf("%s: a message %s that was not sent there", dest, a.id)
			continue
		}
		if seen[a.id] {
			dups++
			continue
		}
		seen[a.id] = true
		if a.key == "" {
			continue
		}
		if l, ok := last[a.key]; ok && a.seq < l {
			t.Errorf("%s: key %s: sequence %d arrived for the first time after %d", dest, a.key, a.seq, l)
		}
		last[a.key] = a.seq
	}
	if len(seen) != len(want) {
		t.Errorf("%s: %d of %d rows arrived", dest, len(seen), len(want))
	}
	return dups
}

// TestBrokersEndToEnd runs the binary against the three brokers at once:
// rows over many keys, routed by topic; exchangeFrom: aggregate_type, a
// templated Kafka topic and NATS subject; rows whose address needs a null
// column go dead naming it; RabbitMQ closes every connection and later
// restarts, mid-run; a replay of NATS rows is dropped by JetStream's
// duplicate window. At each consumer: nothing lost, every key in order.
func TestBrokersEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a RabbitMQ node")
	}
	ctx := context.Background()
	dbURL := testdb.Database(t)
	node := testrabbit.Private(t)
	natsSrv := testnats.Start(t)
	kafka := testkafka.NewProcess(t, testkafka.ProcessOptions{})

	// The places the rows go: exchanges named after the aggregate types,
	// one queue bound to both; Kafka topics qb.<aggregate type>; a stream
	// over qb.>.
	aggs := []string{"order", "invoice"}
	queue := testrabbit.NewQueue(t, node.URL, "#")
	for _, a := range aggs {
		queue.Declare(t, a, "#")
	}
	kafka.CreateTopic(t, "qb.order", 6)
	kafka.CreateTopic(t, "qb.invoice", 3)
	readers := map[string]*testkafka.Reader{"qb.order": kafka.NewReader("qb.order", 6), "qb.invoice": kafka.NewReader("qb.invoice", 3)}
	stream := natsSrv.NewStream(t, "QB", "qb.>")

	cfg := filepath.Join(t.TempDir(), "queuebox.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`database:
  url: %s
  maxConnections: 5
outbox:
  claimTimeoutMs: 10000
  batchSize: 200
  maxInFlight: 2000
  pollIntervalMs: 50
  backoff: { initialMs: 100, maxMs: 1000 }
shutdown:
  drainTimeoutMs: 5000
destinations:
  rabbit: { type: rabbitmq, url: "%s", exchangeFrom: aggregate_type }
  kafka: { type: kafka, brokers: ["%s"], topic: "qb.{{ aggregateType }}" }
  nats: { type: nats, url: "%s", subject: "qb.{{ aggregateType }}.{{ topic }}" }
routes:
  - { topicPattern: "rabbit.#", destination: rabbit }
  - { topicPattern: "kafka.#", destination: kafka }
  - { topicPattern: "nats.#", destination: nats }
log: { format: json, level: info }
admin: { listen: "127.0.0.1:0" }
`, dbURL, node.URL, strings.Join(kafka.Brokers, `", "`), natsSrv.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, "migrate", "up", "--config", cfg)
	d, err := postgres.Open(ctx, postgres.Options{URL: dbURL, Names: dialects.DefaultNames()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	// Each key goes to one destination, with one aggregate type; each wave
	// adds perWave rows to every key, and unkeyed rows.
	dests := []string{"rabbit", "kafka", "nats"}
	const keys, perWave, unkeyed = 60, 30, 10
	maxAttempts := 100 // outlives a RabbitMQ restart at a backoff of up to 1 s
	next := map[string]int{}
	wave := func() {
		var rows []dialects.NewRow
		for n := 0; n < perWave; n++ {
			for k := range keys {
				key := fmt.Sprintf("cust-%d", k)
				agg := aggs[k%2]
				topic := fmt.Sprintf("%s.%s", dests[k%3], []string{"created", "updated"}[next[key]%2])
				next[key]++
				rows = append(rows, testkit.Row(topic, testkit.Key(key), testkit.AggregateType(agg), testkit.MaxAttempts(maxAttempts),
					testkit.Payload(fmt.Sprintf(`{"key":%q,"n":%d}`, key, next[key]))))
			}
		}
		for i := range unkeyed * 3 {
			rows = append(rows, testkit.Row(dests[i%3]+".audit", testkit.AggregateType(aggs[i%2]), testkit.MaxAttempts(maxAttempts), testkit.Payload(`{"audit":true}`)))
		}
		if err := d.OutboxInsert(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	// One row per destination whose address needs the missing aggregate type.
	var nullRows []dialects.NewRow
	for _, dest := range dests {
		nullRows = append(nullRows, testkit.Row(dest+".created", testkit.Key("no-aggregate-"+dest)))
	}
	if err := d.OutboxInsert(ctx, nullRows); err != nil {
		t.Fatal(err)
	}
	wave()

	var stderr bytes.Buffer
	var mu sync.Mutex
	cmd := exec.Command(testbin.Path(t), "run", "--config", cfg)
	cmd.Stderr = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return stderr.Write(p) })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	logs := func() string { mu.Lock(); defer mu.Unlock(); return stderr.String() }

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	count := func(where string) int {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM public.outbox WHERE "+where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := testkit.Poll(3*time.Minute, testkit.True(cond)); err != nil {
			t.Fatalf("%s: %v; the relay's log:\n%s", what, err, tail(logs(), 4000))
		}
	}

	// Connections closed by the server mid-run; then a wave the sink must
	// deliver over a new connection.
	waitFor("wave 1 half delivered to RabbitMQ", func() bool { return len(queue.Get()) >= keys/3*perWave/2 })
	node.CloseConnections(t)
	wave()
	waitFor("wave 2 reaching RabbitMQ", func() bool { return len(queue.Get()) >= keys/3*perWave*3/2 })
	// A restart: the node stops, a wave is inserted meanwhile, and its
	// RabbitMQ rows fail and are retried until the node is back.
	node.Stop(t)
	wave()
	waitFor("RabbitMQ rows failing while the node is down", func() bool {
		return count("topic LIKE 'rabbit.%' AND state = 'pending' AND attempt > 0") > 0
	})
	node.Start(t)
	total := 3*(keys*perWave+unkeyed*3) + len(nullRows)
	waitFor("every row delivered or dead", func() bool { return count("state IN ('delivered', 'dead')") == total })

	// Dead: exactly the rows without an aggregate type, each naming it.
	rows, err := conn.Query(ctx, "SELECT key, last_error FROM public.outbox WHERE state = 'dead' ORDER BY key")
	if err != nil {
		t.Fatal(err)
	}
	var deadKeys []string
	for rows.Next() {
		var key, lastErr string
		if err := rows.Scan(&key, &lastErr); err != nil {
			t.Fatal(err)
		}
		deadKeys = append(deadKeys, key)
		if !strings.Contains(lastErr, "aggregate_type") || !strings.Contains(lastErr, "aggregateType") {
			t.Errorf("dead row %s: last_error %q does not name the column", key, lastErr)
		}
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if strings.Join(deadKeys, ",") != "no-aggregate-kafka,no-aggregate-nats,no-aggregate-rabbit" {
		t.Errorf("dead rows: %v", deadKeys)
	}

	// What each destination should hold.
	want := map[string]map[string]bool{}
	rows, err = conn.Query(ctx, "SELECT id::text, split_part(topic, '.', 1) FROM public.outbox WHERE state = 'delivered'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, dest string
		if err := rows.Scan(&id, &dest); err != nil {
			t.Fatal(err)
		}
		if want[dest] == nil {
			want[dest] = map[string]bool{}
		}
		want[dest][id] = true
	}

	// RabbitMQ: the exchange is the row's aggregate type.
	var got []arrival
	waitFor("RabbitMQ's queue holds every row", func() bool { return distinct(queue.Get()) >= len(want["rabbit"]) })
	for _, m := range queue.Get() {
		a := arrival{id: m.MessageId, key: fmt.Sprint(m.Headers["X-Key"]), aggregate: fmt.Sprint(m.Headers["X-Aggregate-Type"]), where: m.Exchange}
		if m.Headers["X-Key"] == nil {
			a.key = ""
		}
		a.seq, _ = strconv.ParseInt(fmt.Sprint(m.Headers["X-Sequence"]), 10, 64)
		if a.where != a.aggregate {
			t.Errorf("rabbit: row %s of aggregate type %s went to exchange %s", a.id, a.aggregate, a.where)
		}
		got = append(got, a)
	}
	dups := checkOrder(t, "rabbit", got, want["rabbit"])
	t.Logf("RabbitMQ: %d messages, %d duplicates (at least once across the faults)", len(got), dups)

	// Kafka: the topic is qb.<aggregate type>; a key stays in one partition.
	got = nil
	var recs []testkafka.Record
	waitFor("Kafka holds every row", func() bool {
		recs = nil
		for topic, r := range readers {
			for _, rec := range r.Poll() {
				if agg := rec.Headers["X-Aggregate-Type"]; "qb."+agg != topic {
					t.Fatalf("kafka: row %s of aggregate type %s in topic %s", rec.Headers["X-Message-Id"], agg, topic)
				}
				recs = append(recs, rec)
			}
		}
		return len(recs) >= len(want["kafka"])
	})
	partition := map[string]int{}
	for _, rec := range recs {
		a := arrival{id: rec.Headers["X-Message-Id"], key: string(rec.Key)}
		a.seq, _ = strconv.ParseInt(rec.Headers["X-Sequence"], 10, 64)
		if p, ok := partition[a.key]; ok && a.key != "" && p != rec.Partition {
			t.Errorf("kafka: key %s in partitions %d and %d", a.key, p, rec.Partition)
		}
		partition[a.key] = rec.Partition
		got = append(got, a)
	}
	if dups := checkOrder(t, "kafka", got, want["kafka"]); dups != 0 {
		t.Errorf("kafka: %d duplicates without any Kafka fault", dups)
	}

	// NATS: the subject is qb.<aggregate type>.<topic>; Nats-Msg-Id is the
	// row id. A replay of every NATS row is then dropped by the stream.
	natsArrivals := func() []arrival {
		var out []arrival
		for _, m := range stream.Messages() {
			a := arrival{id: m.Header.Get("Nats-Msg-Id"), key: m.Header.Get("X-Key"), where: m.Subject}
			a.seq, _ = strconv.ParseInt(m.Header.Get("X-Sequence"), 10, 64)
			if want := "qb." + m.Header.Get("X-Aggregate-Type") + "." + m.Header.Get("X-Topic"); m.Subject != want {
				t.Errorf("nats: row %s on subject %s, want %s", a.id, m.Subject, want)
			}
			if m.Header.Get("X-Message-Id") != a.id {
				t.Errorf("nats: Nats-Msg-Id %s but X-Message-Id %s", a.id, m.Header.Get("X-Message-Id"))
			}
			out = append(out, a)
		}
		return out
	}
	waitFor("the stream holds every row", func() bool { return len(stream.Messages()) >= len(want["nats"]) })
	if dups := checkOrder(t, "nats", natsArrivals(), want["nats"]); dups != 0 {
		t.Errorf("nats: %d duplicates in the stream", dups)
	}
	out := run(t, "replay", "--config", cfg, "--state", "delivered", "--topic", "nats.#")
	if !strings.Contains(out, fmt.Sprintf("%d rows replayed", len(want["nats"]))) {
		t.Fatalf("replay: %s", out)
	}
	waitFor("the replayed rows delivered again", func() bool {
		return count("topic LIKE 'nats.%' AND state = 'delivered'") == len(want["nats"])
	})
	if dups := checkOrder(t, "nats after the replay", natsArrivals(), want["nats"]); dups != 0 {
		t.Errorf("nats: JetStream kept %d redelivered rows; its duplicate window should drop them by Nats-Msg-Id", dups)
	}

	// The log names RabbitMQ when it starts failing and when it recovers;
	// Kafka and NATS never failed.
	var failing, recovered int
	for _, line := range strings.Split(logs(), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		msg := fmt.Sprint(e["msg"])
		health := strings.HasPrefix(msg, "destination failing") || msg == "destination delivering again"
		switch {
		case health && e["destination"] != "rabbit":
			t.Errorf("a line about another destination: %s", line)
		case strings.HasPrefix(msg, "destination failing"):
			failing++
		case msg == "destination delivering again":
			recovered++
		}
	}
	if failing == 0 || failing != recovered {
		t.Errorf("RabbitMQ went failing %d times and recovered %d times; the log:\n%s", failing, recovered, tail(logs(), 4000))
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the relay exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not exit after SIGTERM")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// distinct counts the message ids of a queue's deliveries.
func distinct(ds []amqp.Delivery) int {
	seen := map[string]bool{}
	for _, d := range ds {
		seen[d.MessageId] = true
	}
	return len(seen)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
