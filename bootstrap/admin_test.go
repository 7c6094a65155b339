package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/queuebox/queuebox/internal/testlog"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// relay is Run in the background with the admin listener on a free port.
type relay struct {
	sigs  chan os.Signal
	done  chan error
	url   string // the admin page, "http://127.0.0.1:port/"
	logs  *testlog.Buffer
	token string
}

func startRelay(t *testing.T, cfg *Config, wrap func(dialects.Dialect) dialects.Dialect) *relay {
	t.Helper()
	cfg.Admin.Listen = "127.0.0.1:0"
	l, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, err := OpenDialect(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	var dd dialects.Dialect = d
	if wrap != nil {
		dd = wrap(d)
	}
	r := &relay{sigs: make(chan os.Signal, 2), done: make(chan error, 1), logs: &testlog.Buffer{}, token: cfg.Admin.Token}
	stop := watchSignals(r.sigs)
	t.Cleanup(stop.Release)
	listening := make(chan string, 1)
	go func() {
		r.done <- Run(stop.Stop, l, dd, slog.New(slog.NewTextHandler(r.logs, nil)), RunOptions{
			Migrate: true, Abort: stop.Abort, AdminListening: func(u string) { listening <- u },
			AdminCountInterval: 100 * time.Millisecond, AdminThroughputStep: 100 * time.Millisecond,
		})
	}()
	select {
	case r.url = <-listening:
	case err := <-r.done:
		t.Fatalf("Run ended before the admin listener listened: %v\n%s", err, r.logs.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the admin listener did not start")
	}
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *relay) stop(t *testing.T) {
	select {
	case r.sigs <- syscall.SIGTERM:
	default:
	}
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		r.done <- nil // a second stop finds it ended
	case <-time.After(30 * time.Second):
		t.Error("Run did not stop after SIGTERM")
	}
}

func (r *relay) get(t *testing.T, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", r.url+strings.TrimPrefix(path, "/"), nil)
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// scrape reads /metrics with the Prometheus text parser.
func (r *relay) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := r.get(t, "/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// value reads one series: a counter's or gauge's value, a histogram's
// count. ok is false when the series is not there.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, lp := range m.Label {
			have[lp.GetName()] = lp.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func waitMetrics(t *testing.T, r *relay, what string, ok func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	var fams map[string]*dto.MetricFamily
	if err := testkit.Poll(time.Minute, func() error {
		if fams = r.scrape(t); ok(fams) {
			return nil
		}
		return errors.New("not in /metrics yet")
	}); err != nil {
		_, body := r.get(t, "/metrics")
		t.Fatalf("%s: %v; /metrics:\n%s", what, err, grepQueuebox(body))
	}
	return fams
}

func grepQueuebox(body string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "queuebox_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func baseConfig(dbURL, recvURL string) *Config {
	cfg := Defaults()
	cfg.Database.URL = dbURL
	cfg.Outbox.PollIntervalMs = 50
	cfg.Outbox.Backoff.InitialMs = 20
	cfg.Outbox.Backoff.MaxMs = 100
	cfg.Shutdown.DrainTimeoutMs = 5000
	cfg.Destinations = map[string]*DestinationConfig{"hook": {Type: "http", URL: recvURL + "/events/{{ topic }}", NonRetryableStatus: []int{410}}}
	cfg.Routes = []RouteConfig{{Name: "orders", TopicPattern: "order.#", Destination: "hook"}, {TopicPattern: "flaky.#", Destination: "hook"}}
	return cfg
}

// queuebox_other_relay_sessions counts the sessions of other relays with
// the relay's application name: none alone, some once another relay's
// sessions are there, none again once they are gone.
func TestMetricsCountOtherRelaySessions(t *testing.T) {
	t.Parallel()
	recv := testrecv.New(t, func(*testrecv.Request) (int, string, map[string]string) { return 204, "", nil })
	// A name of the test's own: other tests' relays use the default.
	dbURL := testdb.WithParam(testdb.Database(t), "application_name", "qb-gauge-"+uuid.NewString()[:8])
	r := startRelay(t, baseConfig(dbURL, recv.URL), nil)
	sessions := func(f map[string]*dto.MetricFamily) float64 {
		v, _ := value(f, "queuebox_other_relay_sessions")
		return v
	}
	waitMetrics(t, r, "the gauge", func(f map[string]*dto.MetricFamily) bool {
		_, ok := value(f, "queuebox_other_relay_sessions")
		return ok
	})
	// Three looks: the relay's own sessions, older than the two seconds
	// after which a session counts, still do not. (A sleep: this proves
	// that something does not happen, which no signal reports.)
	time.Sleep(3 * time.Second)
	if v := sessions(r.scrape(t)); v != 0 {
		t.Fatalf("alone, the relay counts %v sessions of other relays", v)
	}
	l, err := FromConfig(baseConfig(dbURL, recv.URL))
	if err != nil {
		t.Fatal(err)
	}
	other, err := OpenDialect(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitMetrics(t, r, "the other relay's session to count", func(f map[string]*dto.MetricFamily) bool { return sessions(f) > 0 })
	other.Close()
	waitMetrics(t, r, "the other relay's session to be gone", func(f map[string]*dto.MetricFamily) bool { return sessions(f) == 0 })
}

// /metrics, parsed as Prometheus parses it, follows rows as they are
// delivered, retried and go dead; every metric of the product is there.
func TestMetricsFollowDeliveries(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]bool{}
	recv := testrecv.New(t, func(r *testrecv.Request) (int, string, map[string]string) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Topic == "order.gone":
			return 410, "gone", nil
		case strings.HasPrefix(r.Topic, "flaky.") && !seen[r.ID]:
			seen[r.ID] = true
			return 503, "try again", nil
		}
		return 204, "", nil
	})
	dbURL := testdb.Database(t)
	cfg := baseConfig(dbURL, recv.URL)
	cfg.Inbox.Sources = map[string]*InboxSourceConfig{"web": {Type: "http", Topic: "web.in"}}
	r := startRelay(t, cfg, nil)

	// Before any row: once the engine runs, the series exist, at zero.
	fams := waitMetrics(t, r, "the engine's routes", func(f map[string]*dto.MetricFamily) bool {
		_, ok := value(f, "queuebox_deliveries_total", "route", "orders")
		return ok
	})
	for _, s := range [][]string{
		{"queuebox_deliveries_total", "route", "orders", "destination", "hook", "outcome", "delivered"},
		{"queuebox_deliveries_total", "route", "flaky.#", "destination", "hook", "outcome", "retry"},
		{"queuebox_deliveries_total", "route", "", "destination", "", "outcome", "dead"},
		{"queuebox_claimed_rows_total"}, {"queuebox_lost_claims_total"}, {"queuebox_inflight_rows"},
		{"queuebox_retention_deleted_total", "state", "delivered"}, {"queuebox_retention_deleted_total", "state", "dead"},
		{"queuebox_inbox_received_total", "source", "web", "outcome", "stored"},
		{"queuebox_inbox_received_total", "source", "web", "outcome", "duplicate"},
		{"queuebox_inbox_received_total", "source", "web", "outcome", "rejected"},
		{"queuebox_oldest_pending_age_seconds"}, {"queuebox_rows", "state", "pending"},
	} {
		if v, ok := value(fams, s[0], s[1:]...); !ok || v != 0 {
			t.Errorf("%v: %v (present %v), want 0 before any row", s, v, ok)
		}
	}
	// Other tests' relays may share the server: only its presence is
	// certain.
	if _, ok := value(fams, "queuebox_other_relay_sessions"); !ok {
		t.Error("no queuebox_other_relay_sessions")
	}
	for _, kind := range []string{"claimer", "key", "pool", "completer", "lease_keeper", "sink"} {
		if _, ok := value(fams, "queuebox_actor_mailbox_length", "actor", kind); !ok {
			t.Errorf("no mailbox length for %s", kind)
		}
	}

	l, _ := FromConfig(cfg)
	d, err := OpenDialect(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var rows []dialects.NewRow
	add := func(topic string, n int) { rows = append(rows, testkit.Rows(n, topic, nil)...) }
	add("order.created", 4)
	add("order.gone", 2)
	add("flaky.thing", 2)
	add("nowhere", 1)
	if err := d.OutboxInsert(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		v float64
		s []string
	}{
		{4, []string{"queuebox_deliveries_total", "route", "orders", "destination", "hook", "outcome", "delivered"}},
		{2, []string{"queuebox_deliveries_total", "route", "orders", "destination", "hook", "outcome", "dead"}},
		{2, []string{"queuebox_deliveries_total", "route", "flaky.#", "destination", "hook", "outcome", "retry"}},
		{2, []string{"queuebox_deliveries_total", "route", "flaky.#", "destination", "hook", "outcome", "delivered"}},
		{1, []string{"queuebox_deliveries_total", "route", "", "destination", "", "outcome", "dead"}},
		{11, []string{"queuebox_claimed_rows_total"}},
		{6, []string{"queuebox_end_to_end_latency_seconds", "destination", "hook"}},
		{10, []string{"queuebox_delivery_duration_seconds", "destination", "hook"}},
		{6, []string{"queuebox_rows", "state", "delivered"}},
		{3, []string{"queuebox_rows", "state", "dead"}},
		{0, []string{"queuebox_rows", "state", "pending"}},
		{0, []string{"queuebox_inflight_rows"}},
	}
	fams = waitMetrics(t, r, "the deliveries", func(f map[string]*dto.MetricFamily) bool {
		for _, w := range want {
			if v, _ := value(f, w.s[0], w.s[1:]...); v != w.v {
				return false
			}
		}
		return true
	})
	if v, _ := value(fams, "queuebox_lost_claims_total"); v != 0 {
		t.Errorf("lost claims: %v", v)
	}
	if v, _ := value(fams, "queuebox_rows_count_seconds"); v <= 0 {
		t.Errorf("the count's duration: %v", v)
	}
	// /api/stats saw the same rows.
	code, body := r.get(t, "/api/stats")
	if code != 200 || !strings.Contains(body, `"dead": 3`) || !strings.Contains(body, `"delivered": 6`) {
		t.Errorf("/api/stats: %d %s", code, body)
	}
}

// purgeLog records every retention delete the engine makes.
type purgeLog struct {
	dialects.Dialect
	mu    sync.Mutex
	calls []string // "state:n"
}

func (p *purgeLog) OutboxPurge(ctx context.Context, pp dialects.PurgeParams) (int, error) {
	n, err := p.Dialect.OutboxPurge(ctx, pp)
	p.mu.Lock()
	p.calls = append(p.calls, fmt.Sprintf("%s:%d", pp.State, n))
	p.mu.Unlock()
	return n, err
}

func (p *purgeLog) deleted(state dialects.State) (rows, statements, biggest int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.calls {
		var n int
		if s, num, _ := strings.Cut(c, ":"); s == string(state) {
			fmt.Sscan(num, &n)
			rows += n
			if n > 0 {
				statements++
			}
			biggest = max(biggest, n)
		}
	}
	return rows, statements, biggest
}

// Retention deletes delivered and dead rows older than their ages (from
// updated_at), in batches of batchSize; recent ones and pending rows stay,
// however old.
func TestRetentionDeletesOldRowsInBatches(t *testing.T) {
	t.Parallel()
	dbURL := testdb.Database(t)
	recv := testrecv.New(t, nil)
	cfg := baseConfig(dbURL, recv.URL)
	cfg.Outbox.Retention = RetentionConfig{Delivered: Duration(time.Hour), Dead: Duration(2 * time.Hour), IntervalMs: 1000, BatchSize: 3}
	// Set up the rows before the relay runs: migrate, insert, settle, age.
	l, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, err := OpenDialect(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	if err := checkSchema(ctx, d, slog.New(slog.DiscardHandler), true); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := d.(*postgres.Dialect).Pool().Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// topic: what the row is; updated_at is set by hand below.
	later := time.Now().Add(time.Hour)
	var rows []dialects.NewRow
	for topic, n := range map[string]int{"old-delivered": 7, "new-delivered": 2, "old-dead": 5, "new-dead": 2, "old-pending": 3} {
		var opts []testkit.RowOption
		if topic == "old-pending" {
			opts = append(opts, testkit.ScheduledAt(later)) // stays pending while the relay runs
		}
		rows = append(rows, testkit.Rows(n, topic, nil, opts...)...)
	}
	if err := d.OutboxInsert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	exec(`UPDATE outbox SET state = 'delivered' WHERE topic LIKE '%-delivered'`)
	exec(`UPDATE outbox SET state = 'dead', last_error = 'x' WHERE topic LIKE '%-dead'`)
	exec(`UPDATE outbox SET updated_at = now() - interval '3 hours' WHERE topic LIKE 'old-%'`)
	exec(`UPDATE outbox SET updated_at = now() - interval '90 minutes' WHERE topic = 'new-dead'`) // dead keeps 2h
	exec(`UPDATE outbox SET updated_at = now() - interval '30 minutes' WHERE topic = 'new-delivered'`)

	var log *purgeLog
	r := startRelay(t, cfg, func(d dialects.Dialect) dialects.Dialect {
		log = &purgeLog{Dialect: d}
		return log
	})
	waitMetrics(t, r, "the retention deletes", func(f map[string]*dto.MetricFamily) bool {
		del, _ := value(f, "queuebox_retention_deleted_total", "state", "delivered")
		dead, _ := value(f, "queuebox_retention_deleted_total", "state", "dead")
		return del == 7 && dead == 5
	})
	st, err := d.OutboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows[dialects.Delivered] != 2 || st.Rows[dialects.Dead] != 2 || st.Rows[dialects.Pending] != 3 {
		t.Fatalf("after retention: %v; want the 2 recent delivered, the 2 recent dead and the 3 pending rows", st.Rows)
	}
	for _, c := range []struct {
		state       dialects.State
		rows, least int
	}{{dialects.Delivered, 7, 3}, {dialects.Dead, 5, 2}} {
		rows, statements, biggest := log.deleted(c.state)
		if rows != c.rows || statements < c.least || biggest > 3 {
			t.Errorf("%s: %d rows in %d deletes, the biggest %d; want %d rows in batches of at most 3", c.state, rows, statements, biggest, c.rows)
		}
	}
}

// A port that another process holds fails the start, naming the key and
// the address, before anything touches the database.
func TestAdminPortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dbURL := testdb.Database(t)
	cfg := baseConfig(dbURL, "http://127.0.0.1:1")
	cfg.Admin.Listen = ln.Addr().String()
	l, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, err := OpenDialect(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var pings atomic.Int64
	err = Run(context.Background(), l, countedPings{Dialect: d, n: &pings}, slog.New(slog.DiscardHandler), RunOptions{Migrate: true})
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 1 || !strings.Contains(err.Error(), "admin.listen "+ln.Addr().String()+": the address is already in use") {
		t.Fatalf("Run on a port in use: %v", err)
	}
	if pings.Load() != 0 {
		t.Errorf("Run reached the database (%d pings) although it could not listen", pings.Load())
	}
}

// An address beyond loopback without a token is refused before anything
// starts.
func TestNonLoopbackWithoutTokenIsRefused(t *testing.T) {
	cfg := baseConfig("postgres://localhost/app", "http://127.0.0.1:1")
	for _, listen := range []string{"0.0.0.0:0", ":8080", "192.0.2.1:8080"} {
		cfg.Admin.Listen = listen
		_, err := FromConfig(cfg)
		var ce *Error
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "admin.listen") || !strings.Contains(err.Error(), "admin.token is empty") {
			t.Errorf("listen %s without a token: %v", listen, err)
		}
	}
	cfg.Admin.Listen, cfg.Admin.Token = "0.0.0.0:0", "t0ken-for-the-test"
	if _, err := FromConfig(cfg); err != nil {
		t.Errorf("with a token: %v", err)
	}
}
