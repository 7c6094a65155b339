// Package rabbitmq is the RabbitMQ inbox source: a consumer of one queue
// (AMQP 0-9-1, amqp091-go) that stores what it receives in the inbox and
// acknowledges each message only once its insert committed.
//
// It consumes with manual acknowledgements and a prefetch window, takes
// what has arrived (up to a batch) and stores it in one transaction. A
// duplicate counts as committed and is acknowledged. A message that can
// never be stored (not JSON, a template's header missing) is rejected
// without requeue, so that the queue's dead-letter exchange, when it has
// one, keeps it; requeueing it would deliver it again for ever.
//
// The message id is the AMQP message_id property. A message without one
// gets a new id, so a redelivery of it cannot be told from a new message:
// publishers should set message_id (the consumer says so in the log, once).
//
// Templates read the message's headers table, and, when the table has no
// such name, the properties type, app_id, correlation_id, user_id and
// content_type, and the delivery's exchange and routing_key.
//
// The queue is not declared: it belongs to whoever publishes to it. A
// missing queue, a refused login or a broker that went away is logged and
// retried with backoff (250 ms doubling to 10 s); messages taken but not
// acknowledged when a connection breaks go back to the queue, and the
// repeat is a duplicate.
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/sinks/tracing"
)

// Config is one RabbitMQ source.
type Config struct {
	// Broker's AfterStore, when it fails, ends the consumer with the
	// connection closed and the batch unacknowledged.
	inbox.Broker
	// URL is amqp:// or amqps://, with credentials and vhost.
	URL   string
	Queue string
	// Prefetch is how many unacknowledged messages the broker hands over
	// at once (default 256).
	Prefetch int
}

// Consumer consumes one queue.
type Consumer struct {
	cfg  Config
	addr string
	loop inbox.Loop
	// warnedNoID: a message without message_id was logged once.
	warnedNoID atomic.Bool
}

var _ inbox.Consumer = (*Consumer)(nil)

// New checks the configuration; Start connects.
func New(cfg Config) (*Consumer, error) {
	if err := cfg.Check("rabbitmq"); err != nil {
		return nil, err
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "" {
		return nil, fmt.Errorf("url: want amqp://user:password@host:5672/vhost or amqps://")
	}
	if _, err := amqp.ParseURI(cfg.URL); err != nil {
		return nil, fmt.Errorf("url: %v", err)
	}
	if cfg.Queue == "" {
		return nil, errors.New("queue: the queue to consume is required")
	}
	if cfg.Prefetch <= 0 {
		cfg.Prefetch = 256
	}
	return &Consumer{cfg: cfg, addr: u.Host}, nil
}

// Source is the source's name.
func (c *Consumer) Source() string { return c.cfg.Mapping.Source }

// Start consumes in the background until Stop.
func (c *Consumer) Start() error { return c.loop.Start(c.run) }

// Stop drains (see inbox.Consumer).
func (c *Consumer) Stop(ctx context.Context) error { return c.loop.Stop(ctx) }

// run connects and consumes until consume ends, reconnecting after a
// failure.
func (c *Consumer) run(consume, hard context.Context) {
	log := c.cfg.Log.With("source", c.Source(), "queue", c.cfg.Queue, "broker", c.addr)
	reconnect := inbox.NewReconnect(log, "inbox: the RabbitMQ source lost its broker; reconnecting")
	for consume.Err() == nil {
		err := c.session(consume, hard, reconnect.Consuming)
		if errors.Is(err, inbox.ErrStoppedByHook) || consume.Err() != nil {
			return
		}
		if !reconnect.Failed(consume, err) {
			return
		}
	}
}

// session is one connection: it consumes until the connection or channel
// breaks (an error) or consume ends (nil, after the last batch).
func (c *Consumer) session(consume, hard context.Context, connected func()) error {
	conn, err := amqp.DialConfig(c.cfg.URL, amqp.Config{
		Heartbeat:  10 * time.Second,
		Properties: amqp.Table{"connection_name": "queuebox inbox " + c.Source()},
	})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return err
	}
	tag := "queuebox-" + uuid.NewString()
	deliveries, err := ch.Consume(c.cfg.Queue, tag, false, false, false, false, nil)
	if err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return fmt.Errorf("the queue %q does not exist (declare it, or fix inbox.sources.%s.queue): %w", c.cfg.Queue, c.Source(), err)
		}
		return err
	}
	connected()
	batch := make([]amqp.Delivery, 0, c.cfg.MaxBatch)
	for {
		batch = batch[:0]
		select {
		case <-consume.Done():
			_ = ch.Cancel(tag, false)
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return fmt.Errorf("the channel closed: %w", closeReason(conn))
			}
			batch = append(batch, d)
		}
	more:
		for len(batch) < c.cfg.MaxBatch {
			select {
			case d, ok := <-deliveries:
				if !ok {
					break more
				}
				batch = append(batch, d)
			default:
				break more
			}
		}
		if err := c.handle(hard, batch); err != nil {
			return err
		}
	}
}

func closeReason(conn *amqp.Connection) error {
	if conn.IsClosed() {
		return errors.New("the connection is closed")
	}
	return errors.New("the broker closed the channel")
}

// handle stores a batch, then acknowledges it; refused messages are
// rejected without requeue.
func (c *Consumer) handle(ctx context.Context, batch []amqp.Delivery) error {
	msgs := make([]dialects.InboxMessage, 0, len(batch))
	keep := make([]amqp.Delivery, 0, len(batch))
	receipts := make([]*tracing.Receipt, 0, len(batch))
	for i := range batch {
		d := &batch[i]
		m, receipt, err := c.cfg.Mapping.Receive(ctx, c.received(d))
		if err != nil {
			c.cfg.Storer.Reject(d.MessageId, err)
			if err := d.Reject(false); err != nil {
				return err
			}
			continue
		}
		msgs, keep, receipts = append(msgs, m), append(keep, *d), append(receipts, receipt)
	}
	refused, err := c.cfg.StoreBatch(ctx, msgs, receipts)
	if err != nil {
		return err // stopped hard, or by a test's hook: the broker gets them back
	}
	for i := range keep {
		if slices.Contains(refused, i) {
			if err := keep[i].Reject(false); err != nil {
				return err
			}
			continue
		}
		if err := keep[i].Ack(false); err != nil {
			// The connection broke after the commit: the broker delivers
			// the message again, and the repeat is a duplicate.
			return err
		}
	}
	return nil
}

// received reads a delivery as the inbox sees it.
func (c *Consumer) received(d *amqp.Delivery) inbox.Received {
	id := d.MessageId
	if id == "" {
		id = uuid.NewString()
		if c.warnedNoID.CompareAndSwap(false, true) {
			c.cfg.Log.Warn("inbox: a RabbitMQ message has no message_id, so a redelivery of it cannot be told from a new message; set message_id when publishing",
				"source", c.Source(), "queue", c.cfg.Queue)
		}
	}
	headers := make(map[string]string, len(d.Headers))
	for k, v := range d.Headers {
		headers[k] = headerText(v)
	}
	props := map[string]string{
		"type": d.Type, "app_id": d.AppId, "correlation_id": d.CorrelationId, "user_id": d.UserId,
		"content_type": d.ContentType, "exchange": d.Exchange, "routing_key": d.RoutingKey,
	}
	return inbox.Received{MessageID: id, Body: d.Body, Headers: headers, Lookup: func(name string) (string, bool) {
		if v, ok := inbox.LookupFold(headers, name); ok {
			return v, true
		}
		v, ok := props[name]
		return v, ok && v != ""
	}}
}

// headerText writes an AMQP header value as text.
func headerText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}
