package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testlog"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/scram"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkafka"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testnats"
	"github.com/queuebox/queuebox/internal/testrabbit"
	"github.com/queuebox/queuebox/internal/testrecv"
	"github.com/queuebox/queuebox/migrations"
)

// Inbox sources are checked by type, with the key and the reason.
func TestInboxSourcesAreValidated(t *testing.T) {
	cfg := `database:
  url: postgres://localhost/app
routes: [{ topicPattern: "#", destination: d }]
destinations: { d: { type: "null" } }
admin:
  listen: 0.0.0.0:8080
  token: t
inbox:
  sources:
    "bad name!": { type: http, token: x, topic: t }
    hook:
      type: http
      topic: "in.{{ topic }}"
      aggregateId: "{{ key }}"
      signingSecret: not-whsec
      queue: q
      maxBodyBytes: 0
    open: { type: http, topic: t }
    rabbit: { type: rabbitmq, url: "http://x", topic: t }
    events: { type: kafka, brokers: ["nohost"], topic: t, stream: s }
    subjects: { type: nats, url: "nats://127.0.0.1:4222", topic: "{{ headers.type" }
    pigeon: { type: pigeon, topic: t }
`
	ps := problems(t, cfg)
	want := []struct{ key, reason string }{
		{"inbox.sources.bad name!", "not a usable source name"},
		{"inbox.sources.hook.topic", "{{ topic }} is not available to an inbox source"},
		{"inbox.sources.hook.aggregateId", "{{ key }} is not available"},
		{"inbox.sources.hook.signingSecret", "does not start with whsec_"},
		{"inbox.sources.hook.queue", "is not a key of a http source (it belongs to rabbitmq)"},
		{"inbox.sources.hook.maxBodyBytes", "out of range"},
		{"inbox.sources.open", "accepts messages from anyone"},
		{"inbox.sources.rabbit.url", "not a URL of the form amqp://"},
		{"inbox.sources.rabbit.queue", "is required"},
		{"inbox.sources.events.brokers[0]", "not host:port"},
		{"inbox.sources.events.kafkaTopic", "is required"},
		{"inbox.sources.events.groupId", "is required"},
		{"inbox.sources.events.stream", "is not a key of a kafka source"},
		{"inbox.sources.subjects.topic", "unclosed placeholder"},
		{"inbox.sources.subjects.stream", "is required"},
		{"inbox.sources.subjects.durable", "is required"},
		{"inbox.sources.pigeon.type", "not a source type"},
	}
	for _, w := range want {
		if !hasProblem(ps, w.key, w.reason, 0) {
			t.Errorf("no problem %s: %s\ngot:\n%v", w.key, w.reason, ps)
		}
	}
}

// On a loopback listener an HTTP source may go without credentials; its
// defaults show in the effective configuration, and relay max_attempts
// falls back to outbox.maxAttempts.
func TestInboxDefaults(t *testing.T) {
	l, err := Parse("q.yaml", []byte(`database: { url: postgres://localhost/app }
routes: [{ topicPattern: "#", destination: d }]
destinations: { d: { type: "null" } }
outbox: { maxAttempts: 8 }
inbox:
  sources:
    open: { type: http, topic: "in.{{ headers.X-Type }}", aggregateId: "{{ headers.X-Order }}" }
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	s := l.Inbox.Sources["open"]
	if s.MaxBodyBytes != 1<<20 || time.Duration(s.SignatureTolerance) != 5*time.Minute {
		t.Errorf("defaults: maxBodyBytes %d, signatureTolerance %v", s.MaxBodyBytes, time.Duration(s.SignatureTolerance))
	}
	if r := InboxRelayOptions(l); !r.Enabled || r.MaxAttempts != 8 {
		t.Errorf("relay options %+v, want enabled with outbox.maxAttempts 8", r)
	}
	l.Inbox.Relay.MaxAttempts = 3
	if r := InboxRelayOptions(l); r.MaxAttempts != 3 {
		t.Errorf("relay options %+v, want inbox.relay.maxAttempts 3", r)
	}
	out, err := l.Effective()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "maxBodyBytes: 1048576") || !strings.Contains(string(out), "signatureTolerance: 5m") || strings.Contains(string(out), "kafkaTopic") {
		t.Errorf("effective configuration:\n%s", out)
	}
}

// `queuebox run` with a RabbitMQ and a Kafka source: what the brokers carry
// is stored once, relayed and delivered once, and SIGTERM drains the
// consumers (every message acknowledged) and stops with exit 0.
func TestRunConsumesBrokerSources(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the relay against three brokers")
	}
	t.Parallel()
	amqpURL := testrabbit.URL(t)
	kafka := testkafka.New(t)
	dbURL := testdb.Database(t)
	recv := testrecv.New(t, nil)

	queue := testrabbit.DurableQueue(t, amqpURL, "qbt-run-inbox", nil)
	ch := testrabbit.Channel(t, amqpURL)
	topic := testkafka.Unique("qbt-run-inbox")
	kafka.CreateTopic(t, topic, 2)
	// A stream with the shortest duplicate window the server allows, and
	// the repeats sent after it: they reach the source, whose store must
	// drop them.
	natsSrv := testnats.Start(t)
	stream := testnats.Unique("QBTRUNINBOX")
	natsStream := natsSrv.NewStreamConfig(t, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".>"},
		Storage: jetstream.FileStorage, Duplicates: 100 * time.Millisecond})

	cfg := Defaults()
	cfg.Database.URL = dbURL
	cfg.Outbox.PollIntervalMs = 50
	cfg.Shutdown.DrainTimeoutMs = 5000
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Destinations = map[string]*DestinationConfig{"hook": {Type: "http", URL: recv.URL + "/{{ topic }}"}}
	cfg.Routes = []RouteConfig{{TopicPattern: "#", Destination: "hook"}}
	cfg.Inbox.Sources = map[string]*InboxSourceConfig{
		"billing": {Type: "rabbitmq", URL: amqpURL, Queue: queue, Topic: "billing.{{ headers.type }}", AggregateID: "{{ headers.invoice }}"},
		"orders":  {Type: "kafka", Brokers: kafka.Brokers, KafkaTopic: topic, GroupID: topic + "-group", Topic: "orders.in", AggregateID: "{{ headers.key }}"},
		"sensors": {Type: "nats", URL: natsSrv.URL, Stream: stream, Durable: "queuebox-inbox", Topic: "sensor.{{ headers.Kind }}", AggregateID: "{{ headers.Device }}"},
	}
	l, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d := openDialect(t, l)
	logs := &testlog.Buffer{}
	sigs, started, done := make(chan os.Signal, 2), make(chan struct{}), make(chan error, 1)
	stop := watchSignals(sigs)
	t.Cleanup(stop.Release)
	go func() {
		done <- Run(stop.Stop, l, d, slog.New(slog.NewTextHandler(logs, nil)), RunOptions{Migrate: true, Abort: stop.Abort,
			Started: func(*actors.Engine) { close(started) }})
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("run ended at start: %v\n%s", err, logs.String())
	case <-time.After(time.Minute):
		t.Fatal("run did not start")
	}

	const n = 20
	for i := range n {
		for range 2 { // every message twice: a publisher that retried
			if err := ch.Publish("", queue, false, false, amqp.Publishing{MessageId: fmt.Sprintf("b%d", i), Type: "paid",
				Headers: amqp.Table{"invoice": fmt.Sprintf("inv-%d", i%3)}, Body: []byte(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	w := &kafkago.Writer{Addr: kafkago.TCP(kafka.Brokers...), Topic: topic, Balancer: &kafkago.Hash{}, BatchTimeout: time.Millisecond}
	defer w.Close()
	var recs []kafkago.Message
	for i := range n {
		m := kafkago.Message{Key: []byte(fmt.Sprintf("o-%d", i%4)), Value: []byte(fmt.Sprintf(`{"n":%d}`, i)),
			Headers: []kafkago.Header{{Key: "X-Message-Id", Value: []byte(fmt.Sprintf("k%d", i))}}}
		recs = append(recs, m, m)
	}
	if err := w.WriteMessages(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	nc := natsSrv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		for i := range n {
			msg := &natsgo.Msg{Subject: stream + ".readings", Data: []byte(fmt.Sprintf(`{"n":%d}`, i)), Header: natsgo.Header{}}
			msg.Header.Set("Nats-Msg-Id", fmt.Sprintf("s%d", i))
			msg.Header.Set("Kind", "temperature")
			msg.Header.Set("Device", fmt.Sprintf("dev-%d", i%3))
			// The repeat goes again until the stream takes it, once the
			// stream's window has passed.
			testkit.Eventually(t, "the stream to take the repeat", 0, func() error {
				ack, err := js.PublishMsg(ctx, msg)
				if err != nil {
					t.Fatal(err)
				}
				if round == 0 || !ack.Duplicate {
					return nil
				}
				return errors.New("the stream still drops it as a duplicate")
			})
		}
	}
	if got := len(natsStream.Messages()); got != 2*n {
		t.Fatalf("the stream holds %d messages, want both copies of %d", got, n)
	}
	testkit.Eventually(t, "every message delivered", time.Minute, delivered(recv, 3*n))
	if dups := recv.CheckOrder(t); dups != 0 {
		t.Errorf("%d duplicate deliveries", dups)
	}
	st, err := d.InboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Rows["relayed"]; got != 3*n {
		t.Fatalf("%d inbox rows relayed for %d distinct messages sent twice each", got, 3*n)
	}
	topics := map[string]int{}
	for _, q := range recv.Requests() {
		topics[q.Topic]++
	}
	if topics["billing.paid"] != n || topics["orders.in"] != n || topics["sensor.temperature"] != n || len(recv.Requests()) != 3*n {
		t.Fatalf("deliveries per topic %v (%d requests); want %d of each, once", topics, len(recv.Requests()), n)
	}
	sigs <- syscall.SIGTERM
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after SIGTERM: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not stop after SIGTERM")
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != 0 || q.Consumers != 0 {
		t.Fatalf("after the drain the queue has %d messages and %d consumers", q.Messages, q.Consumers)
	}
	for _, line := range []string{"inbox source consuming", "source=billing", "source=orders", "source=sensors"} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("the log lacks %q:\n%s", line, logs.String())
		}
	}
}

// `queuebox run` serves the HTTP sources on the admin listener at
// /inbox/{source}, with the source's token and not the admin token: a
// message sent twice is stored once and delivered once, bad input is
// refused with its reason, and /metrics counts each outcome.
func TestRunServesHTTPSources(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the relay")
	}
	t.Parallel()
	recv := testrecv.New(t, nil)
	cfg := baseConfig(testdb.Database(t), recv.URL)
	cfg.Admin.Token = "admin-secret"
	cfg.Inbox.Sources = map[string]*InboxSourceConfig{"web": {Type: "http", Token: "web-secret",
		Topic: "order.{{ headers.X-Event-Type }}", AggregateID: "{{ headers.X-Order }}"}}
	r := startRelay(t, cfg, nil)
	post := func(token, id, body string) (int, string) {
		req, _ := http.NewRequest("POST", r.url+"inbox/web", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-Message-Id", id)
		req.Header.Set("X-Event-Type", "created")
		req.Header.Set("X-Order", "o-1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	var first string
	testkit.Eventually(t, "the database to take the message", time.Minute, func() error {
		code, body := post("web-secret", "m-1", `{"a":1}`)
		if first = body; code != 202 {
			return fmt.Errorf("answered %d %s", code, body)
		}
		return nil
	})
	if code, body := post("web-secret", "m-1", `{"a":1}`); code != 200 || !strings.Contains(body, `"duplicate":true`) ||
		!strings.Contains(first, body[:strings.Index(body, ",")]) {
		t.Fatalf("the repeat: %d %s (first: %s)", code, body, first)
	}
	if code, body := post("admin-secret", "m-2", `{"a":2}`); code != 401 || !strings.Contains(body, "does not match this source's token") {
		t.Fatalf("the admin token on an inbox source: %d %s", code, body)
	}
	if code, body := post("web-secret", "m-3", `{"a":`); code != 400 || !strings.Contains(body, "not JSON") {
		t.Fatalf("a broken body: %d %s", code, body)
	}
	testkit.Eventually(t, "the message delivered", time.Minute, delivered(recv, 1))
	if reqs := recv.Requests(); len(reqs) != 1 || reqs[0].Topic != "order.created" || reqs[0].Key != "o-1" {
		t.Fatalf("deliveries %+v", reqs)
	}
	// The admin routes still need the admin token.
	req, _ := http.NewRequest("GET", r.url+"api/stats", nil)
	req.Header.Set("Authorization", "Bearer web-secret")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 {
		t.Fatalf("/api/stats with an inbox token: %d", res.StatusCode)
	}
	fams := r.scrape(t)
	for outcome, want := range map[string]float64{"stored": 1, "duplicate": 1, "rejected": 2} {
		if v, _ := value(fams, "queuebox_inbox_received_total", "source", "web", "outcome", outcome); v != want {
			t.Errorf("queuebox_inbox_received_total{source=web,outcome=%s} = %v, want %v", outcome, v, want)
		}
	}
}

// What only the Kafka source can check (a CA file it must read) is
// reported under the source's key, before anything runs.
func TestKafkaSourceRefusalsNameTheKey(t *testing.T) {
	l, err := Parse("q.yaml", []byte(`database: { url: postgres://localhost/app }
routes: [{ topicPattern: "#", destination: d }]
destinations: { d: { type: "null" } }
inbox:
  sources:
    events: { type: kafka, brokers: ["k:9092"], kafkaTopic: in, groupId: g, topic: t, tls: { enabled: true, caFile: /nonexistent/ca.pem } }
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	_, err = InboxConsumers(l, nil, nil, slog.New(slog.DiscardHandler))
	var e *Error
	if !errors.As(err, &e) || len(e.Problems) != 1 || e.Problems[0].Key != "inbox.sources.events.tls.caFile" {
		t.Fatalf("%v", err)
	}
}

// A Kafka source configured with sasl (the password from the environment)
// against a cluster that requires it: the wiring hands the credentials to
// the consumer, which stores what the topic carries.
func TestKafkaSourceWithSASLStores(t *testing.T) {
	t.Parallel()
	kafka := testkafka.New(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "inbox-user", "inbox-pw-1"))
	topic := testkafka.Unique("qbt-boot-sasl")
	if err := kafka.Fake(t).CreateTopic(topic, 1, nil); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`database: { url: %q }
routes: [{ topicPattern: "#", destination: d }]
destinations: { d: { type: "null" } }
inbox:
  relay: { enabled: false }
  sources:
    events:
      type: kafka
      brokers: [%q]
      kafkaTopic: %s
      groupId: %s-group
      topic: orders.in
      sasl: { mechanism: SCRAM-SHA-256, username: inbox-user, password: "${KAFKA_IN_PASSWORD}" }
`, testdb.Database(t), kafka.Brokers[0], topic, topic)
	l, err := Parse("q.yaml", []byte(cfg), env(map[string]string{"KAFKA_IN_PASSWORD": "inbox-pw-1"}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d := openDialect(t, l)
	if _, err := migrations.Up(ctx, d); err != nil {
		t.Fatal(err)
	}
	cs, err := InboxConsumers(l, d, nil, slog.New(slog.DiscardHandler))
	if err != nil || len(cs) != 1 {
		t.Fatalf("consumers %v: %v", cs, err)
	}
	if err := cs[0].Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs[0].Stop(ctx) }()

	w := &kafkago.Writer{Addr: kafkago.TCP(kafka.Brokers...), Topic: topic, BatchTimeout: time.Millisecond,
		Transport: &kafkago.Transport{SASL: mustSCRAM(t, "inbox-user", "inbox-pw-1")}}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafkago.Message{Value: []byte(`{"n":1}`), Headers: []kafkago.Header{{Key: "X-Message-Id", Value: []byte("s1")}}},
		kafkago.Message{Value: []byte(`{"n":2}`), Headers: []kafkago.Header{{Key: "X-Message-Id", Value: []byte("s2")}}}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "both records stored", time.Minute, func() error {
		st, err := d.InboxStats(ctx)
		if err != nil {
			return err
		}
		var n int64
		for _, c := range st.Rows {
			n += c
		}
		if n != 2 {
			return fmt.Errorf("%d stored", n)
		}
		return nil
	})
}

func mustSCRAM(t *testing.T, user, pass string) sasl.Mechanism {
	t.Helper()
	m, err := scram.Mechanism(scram.SHA256, user, pass)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// openDialect opens l's database for a test and closes it at the end.
func openDialect(t *testing.T, l *Loaded) dialects.Dialect {
	t.Helper()
	d, err := OpenDialect(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// delivered is a condition for testkit.Eventually: exactly n distinct rows
// accepted at the receiver.
func delivered(recv *testrecv.Receiver, n int) func() error {
	return func() error {
		if got := recv.Delivered(); got != n {
			return fmt.Errorf("%d of %d rows delivered", got, n)
		}
		return nil
	}
}
