package benchmarks

// The broker scenarios: rabbitmq, nats and kafka. Each drains the rows of
// drain-keys (the same number over 1,000 keys, the same payload) into a
// real broker through the destination `queuebox run` builds, with one
// difference that matters to a broker: three topics take turns within each
// key (created, paid, shipped, created, ...), and the destination's address
// follows the topic, so that it changes from one row of a key to the next.
// The relay's rate is compared with the drain-keys null drain of the same
// run (ratio) and with the broker's own ceiling (vs ceiling): the same
// number of messages, with the same bodies, headers and addresses, sent by
// a plain publisher of the same client library that keeps many
// confirmations in flight and cares for no order, measured in the same run
// just before the drain.
//
// Where the brokers are: --amqp-url, --nats-url and --kafka-brokers, else
// QUEUEBOX_BENCH_AMQP_URL, QUEUEBOX_BENCH_NATS_URL and
// QUEUEBOX_BENCH_KAFKA_BROKERS, else the local RabbitMQ and NATS (the
// addresses the tests use) and kfake, franz-go's Kafka, in this process
// (which checks every produce and counts offsets, but keeps no records, so
// that the peak memory stays the relay's).
// Each scenario makes an exchange and queue, a stream or topics of its own
// and removes them when it ends.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/queuebox/queuebox/bootstrap"
	"github.com/queuebox/queuebox/sinks"
)

// The defaults where neither a flag nor the environment names a broker.
const (
	defaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
	defaultNATSURL = "nats://127.0.0.1:4222"
)

// relayVariant names the relay's line of a broker scenario; the other is
// the plain publisher's.
const relayVariant = "relay, 3 topics per key"

// brokerKeys is the number of keys of a broker drain: drain-keys'.
const brokerKeys = 1000

// ceilingInFlight is how many messages the plain publishers keep
// unconfirmed at once.
const ceilingInFlight = 1000

// brokerTopics are SeedTopics' topics, in the order they take turns.
var brokerTopics = []string{"bench.created", "bench.paid", "bench.shipped"}

// brokerScenario is one broker's scenario.
type brokerScenario struct {
	name string
	// check connects and disconnects, so that a broker that cannot be
	// reached fails the run before anything runs.
	check func(ctx context.Context, o *Options) error
	// open makes the scenario's exchange and queue, stream or topics.
	open func(ctx context.Context, e *env) (*brokerTarget, error)
}

// brokerTarget is one scenario's place on a broker.
type brokerTarget struct {
	// dest is the destination the relay drains into.
	dest *bootstrap.DestinationConfig
	// ceiling publishes msgs with the plain publisher and returns when
	// the broker has confirmed every one.
	ceiling func(ctx context.Context, msgs []sinks.Message) error
	// reset empties what the ceiling left, before the drain.
	reset func(ctx context.Context) error
	// stored counts the messages the broker holds.
	stored func(ctx context.Context) (int64, error)
	// close removes what open made.
	close func()
	// what describes the ceiling's publisher, for the table's note.
	what string
}

func brokerScenarios() []brokerScenario {
	return []brokerScenario{
		{"rabbitmq", checkRabbit, openRabbit},
		{"nats", checkNATS, openNATS},
		{"kafka", checkKafka, openKafka},
	}
}

func brokerScenarioNamed(name string) (brokerScenario, bool) {
	i := slices.IndexFunc(brokerScenarios(), func(b brokerScenario) bool { return b.name == name })
	if i < 0 {
		return brokerScenario{}, false
	}
	return brokerScenarios()[i], true
}

// resolveBrokers fills the brokers' addresses from the environment and the
// defaults, and refuses an address that is not one.
func (o *Options) resolveBrokers() error {
	if o.AMQPURL == "" {
		o.AMQPURL = os.Getenv("QUEUEBOX_BENCH_AMQP_URL")
	}
	if o.AMQPURL == "" {
		o.AMQPURL = defaultAMQPURL
	}
	if _, err := amqp.ParseURI(o.AMQPURL); err != nil {
		return &UsageError{fmt.Sprintf("--amqp-url (or QUEUEBOX_BENCH_AMQP_URL) is not an AMQP URL (%v); write amqp://user:password@host:5672/vhost", err)}
	}
	if o.NATSURL == "" {
		o.NATSURL = os.Getenv("QUEUEBOX_BENCH_NATS_URL")
	}
	if o.NATSURL == "" {
		o.NATSURL = defaultNATSURL
	}
	if u, err := url.Parse(o.NATSURL); err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "tls") {
		return &UsageError{"--nats-url (or QUEUEBOX_BENCH_NATS_URL) is not a NATS URL; write nats://host:4222"}
	}
	if len(o.KafkaBrokers) == 0 {
		if env := os.Getenv("QUEUEBOX_BENCH_KAFKA_BROKERS"); env != "" {
			o.KafkaBrokers = strings.Split(env, ",")
		}
	}
	for i, b := range o.KafkaBrokers {
		o.KafkaBrokers[i] = strings.TrimSpace(b)
		if _, _, err := net.SplitHostPort(o.KafkaBrokers[i]); err != nil {
			return &UsageError{fmt.Sprintf("--kafka-brokers (or QUEUEBOX_BENCH_KAFKA_BROKERS): %q is not host:port; write kafka-1:9092,kafka-2:9092, or leave both out for kfake in this process", b)}
		}
	}
	return nil
}

// checkBrokers resolves the brokers' addresses and connects to each broker
// that a selected scenario needs, before anything runs.
func checkBrokers(ctx context.Context, o *Options, selected []Scenario) error {
	if err := o.resolveBrokers(); err != nil {
		return err
	}
	for _, s := range selected {
		if b, ok := brokerScenarioNamed(s.Name); ok {
			if err := b.check(ctx, o); err != nil {
				return err
			}
		}
	}
	return nil
}

// runBroker is a broker scenario: the ceiling, then the relay's drain.
func runBroker(name string) func(ctx context.Context, e *env) ([]Result, error) {
	return func(ctx context.Context, e *env) ([]Result, error) {
		b, _ := brokerScenarioNamed(name)
		target, err := b.open(ctx, e)
		if err != nil {
			return nil, err
		}
		defer target.close()
		rows := e.o.Rows

		msgs := ceilingMessages(rows, e.payload)
		ceiling := Result{Scenario: name, Variant: "plain publisher (the ceiling)", Rows: rows, Keys: brokerKeys, Replicas: 1}
		m := e.meter()
		if err := target.ceiling(ctx, msgs); err != nil {
			return nil, fmt.Errorf("the plain publisher: %w", err)
		}
		m.stop(&ceiling)
		ceiling.RowsPerSec = float64(rows) / ceiling.Seconds
		ceiling.Note = target.what
		msgs = nil
		if err := target.reset(ctx); err != nil {
			return nil, err
		}

		d, h, err := e.fresh(ctx, name)
		if err != nil {
			return nil, err
		}
		if err := e.seedWith(ctx, d, h, h.SeedTopics, rows, brokerKeys); err != nil {
			return nil, err
		}
		relay, err := e.drainSeeded(ctx, d, name, rows, brokerKeys, func(c *bootstrap.Config) {
			c.Destinations = map[string]*bootstrap.DestinationConfig{"bench": target.dest}
		})
		if err != nil {
			return nil, err
		}
		relay.Variant = relayVariant
		if ceiling.RowsPerSec > 0 {
			relay.RatioToCeiling = ptr(relay.RowsPerSec / ceiling.RowsPerSec)
		}
		n, err := target.stored(ctx)
		if err != nil {
			return nil, fmt.Errorf("counting what the broker holds: %w", err)
		}
		delivered := int64(rows) - relay.Failed
		if n < delivered {
			return nil, fmt.Errorf("the relay reported %d rows delivered, but the broker holds %d messages", delivered, n)
		}
		relay.Note = strings.TrimPrefix(relay.Note+fmt.Sprintf("; the broker holds %d messages", n), "; ")
		return []Result{relay, ceiling}, nil
	}
}

// ceilingMessages are the drain's rows as the sinks get them: the same
// keys, topics in the same turns, bodies, and QueueBox's headers.
func ceilingMessages(n int, payload []byte) []sinks.Message {
	out := make([]sinks.Message, n)
	now := time.Now()
	for i := range out {
		g := i + 1 // as SeedTopics numbers its rows
		out[i] = sinks.Message{
			ID: uuid.NewString(), Topic: brokerTopics[(g/brokerKeys)%len(brokerTopics)], Key: fmt.Sprintf("key-%d", g%brokerKeys),
			Sequence: int64(g), Attempt: 1, CreatedAt: now, Body: payload,
		}
	}
	return out
}

// unreachable words a broker that did not answer: one sentence, which
// says where the address came from and how to give another.
func unreachable(broker, where string, err error, flag, env string) error {
	return fmt.Errorf("%s at %s cannot be reached (%v): start it, or give its address with %s or %s", broker, where, err, flag, env)
}

// RabbitMQ: a durable topic exchange and a durable queue bound to it with
// #, which takes every message of the three routing keys.

func checkRabbit(ctx context.Context, o *Options) error {
	conn, err := dialRabbit(o.AMQPURL)
	if err != nil {
		return err
	}
	return conn.Close()
}

func dialRabbit(u string) (*amqp.Connection, error) {
	conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second), Properties: amqp.Table{"connection_name": "queuebox bench"}})
	if err != nil {
		return nil, unreachable("RabbitMQ", amqpHost(u), err, "--amqp-url", "QUEUEBOX_BENCH_AMQP_URL")
	}
	return conn, nil
}

// amqpHost is the URL's host and port, without the credentials.
func amqpHost(u string) string {
	if uri, err := amqp.ParseURI(u); err == nil {
		return net.JoinHostPort(uri.Host, fmt.Sprint(uri.Port))
	}
	return "the given URL"
}

// rabbitChannel connects and opens a channel; closing the connection
// closes both.
func rabbitChannel(u string) (*amqp.Connection, *amqp.Channel, error) {
	conn, err := dialRabbit(u)
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("RabbitMQ at %s: opening a channel: %w", amqpHost(u), err)
	}
	return conn, ch, nil
}

func openRabbit(ctx context.Context, e *env) (*brokerTarget, error) {
	conn, ch, err := rabbitChannel(e.o.AMQPURL)
	if err != nil {
		return nil, err
	}
	name := "qb-bench-" + e.run
	if err = ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err == nil {
		if _, err = ch.QueueDeclare(name, true, false, false, false, nil); err == nil {
			err = ch.QueueBind(name, "#", name, false, nil)
		}
	}
	t := &brokerTarget{
		dest: &bootstrap.DestinationConfig{Type: "rabbitmq", URL: e.o.AMQPURL, Exchange: name},
		what: fmt.Sprintf("amqp091-go, one channel, persistent, mandatory, %d confirms in flight, into one durable queue", ceilingInFlight),
		ceiling: func(ctx context.Context, msgs []sinks.Message) error {
			return rabbitCeiling(ctx, e.o.AMQPURL, name, msgs)
		},
		reset: func(context.Context) error {
			_, err := ch.QueuePurge(name, false)
			return err
		},
		stored: func(context.Context) (int64, error) {
			q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
			return int64(q.Messages), err
		},
		close: func() {
			_, _ = ch.QueueDelete(name, false, false, false)
			_ = ch.ExchangeDelete(name, false, false)
			_ = conn.Close()
		},
	}
	if err != nil {
		t.close()
		return nil, fmt.Errorf("RabbitMQ at %s: declaring the exchange and queue %s: %w", amqpHost(e.o.AMQPURL), name, err)
	}
	return t, nil
}

// rabbitCeiling publishes on one channel in confirm mode, keeping up to
// ceilingInFlight confirms outstanding.
func rabbitCeiling(ctx context.Context, u, exchange string, msgs []sinks.Message) error {
	conn, ch, err := rabbitChannel(u)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	var returned atomic.Int64
	returns := ch.NotifyReturn(make(chan amqp.Return, 16))
	go func() {
		for range returns {
			returned.Add(1)
		}
	}()
	window := make(chan *amqp.DeferredConfirmation, ceilingInFlight-1)
	waited := make(chan error, 1)
	go func() {
		var first error
		for dc := range window {
			ok, err := dc.WaitContext(ctx)
			if first == nil && err != nil {
				first = err
			} else if first == nil && !ok {
				first = errors.New("the broker refused a message (nack)")
			}
		}
		waited <- first
	}()
	var pubErr error
	for i := range msgs {
		m := &msgs[i]
		h := amqp.Table{}
		m.StandardHeaders(func(k, v string) { h[k] = v })
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, m.Topic, true, false, amqp.Publishing{
			Headers: h, ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: m.ID, Timestamp: m.CreatedAt, Body: m.Body,
		})
		if err != nil {
			pubErr = err
			break
		}
		window <- dc
	}
	close(window)
	if err := <-waited; err != nil {
		return err
	}
	if pubErr != nil {
		return pubErr
	}
	if n := returned.Load(); n > 0 {
		return fmt.Errorf("the broker returned %d messages as unroutable", n)
	}
	return nil
}

// NATS: a file stream that captures the scenario's subjects; every message
// carries its id (Nats-Msg-Id), as the destination's do.

func checkNATS(ctx context.Context, o *Options) error {
	nc, err := dialNATS(o.NATSURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = js.AccountInfo(cctx)
	}
	if err != nil {
		return fmt.Errorf("NATS at %s answers, but not with JetStream (%v): start nats-server with -js, or give another with --nats-url or QUEUEBOX_BENCH_NATS_URL", natsHost(o.NATSURL), err)
	}
	return nil
}

func dialNATS(u string) (*natsgo.Conn, error) {
	nc, err := natsgo.Connect(u, natsgo.Name("queuebox bench"), natsgo.Timeout(5*time.Second))
	if err != nil {
		return nil, unreachable("NATS", natsHost(u), err, "--nats-url", "QUEUEBOX_BENCH_NATS_URL")
	}
	return nc, nil
}

func natsHost(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Host
	}
	return "the given URL"
}

func openNATS(ctx context.Context, e *env) (*brokerTarget, error) {
	nc, err := dialNATS(e.o.NATSURL)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	name := "QB_BENCH_" + strings.ToUpper(e.run)
	prefix := "qb.bench." + e.run
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".>"}, Storage: jetstream.FileStorage})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("NATS at %s: creating the stream %s: %w", natsHost(e.o.NATSURL), name, err)
	}
	return &brokerTarget{
		dest: &bootstrap.DestinationConfig{Type: "nats", URL: e.o.NATSURL, Subject: prefix + ".{{ topic }}"},
		what: fmt.Sprintf("nats.go JetStream, asynchronous publishes with message ids, %d acks pending, into one file stream", ceilingInFlight),
		ceiling: func(ctx context.Context, msgs []sinks.Message) error {
			return natsCeiling(ctx, e.o.NATSURL, prefix, msgs)
		},
		reset: func(ctx context.Context) error { return stream.Purge(ctx) },
		stored: func(ctx context.Context) (int64, error) {
			info, err := stream.Info(ctx)
			if err != nil {
				return 0, err
			}
			return int64(info.State.Msgs), nil
		},
		close: func() {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = js.DeleteStream(cctx, name)
			nc.Close()
		},
	}, nil
}

// natsCeiling publishes asynchronously with up to ceilingInFlight acks
// pending.
func natsCeiling(ctx context.Context, u, prefix string, msgs []sinks.Message) error {
	nc, err := dialNATS(u)
	if err != nil {
		return err
	}
	defer nc.Close()
	var failed atomic.Int64
	var first atomic.Value
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(ceilingInFlight),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *natsgo.Msg, err error) {
			failed.Add(1)
			first.CompareAndSwap(nil, err)
		}))
	if err != nil {
		return err
	}
	for i := range msgs {
		m := &msgs[i]
		h := natsgo.Header{}
		m.StandardHeaders(h.Set)
		if _, err := js.PublishMsgAsync(&natsgo.Msg{Subject: prefix + "." + m.Topic, Header: h, Data: m.Body}, jetstream.WithMsgID(m.ID)); err != nil {
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d publishes failed, the first with %v", n, first.Load())
	}
	return nil
}

// Kafka: three topics of six partitions each for the drain, and three
// others for the ceiling, deleted before the drain.

const kafkaPartitions = 6

func checkKafka(ctx context.Context, o *Options) error {
	if len(o.KafkaBrokers) == 0 {
		return nil // kfake, started by the scenario
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cl := &kafkago.Client{Addr: kafkago.TCP(o.KafkaBrokers...), Timeout: 5 * time.Second}
	if _, err := cl.Metadata(cctx, &kafkago.MetadataRequest{Topics: []string{}}); err != nil {
		return unreachable("Kafka", strings.Join(o.KafkaBrokers, ","), err, "--kafka-brokers", "QUEUEBOX_BENCH_KAFKA_BROKERS")
	}
	return nil
}

func openKafka(ctx context.Context, e *env) (*brokerTarget, error) {
	brokers := e.o.KafkaBrokers
	var fake *kfake.Cluster
	if len(brokers) == 0 {
		var err error
		// kfake runs in this process: kept, the records would count in
		// the relay's peak memory. It still decodes and checks every
		// produce and advances the offsets that stored counts.
		if fake, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.BlackholeProduce()); err != nil {
			return nil, fmt.Errorf("starting kfake: %w", err)
		}
		brokers = fake.ListenAddrs()
	}
	where := strings.Join(brokers, ",")
	cl := &kafkago.Client{Addr: kafkago.TCP(brokers...), Timeout: 30 * time.Second}
	prefix := "qb-bench-" + e.run
	topics := func(p string) []string {
		out := make([]string, len(brokerTopics))
		for i, t := range brokerTopics {
			out[i] = p + "." + t
		}
		return out
	}
	drainTopics, ceilingTopics := topics(prefix), topics(prefix+"-ceiling")
	t := &brokerTarget{
		dest: &bootstrap.DestinationConfig{Type: "kafka", Brokers: brokers, Topic: prefix + ".{{ topic }}"},
		what: fmt.Sprintf("kafka-go's asynchronous writer, acks all, batches of up to %d, into the same topics' twins", ceilingInFlight),
		ceiling: func(ctx context.Context, msgs []sinks.Message) error {
			return kafkaCeiling(ctx, brokers, prefix+"-ceiling", msgs)
		},
		reset: func(ctx context.Context) error {
			_, err := cl.DeleteTopics(ctx, &kafkago.DeleteTopicsRequest{Topics: ceilingTopics})
			return err
		},
		stored: func(ctx context.Context) (int64, error) { return kafkaStored(ctx, cl, drainTopics) },
		close: func() {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = cl.DeleteTopics(cctx, &kafkago.DeleteTopicsRequest{Topics: append(drainTopics, ceilingTopics...)})
			if fake != nil {
				fake.Close()
			}
		},
	}
	var cfgs []kafkago.TopicConfig
	for _, name := range append(slices.Clone(drainTopics), ceilingTopics...) {
		cfgs = append(cfgs, kafkago.TopicConfig{Topic: name, NumPartitions: kafkaPartitions, ReplicationFactor: 1})
	}
	res, err := cl.CreateTopics(ctx, &kafkago.CreateTopicsRequest{Topics: cfgs})
	if err == nil {
		for _, e := range res.Errors {
			if e != nil {
				err = e
				break
			}
		}
	}
	if err != nil {
		t.close()
		return nil, fmt.Errorf("the Kafka brokers %s: creating the topics %s.*: %w", where, prefix, err)
	}
	return t, nil
}

// kafkaCeiling writes with kafka-go's asynchronous writer, which batches
// per partition and keeps writing while answers are outstanding.
func kafkaCeiling(ctx context.Context, brokers []string, prefix string, msgs []sinks.Message) error {
	var failed atomic.Int64
	var first atomic.Value
	w := &kafkago.Writer{
		Addr: kafkago.TCP(brokers...), Balancer: kafkago.Murmur2Balancer{}, RequiredAcks: kafkago.RequireAll,
		Async: true, BatchSize: ceilingInFlight, BatchTimeout: time.Millisecond, BatchBytes: 1 << 20,
		Completion: func(ms []kafkago.Message, err error) {
			if err != nil {
				failed.Add(int64(len(ms)))
				first.CompareAndSwap(nil, err)
			}
		},
	}
	batch := make([]kafkago.Message, 0, ceilingInFlight)
	for i := range msgs {
		m := &msgs[i]
		r := kafkago.Message{Topic: prefix + "." + m.Topic, Key: []byte(m.Key), Value: m.Body}
		m.StandardHeaders(func(k, v string) { r.Headers = append(r.Headers, kafkago.Header{Key: k, Value: []byte(v)}) })
		batch = append(batch, r)
		if len(batch) == cap(batch) || i == len(msgs)-1 {
			if err := w.WriteMessages(ctx, batch...); err != nil {
				_ = w.Close()
				return err
			}
			batch = make([]kafkago.Message, 0, ceilingInFlight)
		}
	}
	if err := w.Close(); err != nil { // waits for every answer
		return err
	}
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d records failed, the first with %v", n, first.Load())
	}
	return nil
}

// kafkaStored adds up the end offsets of the topics' partitions.
func kafkaStored(ctx context.Context, cl *kafkago.Client, topics []string) (int64, error) {
	req := &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{}}
	for _, t := range topics {
		for p := range kafkaPartitions {
			req.Topics[t] = append(req.Topics[t], kafkago.LastOffsetOf(p))
		}
	}
	res, err := cl.ListOffsets(ctx, req)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, ps := range res.Topics {
		for _, p := range ps {
			if p.Error != nil {
				return 0, p.Error
			}
			n += p.LastOffset
		}
	}
	return n, nil
}
