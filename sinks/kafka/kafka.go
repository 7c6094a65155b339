// Package kafka is the Kafka destination (segmentio/kafka-go).
//
// Each row becomes one record: the key is the row's key (no key for an
// unkeyed row), the value is the body, the headers are the row's and
// QueueBox's (QueueBox's win). The topic is a template. The partitioner
// decides the partition from the key: murmur2 as the Java client does (so
// that QueueBox and Java producers put a key in the same partition), or
// FNV-1a; unkeyed records are spread.
//
// Order. One key always maps to one partition, and the sink hands a key's
// run to the writer as consecutive messages of one call, which kafka-go
// writes to that partition in order, one produce request after another. A
// call is split where the topic changes, and the sink waits for each part's
// acknowledgement before it writes the next, so that a failure (an unknown
// topic, a broker that went away) stops the call: the messages after it are
// not written. The one exception is a run that does not fit one produce
// request (over MaxOrderedBatch records or BatchBytes together with what
// other calls put in the same batch): kafka-go then writes it as two
// requests, one after the other, and if the first fails
// after its retries while the second succeeds, the second's messages are
// reported failed too, so that they are written again after the first
// (duplicates, with the same X-Message-Id, but the key's last copies in
// order).
//
// A delivery succeeds when the partition's leader acknowledged it with the
// configured acks (all: every in-sync replica has it; one: the leader
// alone). kafka-go has no idempotent producer: a produce whose answer was
// lost is written again, which is at-least-once like everything else.
package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
)

// Config is a compiled Kafka destination.
type Config struct {
	Brokers []string
	Topic   *routing.Template
	// Acks is "all" or "one".
	Acks string
	// Compression is none, gzip, snappy, lz4 or zstd.
	Compression string
	// Partitioner is murmur2 (as the Java client) or fnv1a.
	Partitioner string
	SASL        SASL
	TLS         TLS
	// Timeout bounds one Publish. Default 10 s.
	Timeout time.Duration
	// BatchTimeout is how long the writer waits to fill a produce request
	// before it sends a partial one. Default 2 ms.
	BatchTimeout time.Duration
}

// SASL is the authentication; an empty Mechanism is none.
type SASL struct {
	Mechanism string // PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
	Username  string
	Password  string
}

// TLS is transport encryption.
type TLS struct {
	Enabled            bool
	CAFile             string
	InsecureSkipVerify bool
}

// MaxMessageBytes is the largest record (key, value and headers) the sink
// writes: the default message.max.bytes of Kafka brokers, and kafka-go's
// limit on one produce request.
const MaxMessageBytes = 1 << 20

// MaxOrderedBatch is how many records of one key a call may carry, and
// how many records one produce request to a partition holds at most: a
// key's run then fits one request unless other keys' records fill part of
// it. kafka-go allocates room for that many records for every batch it
// starts (a partition starts one per BatchTimeout while records flow), so
// a larger figure costs memory and collection for every batch, not just
// the large ones: 10,000 made the writer's allocations more than half of a
// relay's CPU.
const MaxOrderedBatch = 128

// Sink produces to Kafka.
type Sink struct {
	cfg     Config
	w       *kafkago.Writer
	brokers string // for errors
	// produced: a produce succeeded, so the login and the transport work
	// (a connection closed later is not blamed on them).
	produced atomic.Bool
	// asking maps the id of a message being written to the collector of
	// its Publish call, while the caller collects answers (the partition
	// and offset come to the writer's Completion, not to the call); asked
	// counts them, so that Completion looks only while some do.
	asking sync.Map
	asked  atomic.Int64
}

// New builds the writer; it connects on first use.
func New(cfg Config) (*Sink, error) {
	if len(cfg.Brokers) == 0 {
		return nil, sinks.Configf("brokers", "at least one host:port is required")
	}
	for _, b := range cfg.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return nil, sinks.Configf("brokers", "%q is not host:port", b)
		}
	}
	if cfg.Topic == nil {
		return nil, errors.New("the topic template is required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.BatchTimeout <= 0 {
		cfg.BatchTimeout = 2 * time.Millisecond
	}
	s := &Sink{}
	w := &kafkago.Writer{
		Completion:      s.completed,
		Addr:            kafkago.TCP(cfg.Brokers...),
		MaxAttempts:     3,
		WriteBackoffMin: 100 * time.Millisecond,
		WriteBackoffMax: time.Second,
		BatchSize:       MaxOrderedBatch,
		BatchBytes:      MaxMessageBytes,
		BatchTimeout:    cfg.BatchTimeout,
		ReadTimeout:     cfg.Timeout,
		WriteTimeout:    cfg.Timeout,
	}
	switch cfg.Acks {
	case "all", "":
		w.RequiredAcks = kafkago.RequireAll
	case "one":
		w.RequiredAcks = kafkago.RequireOne
	default:
		return nil, sinks.Configf("acks", "%q: use all or one", cfg.Acks)
	}
	switch cfg.Compression {
	case "none", "":
	case "gzip":
		w.Compression = kafkago.Gzip
	case "snappy":
		w.Compression = kafkago.Snappy
	case "lz4":
		w.Compression = kafkago.Lz4
	case "zstd":
		w.Compression = kafkago.Zstd
	default:
		return nil, sinks.Configf("compression", "%q: use none, gzip, snappy, lz4 or zstd", cfg.Compression)
	}
	switch cfg.Partitioner {
	case "murmur2", "":
		w.Balancer = kafkago.Murmur2Balancer{}
	case "fnv1a":
		w.Balancer = &kafkago.Hash{}
	default:
		return nil, sinks.Configf("partitioner", "%q: use murmur2 or fnv1a", cfg.Partitioner)
	}
	tr := &kafkago.Transport{
		Dial:        (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		DialTimeout: cfg.Timeout,
		IdleTimeout: 5 * time.Minute,
		MetadataTTL: 10 * time.Second,
		ClientID:    "queuebox",
	}
	var err error
	if tr.SASL, err = Mechanism(cfg.SASL); err != nil {
		return nil, err
	}
	if tr.TLS, err = TLSConfig(cfg.TLS); err != nil {
		return nil, err
	}
	w.Transport = tr
	s.cfg, s.w, s.brokers = cfg, w, strings.Join(cfg.Brokers, ",")
	return s, nil
}

// completed hears the writer's produce results: while callers collect
// answers, the partition and offset of each of their messages (found by
// its X-Message-Id header).
func (s *Sink) completed(msgs []kafkago.Message, err error) {
	if err != nil || s.asked.Load() == 0 {
		return
	}
	for i := range msgs {
		m := &msgs[i]
		for _, h := range m.Headers {
			if h.Key != "X-Message-Id" {
				continue
			}
			if a, ok := s.asking.Load(string(h.Value)); ok {
				a.(*sinks.Answers).Set(string(h.Value), sinks.Answer{Status: fmt.Sprintf("topic %s partition %d offset %d", m.Topic, m.Partition, m.Offset)})
			}
			break
		}
	}
}

// ask registers the messages of a Publish call whose caller collects
// answers; the returned function forgets them.
func (s *Sink) ask(ctx context.Context, msgs []sinks.Message) func() {
	a := sinks.AnswersOf(ctx)
	if a == nil {
		return func() {}
	}
	for i := range msgs {
		s.asking.Store(msgs[i].ID, a)
	}
	s.asked.Add(int64(len(msgs)))
	return func() {
		for i := range msgs {
			s.asking.Delete(msgs[i].ID)
		}
		s.asked.Add(-int64(len(msgs)))
	}
}

// Mechanism builds the SASL mechanism of s; nil for none. The Kafka
// destination and the Kafka inbox source (inbox/kafka) share it, so that
// both accept the same settings and refuse them with the same messages: a
// refusal is a *sinks.ConfigError whose Key is sasl or sasl.mechanism.
func Mechanism(s SASL) (sasl.Mechanism, error) {
	switch s.Mechanism {
	case "":
		return nil, nil
	case "PLAIN":
		return plain.Mechanism{Username: s.Username, Password: s.Password}, nil
	case "SCRAM-SHA-256", "SCRAM-SHA-512":
		algo := scram.SHA256
		if s.Mechanism == "SCRAM-SHA-512" {
			algo = scram.SHA512
		}
		m, err := scram.Mechanism(algo, s.Username, s.Password)
		if err != nil {
			return nil, sinks.Configf("sasl", "%v", err)
		}
		return m, nil
	default:
		return nil, sinks.Configf("sasl.mechanism", "%q: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.Mechanism)
	}
}

// TLSConfig builds the TLS configuration of t; nil when TLS is off. Shared
// with the Kafka inbox source as Mechanism is; a refusal is a
// *sinks.ConfigError whose Key is tls.caFile.
func TLSConfig(t TLS) (*tls.Config, error) {
	if !t.Enabled {
		if t.CAFile != "" {
			return nil, sinks.Configf("tls.caFile", "is set but tls.enabled is false; set tls.enabled: true")
		}
		return nil, nil
	}
	c := &tls.Config{InsecureSkipVerify: t.InsecureSkipVerify, MinVersion: tls.VersionTLS12} //nolint:gosec // the user's explicit choice
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, &sinks.ConfigError{Key: "tls.caFile", Err: err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, sinks.Configf("tls.caFile", "%s holds no PEM certificate", t.CAFile)
		}
		c.RootCAs = pool
	}
	return c, nil
}

// MaxOrderedBatch lets a key actor hand over a run of one key.
func (*Sink) MaxOrderedBatch() int { return MaxOrderedBatch }

// Close flushes and closes the writer.
func (s *Sink) Close() error { return s.w.Close() }

// Publish writes msgs in order; see the package doc.
func (s *Sink) Publish(ctx context.Context, msgs []sinks.Message) []error {
	ctx, cancel, errs := sinks.Start(ctx, msgs, s.cfg.Timeout)
	defer cancel()
	defer s.ask(ctx, msgs)()

	records := sinks.Prepare(msgs, errs, s.record)
	for start := 0; start < len(records); {
		end := start + 1
		for end < len(records) && records[end].Topic == records[start].Topic {
			end++
		}
		if failed := s.write(ctx, records[start:end], errs[start:end]); failed >= 0 {
			sinks.FailFrom(errs, msgs, start+failed, errs[start+failed])
			break
		}
		start = end
	}
	return errs
}

// write produces records of one topic and returns the index of the first
// failed one, or -1.
func (s *Sink) write(ctx context.Context, records []kafkago.Message, errs []error) int {
	if err := ctx.Err(); err != nil {
		errs[0] = s.ctxError(err)
		return 0
	}
	err := s.w.WriteMessages(ctx, records...)
	if err == nil {
		s.produced.Store(true)
		return -1
	}
	var we kafkago.WriteErrors
	if errors.As(err, &we) && len(we) == len(records) {
		for i, e := range we {
			if e != nil {
				errs[i] = s.produceError(records[i].Topic, e)
				return i
			}
		}
		return -1
	}
	if ctx.Err() != nil {
		err = s.ctxError(ctx.Err())
	} else {
		err = s.produceError(records[0].Topic, err)
	}
	for i := range errs {
		errs[i] = err
	}
	return 0
}

func (s *Sink) produceError(topic string, err error) error {
	var ke kafkago.Error
	if errors.As(err, &ke) {
		return fmt.Errorf("kafka %s: topic %q: %s (%s)", s.brokers, topic, ke.Title(), ke.Description())
	}
	if s.cfg.SASL.Mechanism != "" && !s.produced.Load() && errors.Is(err, io.ErrUnexpectedEOF) {
		// A broker may refuse a SASL login by closing the connection
		// instead of answering with an error code, and a broker that
		// expects TLS closes a connection that does not speak it.
		// kafka-go's transport then reports a bare "unexpected EOF" (it
		// means to turn the first case into SASLAuthenticationFailed, but
		// its check looks for io.EOF, which its decoder has already turned
		// into io.ErrUnexpectedEOF), so say what it most likely is, as long
		// as no produce has succeeded.
		return fmt.Errorf("kafka %s: topic %q: %w: the broker closed the connection, as a broker does when it refuses the SASL login or expects TLS; check sasl.mechanism, sasl.username, sasl.password and tls.enabled", s.brokers, topic, err)
	}
	return fmt.Errorf("kafka %s: topic %q: %w", s.brokers, topic, err)
}

func (s *Sink) ctxError(err error) error {
	return sinks.ContextError(fmt.Sprintf("kafka %s", s.brokers), "acknowledgement", s.cfg.Timeout, err)
}

// record builds the Kafka record. The record's timestamp is left to the
// time of the produce (a replayed old row must not fall under the topic's
// retention at once); created_at travels in X-Created-At.
func (s *Sink) record(m *sinks.Message) (kafkago.Message, error) {
	topic, err := s.cfg.Topic.Render(m.Fields(), checkTopicValue(s.cfg.Topic))
	if err != nil {
		return kafkago.Message{}, sinks.Permanent(err)
	}
	if err := validTopic(topic); err != nil {
		return kafkago.Message{}, sinks.Permanent(fmt.Errorf("the topic template %q gave %q, which %v", s.cfg.Topic.String(), topic, err))
	}
	r := kafkago.Message{Topic: topic, Value: m.Body}
	if m.Key != "" {
		r.Key = []byte(m.Key)
	}
	standard := map[string]bool{}
	m.StandardHeaders(func(name, value string) {
		standard[name] = true
		r.Headers = append(r.Headers, kafkago.Header{Key: name, Value: []byte(value)})
	})
	names := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		if !standard[k] {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for _, k := range names {
		r.Headers = append(r.Headers, kafkago.Header{Key: k, Value: []byte(m.Headers[k])})
	}
	size := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		size += len(h.Key) + len(h.Value)
	}
	if size > MaxMessageBytes-1024 {
		return kafkago.Message{}, sinks.Permanent(fmt.Errorf("the record is %d bytes; the Kafka destination writes records up to %d bytes (the brokers' default message.max.bytes)", size, MaxMessageBytes-1024))
	}
	return r, nil
}

// checkTopicValue rejects a value that cannot be part of a topic name, and
// names it.
func checkTopicValue(t *routing.Template) func(int, string) (string, error) {
	return func(_ int, v string) (string, error) {
		for _, r := range v {
			if !topicChar(r) {
				return "", fmt.Errorf("the topic template %q would hold the value %q, which has %q; Kafka topic names allow only ASCII letters, digits, '.', '_' and '-'", t.String(), v, r)
			}
		}
		return v, nil
	}
}

func topicChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}

// validTopic applies Kafka's rules for topic names to a rendered topic.
func validTopic(t string) error {
	switch {
	case t == "":
		return errors.New("is empty")
	case t == "." || t == "..":
		return errors.New("is not allowed as a topic name")
	case len(t) > 249:
		return fmt.Errorf("is %d characters long; Kafka allows 249", len(t))
	}
	for _, r := range t {
		if !topicChar(r) {
			return fmt.Errorf("has %q; Kafka topic names allow only ASCII letters, digits, '.', '_' and '-'", r)
		}
	}
	return nil
}
