// Package kafka is the Kafka inbox source: a member of a consumer group
// (segmentio/kafka-go) reading one topic, that stores what it reads in the
// inbox and commits the offsets only once the insert committed.
//
// It fetches what has arrived (up to a batch), stores it in one
// transaction, then commits the batch's offsets, synchronously. A member
// that dies before the commit leaves the offsets where they were: the
// member that gets the partition next reads the batch again, and the
// repeats are duplicates. A record that can never be stored (not JSON, a
// template's header missing) is logged and committed past: Kafka cannot
// set one record aside, and retrying it would stop its partition for ever.
//
// The message id is the record's X-Message-Id header, else
// topic/partition/offset (a record read again has the same one).
//
// Templates read the record's headers, and, when no header has the name,
// key (the record key), topic, partition and offset.
//
// A new group starts at the oldest record of each partition. kafka-go
// reconnects by itself; broker errors are logged (the first at once, then
// at most one a minute), a refused SASL login among them.
//
// SASL and TLS are the Kafka destination's (sinks/kafka): the same
// settings, built by the same code (kafkasink.Mechanism, kafkasink.TLSConfig)
// and refused with the same messages.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/inbox"
	kafkasink "github.com/queuebox/queuebox/sinks/kafka"
	"github.com/queuebox/queuebox/sinks/tracing"
)

// Config is one Kafka source.
type Config struct {
	// Broker's AfterStore runs before the batch's offsets are committed.
	inbox.Broker
	Brokers []string
	Topic   string
	GroupID string
	// SASL (an empty mechanism is none) and TLS, as a Kafka destination's.
	SASL kafkasink.SASL
	TLS  kafkasink.TLS

	// sessionTimeout shortens the group's session (tests).
	sessionTimeout time.Duration
}

// Consumer is one group member.
type Consumer struct {
	cfg    Config
	dialer *kafkago.Dialer
	loop   inbox.Loop
}

var _ inbox.Consumer = (*Consumer)(nil)

// New checks the configuration; Start joins the group.
func New(cfg Config) (*Consumer, error) {
	if err := cfg.Check("kafka"); err != nil {
		return nil, err
	}
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("brokers: at least one host:port is required")
	}
	for _, b := range cfg.Brokers {
		if h, p, err := net.SplitHostPort(b); err != nil || h == "" || p == "" {
			return nil, fmt.Errorf("brokers: %q is not host:port", b)
		}
	}
	if cfg.Topic == "" {
		return nil, errors.New("kafkaTopic: the topic to read is required")
	}
	if cfg.GroupID == "" {
		return nil, errors.New("groupId: the consumer group is required")
	}
	// kafka-go's DefaultDialer, with the authentication and encryption.
	dialer := &kafkago.Dialer{Timeout: 10 * time.Second, DualStack: true, ClientID: "queuebox"}
	var err error
	if dialer.SASLMechanism, err = kafkasink.Mechanism(cfg.SASL); err != nil {
		return nil, err
	}
	if dialer.TLS, err = kafkasink.TLSConfig(cfg.TLS); err != nil {
		return nil, err
	}
	return &Consumer{cfg: cfg, dialer: dialer}, nil
}

// Source is the source's name.
func (c *Consumer) Source() string { return c.cfg.Mapping.Source }

// Start reads in the background until Stop.
func (c *Consumer) Start() error { return c.loop.Start(c.run) }

// Stop drains (see inbox.Consumer) and leaves the group.
func (c *Consumer) Stop(ctx context.Context) error { return c.loop.Stop(ctx) }

// gather is how long the consumer waits for more records once it has one:
// records that arrive together are stored together.
const gather = 2 * time.Millisecond

func (c *Consumer) run(consume, hard context.Context) {
	log := c.cfg.Log.With("source", c.Source(), "topic", c.cfg.Topic, "group", c.cfg.GroupID)
	errs := &throttled{log: log}
	rc := kafkago.ReaderConfig{
		Brokers: c.cfg.Brokers, GroupID: c.cfg.GroupID, Topic: c.cfg.Topic, Dialer: c.dialer,
		MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 250 * time.Millisecond,
		CommitInterval: 0, // synchronous commits: the commit is the acknowledgement
		StartOffset:    kafkago.FirstOffset,
		ErrorLogger:    kafkago.LoggerFunc(errs.printf),
	}
	if c.cfg.sessionTimeout > 0 {
		rc.SessionTimeout, rc.HeartbeatInterval = c.cfg.sessionTimeout, c.cfg.sessionTimeout/4
		rc.RebalanceTimeout = c.cfg.sessionTimeout
	}
	r := kafkago.NewReader(rc)
	defer r.Close()
	delay := inbox.ReconnectDelay()
	batch := make([]kafkago.Message, 0, c.cfg.MaxBatch)
	for {
		batch = batch[:0]
		m, err := r.FetchMessage(consume)
		if err != nil {
			if consume.Err() != nil || errors.Is(err, io.EOF) {
				return
			}
			errs.printf("fetch: %v", err)
			if !inbox.Sleep(consume, delay.Next()) {
				return
			}
			continue
		}
		delay.Reset()
		batch = append(batch, m)
		for len(batch) < c.cfg.MaxBatch {
			gctx, cancel := context.WithTimeout(consume, gather)
			m, err := r.FetchMessage(gctx)
			cancel()
			if err != nil {
				break
			}
			batch = append(batch, m)
		}
		if err := c.handle(hard, r, batch); err != nil {
			if hard.Err() == nil && !errors.Is(err, inbox.ErrStoppedByHook) {
				log.Warn("inbox: committing Kafka offsets failed; the records are read again (duplicates)", "error", err)
			}
			if errors.Is(err, inbox.ErrStoppedByHook) || hard.Err() != nil {
				return
			}
		}
	}
}

// handle stores a batch, then commits its offsets.
func (c *Consumer) handle(ctx context.Context, r *kafkago.Reader, batch []kafkago.Message) error {
	msgs := make([]dialects.InboxMessage, 0, len(batch))
	receipts := make([]*tracing.Receipt, 0, len(batch))
	for i := range batch {
		rec := received(&batch[i])
		m, receipt, err := c.cfg.Mapping.Receive(ctx, rec)
		if err != nil {
			c.cfg.Storer.Reject(rec.MessageID, err)
			continue
		}
		msgs, receipts = append(msgs, m), append(receipts, receipt)
	}
	// Refused records are committed past, as records that do not map are.
	if _, err := c.cfg.StoreBatch(ctx, msgs, receipts); err != nil {
		return err
	}
	return r.CommitMessages(ctx, batch...)
}

// received reads a record as the inbox sees it.
func received(m *kafkago.Message) inbox.Received {
	headers := make(map[string]string, len(m.Headers))
	for _, h := range m.Headers {
		headers[h.Key] = string(h.Value)
	}
	id, ok := inbox.LookupFold(headers, "X-Message-Id")
	if !ok || id == "" {
		id = fmt.Sprintf("%s/%d/%d", m.Topic, m.Partition, m.Offset)
	}
	props := map[string]string{"topic": m.Topic, "partition": strconv.Itoa(m.Partition), "offset": strconv.FormatInt(m.Offset, 10)}
	if m.Key != nil {
		props["key"] = string(m.Key)
	}
	return inbox.Received{MessageID: id, Body: m.Value, Headers: headers, Lookup: func(name string) (string, bool) {
		if v, ok := inbox.LookupFold(headers, name); ok {
			return v, true
		}
		v, ok := props[name]
		return v, ok && v != ""
	}}
}

// throttled logs kafka-go's errors: the first at once, then at most one a
// minute with how many were left out.
type throttled struct {
	log     *slog.Logger
	mu      sync.Mutex
	last    time.Time
	skipped int
}

func (t *throttled) printf(format string, args ...any) {
	t.mu.Lock()
	now := time.Now()
	if !t.last.IsZero() && now.Sub(t.last) < time.Minute {
		t.skipped++
		t.mu.Unlock()
		return
	}
	skipped := t.skipped
	t.last, t.skipped = now, 0
	t.mu.Unlock()
	t.log.Warn("inbox: the Kafka source met an error; it keeps trying", "error", fmt.Sprintf(format, args...), "errorsSinceLastLine", skipped)
}
