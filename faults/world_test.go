package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
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
	"github.com/queuebox/queuebox/internal/testkit"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/queuebox/queuebox/internal/pgcluster"
	"github.com/queuebox/queuebox/internal/testkafka"
	"github.com/queuebox/queuebox/internal/testnats"
	"github.com/queuebox/queuebox/internal/testrabbit"
)

// settings size a run.
type settings struct {
	full        bool
	replicas    int
	keys        int
	rate        float64 // rows per second, over all producers
	producers   int
	minRows     int // the producers go on until at least this many rows are committed
	leaseMs     int
	timeoutMs   int           // the HTTP destination's timeout
	slow        time.Duration // the receiver's answer delay when slower than the timeout
	brokers     []string      // broker destinations in use: rabbit, kafka, nats
	settleLimit time.Duration // how long rows may take to be delivered once a fault ended
}

// world is everything a run needs: the database, the proxies, the
// destinations, the replicas and the producers.
type world struct {
	t      *testing.T
	s      settings
	ctx    context.Context
	pg     *pgcluster.Cluster
	check  *pgxpool.Pool // direct to the database, for the suite's own queries
	tox    *toxiproxy.ApiServer
	dbProx *toxiproxy.Proxy
	hProx  *toxiproxy.Proxy
	recv   *receiver
	ledger *ledger
	dir    string

	rabbit *testrabbit.Node
	queue  *testrabbit.Queue
	kafka  *testkafka.Cluster
	reader *testkafka.Reader
	nats   *testnats.Server
	stream *testnats.Stream

	mu       sync.Mutex // guards replicas: the inbox senders read it
	replicas map[string]*replica
	started  int // replicas started so far
	prod     *producers
	faults   []*faultRecord
}

func newWorld(t *testing.T, s settings) *world {
	ctx := context.Background()
	w := &world{t: t, s: s, ctx: ctx, ledger: &ledger{}, dir: t.TempDir(), replicas: map[string]*replica{}}
	var err error
	log, err := os.Create(filepath.Join(w.dir, "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	if w.pg, err = pgcluster.Start(ctx, pgcluster.Options{TestSettings: true, Prefix: "queuebox-faults-", Log: log}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.pg.Stop)
	if w.check, err = pgxpool.New(ctx, w.pg.URL()+"&application_name=faults-check"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.check.Close)

	w.tox = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	w.dbProx = w.proxy("db", fmt.Sprintf("127.0.0.1:%d", w.pg.Port))
	w.recv = newReceiver(t, w.ledger, 2*time.Millisecond, s.slow)
	w.hProx = w.proxy("http", strings.TrimPrefix(w.recv.URL, "http://"))

	for _, b := range s.brokers {
		switch b {
		case "rabbit":
			w.rabbit = testrabbit.Private(t)
			w.queue = testrabbit.NewQueue(t, w.rabbit.URL, "#")
		case "kafka":
			w.kafka = testkafka.NewRestartable(t)
			w.kafka.CreateTopic(t, "qbfaults", 4)
			w.reader = w.kafka.NewReader("qbfaults", 4)
		case "nats":
			w.nats = testnats.Start(t)
			w.stream = w.nats.NewStream(t, "QBFAULTS", "qbf.>")
		}
	}
	w.run("migrate", "up", "--config", w.config("migrate"))
	w.prod = newProducers(w)
	return w
}

func (w *world) proxy(name, upstream string) *toxiproxy.Proxy {
	p := toxiproxy.NewProxy(w.tox, name, "127.0.0.1:0", upstream)
	if err := w.tox.Collection.Add(p, true); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(p.Stop)
	return p
}

// toxic adds a toxic to a proxy and returns what removes it.
func (w *world) toxic(p *toxiproxy.Proxy, name, typ, stream string, attrs map[string]any) func() {
	body, _ := json.Marshal(map[string]any{"name": name, "type": typ, "stream": stream, "attributes": attrs})
	if _, err := p.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
		w.t.Fatalf("toxic %s on %s: %v", name, p.Name, err)
	}
	return func() {
		if err := p.Toxics.RemoveToxic(w.ctx, name); err != nil {
			w.t.Errorf("remove toxic %s: %v", name, err)
		}
	}
}

// config writes the configuration of one replica: every destination it
// uses, the HTTP one through the proxy with an X-Replica header naming the
// replica, and the database through the other proxy.
func (w *world) config(name string) string {
	var b strings.Builder
	// synchronous_commit on, PostgreSQL's default, which the test cluster
	// turns off: the inbox answers 202 once its insert committed, and a
	// commit that is not durable yet is lost when the server is killed.
	fmt.Fprintf(&b, `database:
  url: postgres://postgres@%s/postgres?sslmode=disable&synchronous_commit=on
  maxConnections: 6
outbox:
  claimTimeoutMs: %d
  batchSize: 50
  maxInFlight: 200
  pollIntervalMs: 100
  probeIntervalMs: 5
  backoff: { initialMs: 100, multiplier: 2, maxMs: 1000, jitter: 0.2 }
http:
  timeoutMs: %d
engine:
  unorderedConcurrency: 16
shutdown:
  drainTimeoutMs: 10000
destinations:
  hook:
    type: http
    url: http://%s/events/{{ topic }}
    headers: { X-Replica: %s }
`, w.dbProx.Listen, w.s.leaseMs, w.s.timeoutMs, w.hProx.Listen, name)
	// Rows of topics fan.# go to two HTTP destinations at once (a fan-out
	// route): each delivery is judged on its own (fanOut).
	fmt.Fprintf(&b, "  hookb: { type: http, url: \"http://%s/fanb/{{ topic }}\", headers: { X-Replica: %s } }\n", w.hProx.Listen, name)
	routes := "routes:\n  - { topicPattern: \"http.#\", destination: hook }\n  - { topicPattern: \"fan.#\", destinations: [hook, hookb] }\n"
	if w.rabbit != nil {
		fmt.Fprintf(&b, "  rabbit: { type: rabbitmq, url: %q, exchange: %q }\n", w.rabbit.URL, w.queue.Exchange)
		routes += "  - { topicPattern: \"rabbit.#\", destination: rabbit }\n"
	}
	if w.kafka != nil {
		fmt.Fprintf(&b, "  kafka: { type: kafka, brokers: [%q], topic: qbfaults }\n", strings.Join(w.kafka.Brokers, `", "`))
		routes += "  - { topicPattern: \"kafka.#\", destination: kafka }\n"
	}
	if w.nats != nil {
		fmt.Fprintf(&b, "  nats: { type: nats, url: %q, subject: \"qbf.{{ topic }}\" }\n", w.nats.URL)
		routes += "  - { topicPattern: \"nats.#\", destination: nats }\n"
	}
	b.WriteString(routes)
	b.WriteString(`inbox:
  relay: { maxAttempts: 1000 }
  sources:
    faults: { type: http, token: inbox-token-1, topic: "http.inbox.{{ headers.X-Event }}", aggregateId: "{{ headers.X-Aggregate }}" }
`)
	b.WriteString("admin: { listen: \"127.0.0.1:0\" }\nlog: { format: json, level: info }\n")
	p := filepath.Join(w.dir, name+".yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		w.t.Fatal(err)
	}
	return p
}

func (w *world) run(args ...string) {
	w.t.Helper()
	out, err := exec.Command(testbin.Path(w.t), args...).CombinedOutput()
	if err != nil {
		w.t.Fatalf("queuebox %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// dests are the destinations rows go to; most rows go over HTTP; "fan"
// rows go to two HTTP destinations (see fanOut).
func (w *world) dests() []string {
	return append([]string{"http", "http", "http", "fan"}, w.s.brokers...)
}

// replica is one `queuebox run` process.
type replica struct {
	name string
	addr string // the admin listener, once it listens
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
	err  error // the exit, once done is closed
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	f  *os.File
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		_, _ = s.f.Write(p)
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// nextName names the next replica: r1, r2, ...
func (w *world) nextName() string { return fmt.Sprintf("r%d", w.started+1) }

// start starts replica name.
func (w *world) start(name string) *replica {
	w.t.Helper()
	w.started++
	f, _ := os.OpenFile(filepath.Join(w.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	r := &replica{name: name, logs: &syncBuffer{f: f}, done: make(chan struct{})}
	r.cmd = exec.Command(testbin.Path(w.t), "run", "--config", w.config(name))
	r.cmd.Stderr, r.cmd.Stdout = r.logs, r.logs
	if err := r.cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() {
		r.err = r.cmd.Wait()
		if f != nil {
			_ = f.Close()
		}
		close(r.done)
	}()
	w.t.Cleanup(func() {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
		_ = r.cmd.Process.Kill()
		<-r.done
	})
	// Started means listening: a SIGTERM before the binary has set up its
	// signal handling would kill it by the signal's default action.
	r.addr = r.adminAddr(w.t)
	w.mu.Lock()
	w.replicas[name] = r
	w.mu.Unlock()
	return r
}

// replica returns a replica by name.
func (w *world) replica(name string) *replica {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.replicas[name]
}

// all returns every replica started so far.
func (w *world) all() []*replica {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*replica, 0, len(w.replicas))
	for _, r := range w.replicas {
		out = append(out, r)
	}
	return out
}

// liveAddrs are the admin listeners of the replicas that have not exited.
func (w *world) liveAddrs() []string {
	var out []string
	for _, r := range w.all() {
		select {
		case <-r.done:
		default:
			out = append(out, r.addr)
		}
	}
	return out
}

func (r *replica) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s %s: %v", sig, r.name, err)
	}
}

// adminAddr is the replica's admin listener, from its start log line.
func (r *replica) adminAddr(t *testing.T) string {
	t.Helper()
	var addr string
	if err := testkit.Poll(0, func() error {
		sc := bufio.NewScanner(strings.NewReader(r.logs.String()))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var e struct{ Msg, Address string }
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Msg == "admin listening" {
				addr = e.Address
				return nil
			}
		}
		return errors.New("not logged yet")
	}); err != nil {
		t.Fatalf("%s never logged its admin address (%v):\n%s", r.name, err, tail(r.logs.String(), 3000))
	}
	return addr
}

// metric reads one unlabelled metric of the replica.
func (r *replica) metric(name string) (float64, bool) {
	res, err := http.Get("http://" + r.addr + "/metrics")
	if err != nil {
		return 0, false
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// producers insert rows in application transactions: several keys per
// transaction, in random order, at a steady rate. They connect to the
// database directly (not through the proxy) and commit synchronously, so
// that a committed row survives a crash of the server.
type producers struct {
	w        *world
	pool     *pgxpool.Pool
	gate     sync.RWMutex // Lock pauses the producers
	stop     chan struct{}
	halted   sync.Once
	wg       sync.WaitGroup
	mu       sync.Mutex
	rows     []row
	failures []string
	txs      int
	inbox    int // messages the inbox took
}

func newProducers(w *world) *producers {
	cfg, err := pgxpool.ParseConfig(w.pg.URL())
	if err != nil {
		w.t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "faults-producer"
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	cfg.MaxConns = int32(w.s.producers)
	pool, err := pgxpool.NewWithConfig(w.ctx, cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(pool.Close)
	return &producers{w: w, pool: pool, stop: make(chan struct{})}
}

// avgRows is the mean number of rows per transaction.
const maxRowsPerTx = 6

func (p *producers) start() {
	every := time.Duration(float64(time.Second) * float64(p.w.s.producers) * (1 + maxRowsPerTx) / 2 / p.w.s.rate)
	for i := range p.w.s.producers {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			tick := time.NewTicker(every)
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-p.stop:
					return
				case <-tick.C:
				}
				p.gate.RLock()
				p.transaction(rng, i, n)
				p.gate.RUnlock()
			}
		}()
	}
}

// transaction inserts 1 to maxRowsPerTx rows over random keys (and some
// unkeyed rows), one statement per row or one statement for all of them.
func (p *producers) transaction(rng *rand.Rand, producer, n int) {
	dests := p.w.dests()
	type newRow struct{ key, topic, payload string }
	var rs []newRow
	for i := range 1 + rng.IntN(maxRowsPerTx) {
		var key, dest string
		if rng.IntN(10) == 0 {
			dest = dests[rng.IntN(len(dests))]
		} else {
			k := rng.IntN(p.w.s.keys)
			key, dest = fmt.Sprintf("k%04d", k), dests[k%len(dests)]
		}
		rs = append(rs, newRow{key, dest + ".order.updated", fmt.Sprintf(`{"producer":%d,"tx":%d,"row":%d}`, producer, n, i)})
	}
	ctx, cancel := context.WithTimeout(p.w.ctx, 30*time.Second)
	defer cancel()
	var got []row
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		scan := func(rows pgx.Rows) error {
			for rows.Next() {
				var r row
				var key *string
				var topic string
				if err := rows.Scan(&r.ID, &key, &r.Seq, &topic); err != nil {
					return err
				}
				if key != nil {
					r.Key = *key
				}
				r.Dest, _, _ = strings.Cut(topic, ".")
				got = append(got, r)
			}
			return rows.Err()
		}
		if rng.IntN(3) == 0 {
			var sql strings.Builder
			sql.WriteString(`INSERT INTO public.outbox (topic, key, payload, max_attempts) VALUES `)
			var args []any
			for i, r := range rs {
				if i > 0 {
					sql.WriteString(", ")
				}
				fmt.Fprintf(&sql, "($%d, NULLIF($%d, ''), $%d::jsonb, 1000)", 3*i+1, 3*i+2, 3*i+3)
				args = append(args, r.topic, r.key, r.payload)
			}
			sql.WriteString(` RETURNING id::text, key, sequence, topic`)
			rows, err := tx.Query(ctx, sql.String(), args...)
			if err != nil {
				return err
			}
			return scan(rows)
		}
		for _, r := range rs {
			rows, err := tx.Query(ctx, `INSERT INTO public.outbox (topic, key, payload, max_attempts) VALUES ($1, NULLIF($2, ''), $3::jsonb, 1000) RETURNING id::text, key, sequence, topic`,
				r.topic, r.key, r.payload)
			if err != nil {
				return err
			}
			if err := scan(rows); err != nil {
				return err
			}
		}
		return nil
	})
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.txs++
	if err != nil {
		p.failures = append(p.failures, fmt.Sprintf("%s producer %d transaction %d: %v", now.Format("15:04:05.000"), producer, n, err))
		return
	}
	for _, r := range got {
		r.CommittedAt = now
		p.rows = append(p.rows, r)
	}
}

// startInbox starts senders that post to the inbox's HTTP source of a
// live replica, as a webhook sender would: each sender owns some
// aggregates and sends their messages one after another, each again (same
// X-Message-Id) until a replica answers 202 or 200; a message no replica
// took within a minute is a failure.
func (p *producers) startInbox(senders, aggregates int, rate float64) {
	client := &http.Client{Timeout: 5 * time.Second}
	every := time.Duration(float64(time.Second) * float64(senders) / rate)
	for i := range senders {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i)+100, uint64(time.Now().UnixNano())))
			next := map[int]int{}
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-p.stop:
					return
				case <-tick.C:
				}
				a := i + senders*rng.IntN(max(1, aggregates/senders))
				next[a]++
				p.sendInbox(client, rng, fmt.Sprintf("a%03d", a), next[a], fmt.Sprintf("m-%d-%d-%d", i, a, next[a]))
			}
		}()
	}
}

func (p *producers) sendInbox(client *http.Client, rng *rand.Rand, aggregate string, n int, msgID string) {
	body := fmt.Sprintf(`{"aggregate":%q,"n":%d}`, aggregate, n)
	// Sent again, with backoff, until a replica takes it.
	err := testkit.Poll(time.Minute, func() error {
		addrs := p.w.liveAddrs()
		if len(addrs) == 0 {
			return errors.New("no replica is up")
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+addrs[rng.IntN(len(addrs))]+"/inbox/faults", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer inbox-token-1")
		req.Header.Set("X-Message-Id", msgID)
		req.Header.Set("X-Aggregate", aggregate)
		req.Header.Set("X-Event", "created")
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var a struct{ ID string }
		if res.StatusCode != http.StatusAccepted && res.StatusCode != http.StatusOK || json.Unmarshal(b, &a) != nil || a.ID == "" {
			return fmt.Errorf("%d %s", res.StatusCode, b)
		}
		p.mu.Lock()
		p.rows = append(p.rows, row{ID: a.ID, Key: aggregate, Dest: "http", CommittedAt: time.Now(), Inbox: true, N: n})
		p.inbox++
		p.mu.Unlock()
		return nil
	})
	if err != nil {
		p.mu.Lock()
		p.failures = append(p.failures, fmt.Sprintf("inbox message %s (aggregate %s) was not taken: %v", msgID, aggregate, err))
		p.mu.Unlock()
	}
}

// pause stops new transactions and waits for those running to end.
func (p *producers) pause()  { p.gate.Lock() }
func (p *producers) resume() { p.gate.Unlock() }

// halt stops the producers and waits for them; again, it does nothing.
func (p *producers) halt() {
	p.halted.Do(func() {
		close(p.stop)
		p.wg.Wait()
	})
}

func (p *producers) committed() []row {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]row(nil), p.rows...)
}

func (p *producers) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.rows)
}

// consume reads what reached each broker into the ledger, in each
// consumer's order, until ctx ends.
func (w *world) consume(ctx context.Context) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			w.poll()
			select {
			case <-ctx.Done():
				w.poll()
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	return func() { <-done }
}

var (
	pollMu      sync.Mutex
	rabbitSeen  = map[*testrabbit.Queue]int{}
	natsSeen    = map[*testnats.Stream]int{}
	kafkaSeenAt = map[*testkafka.Reader]map[[2]int64]bool{}
)

func (w *world) poll() {
	pollMu.Lock()
	defer pollMu.Unlock()
	if w.queue != nil {
		got := w.queue.Get()
		for i := rabbitSeen[w.queue]; i < len(got); i++ {
			m := got[i]
			d := delivery{Dest: "rabbit", ID: m.MessageId, Request: i + 1}
			if k, ok := m.Headers["X-Key"]; ok {
				d.Key = fmt.Sprint(k)
			}
			d.Seq, _ = strconv.ParseInt(fmt.Sprint(m.Headers["X-Sequence"]), 10, 64)
			d.Attempt, _ = strconv.Atoi(fmt.Sprint(m.Headers["X-Attempt"]))
			w.ledger.consumed(d)
		}
		rabbitSeen[w.queue] = len(got)
	}
	if w.reader != nil {
		seen := kafkaSeenAt[w.reader]
		if seen == nil {
			seen = map[[2]int64]bool{}
			kafkaSeenAt[w.reader] = seen
		}
		for _, rec := range w.reader.Poll() {
			at := [2]int64{int64(rec.Partition), rec.Offset}
			if seen[at] {
				continue
			}
			seen[at] = true
			d := delivery{Dest: "kafka", ID: rec.Headers["X-Message-Id"], Key: string(rec.Key), Request: int(rec.Offset)}
			d.Seq, _ = strconv.ParseInt(rec.Headers["X-Sequence"], 10, 64)
			d.Attempt, _ = strconv.Atoi(rec.Headers["X-Attempt"])
			w.ledger.consumed(d)
		}
	}
	if w.stream != nil {
		got := w.stream.Messages()
		for i := natsSeen[w.stream]; i < len(got); i++ {
			m := got[i]
			d := delivery{Dest: "nats", ID: m.Header.Get("X-Message-Id"), Key: m.Header.Get("X-Key"), Request: int(m.Sequence)}
			d.Seq, _ = strconv.ParseInt(m.Header.Get("X-Sequence"), 10, 64)
			d.Attempt, _ = strconv.Atoi(m.Header.Get("X-Attempt"))
			w.ledger.consumed(d)
		}
		natsSeen[w.stream] = len(got)
	}
}

// dbNow is the database's clock.
func (w *world) dbNow() time.Time {
	var now time.Time
	if err := testkit.Poll(time.Minute, func() error { return w.check.QueryRow(w.ctx, `SELECT now()`).Scan(&now) }); err != nil {
		w.t.Fatalf("the database does not answer: %v", err)
	}
	return now
}

// undelivered counts rows created at or before at that are not delivered
// yet (or whose copy for a destination of a fan-out is not), and inbox messages received by then and not yet relayed; -1 when
// the database does not answer.
func (w *world) undelivered(at time.Time) int {
	var n int
	if err := w.check.QueryRow(w.ctx, `SELECT (SELECT count(*) FROM public.outbox WHERE created_at <= $1 AND state <> 'delivered')
		+ (SELECT count(*) FROM public.outbox_copies WHERE row_created_at <= $1 AND state <> 'delivered')
		+ (SELECT count(*) FROM public.inbox WHERE received_at <= $1 AND state = 'received')`, at).Scan(&n); err != nil {
		return -1
	}
	return n
}

// settle waits until every row created at or before at is delivered and
// returns how long that took.
func (w *world) settle(at time.Time, since time.Time, what string) time.Duration {
	w.t.Helper()
	deadline := time.Now().Add(w.s.settleLimit)
	for {
		if w.undelivered(at) == 0 {
			return time.Since(since)
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s: %d rows written before it ended were not delivered %s later:\n%s", what, w.undelivered(at), w.s.settleLimit, w.stuckRows())
		}
		// A fixed pace, not testkit.Poll's backoff: the time this returns
		// is reported (within 50 ms), and a wait of 200 ms would blur it.
		time.Sleep(50 * time.Millisecond)
	}
}

// stuckRows describes a few rows that are not delivered.
func (w *world) stuckRows() string {
	rows, err := w.check.Query(w.ctx, `(SELECT id::text, coalesce(key, ''), topic, state, attempt, coalesce(last_error, ''), scheduled_at, lease_expires_at, sequence
		FROM public.outbox WHERE state <> 'delivered' ORDER BY sequence LIMIT 10)
		UNION ALL (SELECT row_id::text || ' (copy for ' || destination || ')', coalesce(key, ''), topic, state, attempt, coalesce(last_error, ''), scheduled_at, lease_expires_at, sequence
		FROM public.outbox_copies WHERE state <> 'delivered' ORDER BY sequence LIMIT 10)`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, key, topic, state, lastErr string
		var attempt int
		var sched time.Time
		var lease *time.Time
		var seq int64
		if err := rows.Scan(&id, &key, &topic, &state, &attempt, &lastErr, &sched, &lease, &seq); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "  %s key %q %s %s attempt %d scheduled %s lease %v: %s\n", id, key, topic, state, attempt, sched.Format("15:04:05.000"), lease, lastErr)
	}
	return b.String()
}

// finalStates reads every row's state.
func (w *world) finalStates() map[string]finalState {
	rows, err := w.check.Query(w.ctx, `SELECT id::text, state, attempt, coalesce(last_error, ''), sequence FROM public.outbox`)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]finalState{}
	for rows.Next() {
		var id string
		var st finalState
		if err := rows.Scan(&id, &st.State, &st.Attempt, &st.LastError, &st.Seq); err != nil {
			w.t.Fatal(err)
		}
		out[id] = st
	}
	if rows.Err() != nil {
		w.t.Fatal(rows.Err())
	}
	// The copies of fan-out rows, under copyState's keys.
	copies, err := w.check.Query(w.ctx, `SELECT row_id::text, destination, state, attempt, coalesce(last_error, ''), sequence FROM public.outbox_copies`)
	if err != nil {
		w.t.Fatal(err)
	}
	defer copies.Close()
	for copies.Next() {
		var id, dest string
		var st finalState
		if err := copies.Scan(&id, &dest, &st.State, &st.Attempt, &st.LastError, &st.Seq); err != nil {
			w.t.Fatal(err)
		}
		out[copyState(fanDests[dest], id)] = st
	}
	if copies.Err() != nil {
		w.t.Fatal(copies.Err())
	}
	return out
}

// inboxRow describes the inbox row of an id, for a failure's report.
func (w *world) inboxRow(id string) string {
	var msgID, state string
	var seq int64
	err := w.check.QueryRow(w.ctx, `SELECT message_id, state, sequence FROM public.inbox WHERE id = $1`, id).Scan(&msgID, &state, &seq)
	if err != nil {
		return "no inbox row: " + err.Error()
	}
	return fmt.Sprintf("inbox row of message %s, %s, sequence %d", msgID, state, seq)
}

// terminate ends the replicas' database sessions from the server's side.
func (w *world) terminate() int {
	var n int
	if err := w.check.QueryRow(w.ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'queuebox'`).Scan(&n); err != nil {
		w.t.Fatalf("pg_terminate_backend: %v", err)
	}
	return n
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
