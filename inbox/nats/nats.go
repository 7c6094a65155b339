// Package nats is the NATS JetStream inbox source: a durable pull consumer
// of one stream (nats.go) that stores what it receives in the inbox and
// acknowledges each message only once its insert committed.
//
// The durable consumer is used as it exists; when the stream has none of
// that name, the source creates it with explicit acknowledgements,
// delivering the whole stream from its start. A message that is not
// acknowledged within the consumer's ack wait (30 s when the source created
// it) is delivered again, and the repeat is a duplicate. When a session
// starts and the durable has such messages (a consumer died, or this one's
// connection dropped, before storing them), the source resets the durable
// to its ack floor so that they come again at once and in stream order,
// not after the ack wait behind the messages that followed them. A message that can
// never be stored (not JSON, a template's header missing) is terminated:
// JetStream does not deliver it again.
//
// The message id is the Nats-Msg-Id header, else stream/sequence (the
// message's sequence in the stream, the same on every delivery).
//
// Templates read the message's headers, and, when no header has the name,
// subject, stream and sequence.
//
// The connection reconnects by itself; while the server is away the source
// waits and tries again (250 ms doubling to 10 s), and logs once.
package nats

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/sinks/tracing"
)

// Config is one NATS source.
type Config struct {
	inbox.Broker
	// URL is nats://host:4222 (a comma-separated list for a cluster).
	URL     string
	Stream  string
	Durable string

	// ackWait is the ack wait of a durable the source creates (default
	// 30 s; tests shorten it).
	ackWait time.Duration
}

// Consumer is one durable consumer.
type Consumer struct {
	cfg  Config
	loop inbox.Loop
	// resetFailing: the last reset failed (logged once until one works).
	resetFailing bool
}

var _ inbox.Consumer = (*Consumer)(nil)

// New checks the configuration; Start connects.
func New(cfg Config) (*Consumer, error) {
	if err := cfg.Check("nats"); err != nil {
		return nil, err
	}
	for _, part := range strings.Split(cfg.URL, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss") {
			return nil, fmt.Errorf("url: %q is not a NATS URL; write nats://host:4222 (tls:// for TLS)", part)
		}
	}
	if cfg.Stream == "" || cfg.Durable == "" {
		return nil, errors.New("stream and durable: the stream and the durable consumer's name are required")
	}
	if cfg.ackWait <= 0 {
		cfg.ackWait = 30 * time.Second
	}
	return &Consumer{cfg: cfg}, nil
}

// Source is the source's name.
func (c *Consumer) Source() string { return c.cfg.Mapping.Source }

// Start consumes in the background until Stop.
func (c *Consumer) Start() error { return c.loop.Start(c.run) }

// Stop drains (see inbox.Consumer): the messages already pulled are stored
// and acknowledged too.
func (c *Consumer) Stop(ctx context.Context) error { return c.loop.Stop(ctx) }

var errReconnected = errors.New("the connection to NATS was re-established")

// gather is how long the consumer waits for more messages once it has one.
const gather = 2 * time.Millisecond

func (c *Consumer) run(consume, hard context.Context) {
	log := c.cfg.Log.With("source", c.Source(), "stream", c.cfg.Stream, "durable", c.cfg.Durable)
	// A reconnect ends the session (the message iterator would carry on by
	// itself): the next session starts with the reset that brings back, in
	// order, what was delivered before the break and never acknowledged.
	reconnected := make(chan struct{}, 1)
	nc, err := natsgo.Connect(c.cfg.URL, natsgo.Name("queuebox inbox "+c.Source()), natsgo.RetryOnFailedConnect(true),
		natsgo.MaxReconnects(-1), natsgo.ReconnectWait(500*time.Millisecond), natsgo.NoCallbacksAfterClientClose(),
		natsgo.ReconnectHandler(func(*natsgo.Conn) {
			select {
			case reconnected <- struct{}{}:
			default:
			}
		}))
	if err != nil {
		log.Error("inbox: the NATS source cannot connect", "error", err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Error("inbox: the NATS source cannot use JetStream", "error", err)
		return
	}
	reconnect := inbox.NewReconnect(log, "inbox: the NATS source cannot consume; retrying")
	for consume.Err() == nil {
		err := c.session(consume, hard, nc, js, reconnected, reconnect.Consuming)
		if err == nil || errors.Is(err, inbox.ErrStoppedByHook) || consume.Err() != nil {
			return
		}
		if errors.Is(err, errReconnected) {
			continue // a new session at once, which resets the durable
		}
		if !reconnect.Failed(consume, err) {
			return
		}
	}
}

// session consumes through one message iterator until it fails (an error)
// or consume ends (nil, after the messages already pulled are stored).
func (c *Consumer) session(consume, hard context.Context, nc *natsgo.Conn, js jetstream.JetStream, reconnected <-chan struct{}, connected func()) error {
	select { // a reconnect before this session is made up for by its reset
	case <-reconnected:
	default:
	}
	ctx, cancel := context.WithTimeout(consume, 10*time.Second)
	cons, err := js.Consumer(ctx, c.cfg.Stream, c.cfg.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		cons, err = js.CreateConsumer(ctx, c.cfg.Stream, jetstream.ConsumerConfig{
			Durable: c.cfg.Durable, AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
			AckWait: c.cfg.ackWait, Description: "QueueBox inbox source " + c.Source(),
		})
	}
	if err == nil {
		err = c.resetUnacknowledged(ctx, js, cons)
	}
	cancel()
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("the stream %q does not exist (create it, or fix inbox.sources.%s.stream): %w", c.cfg.Stream, c.Source(), err)
		}
		return err
	}
	// A reconnect ends the session where a reset can make up for what
	// it lost: the messages that were on their way are gone, and those
	// after them must not be stored first. nc's reconnect count moves
	// before anything arrives over the new connection, so a message
	// received while it has not moved came before the break.
	watch := !c.resetFailing
	reconnects := nc.Stats().Reconnects
	moved := func() bool { return watch && nc.Stats().Reconnects != reconnects }
	subs := nc.NumSubscriptions()
	it, err := cons.Messages(jetstream.PullMaxMessages(2 * c.cfg.MaxBatch))
	if err != nil {
		return err
	}
	defer func() {
		it.Stop()
		// The iterator's UNSUB is queued on this connection when its
		// subscription goes: wait for that (briefly), so that the next
		// session's reset reaches the server after it, and no message
		// the reset sends goes to the dead pull.
		for end := time.Now().Add(time.Second); nc.NumSubscriptions() > subs && time.Now().Before(end); {
			time.Sleep(5 * time.Millisecond)
		}
	}()
	// sess ends with consume, or (watched) when the connection is
	// re-established: that wakes a Next that waits.
	sess, endSess := context.WithCancel(consume)
	defer endSess()
	if watch {
		go func() {
			select {
			case <-reconnected:
				endSess()
			case <-sess.Done():
			}
		}()
	}
	connected()
	draining := false
	batch := make([]jetstream.Msg, 0, c.cfg.MaxBatch)
	for {
		batch = batch[:0]
		var m jetstream.Msg
		if draining {
			m, err = it.Next(jetstream.NextMaxWait(100 * time.Millisecond))
		} else {
			m, err = it.Next(jetstream.NextContext(sess))
		}
		switch {
		case err == nil:
		case !draining && consume.Err() != nil:
			// Stop: pull nothing more, and store what is already here.
			it.Drain()
			draining = true
			continue
		case !draining && sess.Err() != nil:
			return errReconnected
		case draining:
			return nil // the buffer is empty (or timed out): done
		default:
			return err
		}
		if !draining && moved() {
			return errReconnected // m is left to the reset
		}
		batch = append(batch, m)
		broke := false
		for len(batch) < c.cfg.MaxBatch {
			m, err := it.Next(jetstream.NextMaxWait(gather))
			if err != nil {
				break
			}
			if !draining && moved() {
				broke = true // m and what follows are left to the reset
				break
			}
			batch = append(batch, m)
		}
		if err := c.handle(hard, batch); err != nil {
			return err
		}
		if broke || !draining && consume.Err() == nil && sess.Err() != nil {
			return errReconnected
		}
	}
}

// resetUnacknowledged puts the durable back at its ack floor when it has
// messages delivered and not acknowledged: those of a replica that died, or
// of this one's previous session, before they were stored. Without it they
// would come again only after the ack wait, behind the messages that
// followed them, and be received out of the stream's order. After the
// reset the durable delivers again from the first message not
// acknowledged, in stream order; those already stored are duplicates.
// With several replicas on one durable, the messages in flight at the
// others come again too (duplicates; the order between replicas was never
// kept). A reset that fails (a server older than 2.14, a user not allowed
// the request, no answer within resetTimeout) is logged once until one
// works, and the source consumes anyway: such messages then wait for the
// ack wait as before.
func (c *Consumer) resetUnacknowledged(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer) error {
	info := cons.CachedInfo()
	if info == nil || info.NumAckPending == 0 {
		return nil
	}
	// A server that does not know the request, or a user who may not send
	// it, may leave it unanswered: the reset gets a few seconds of its own.
	rctx, cancel := context.WithTimeout(ctx, resetTimeout)
	defer cancel()
	_, err := js.ResetConsumer(rctx, c.cfg.Stream, c.cfg.Durable)
	switch {
	case err == nil:
		c.resetFailing = false
		c.cfg.Log.Info("inbox: the NATS durable had messages delivered and not acknowledged; delivering again from the first of them, in stream order",
			"source", c.Source(), "stream", c.cfg.Stream, "durable", c.cfg.Durable, "unacknowledged", info.NumAckPending)
		return nil
	case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound), ctx.Err() != nil:
		return err
	default:
		// Consume anyway: the messages come again after the ack wait.
		if !c.resetFailing {
			c.resetFailing = true
			c.cfg.Log.Warn("inbox: the NATS durable could not be reset; messages delivered and not acknowledged come again after the ack wait, after those that followed them (the reset needs nats-server 2.14 or later, and a user allowed to publish to $JS.API.CONSUMER.RESET.>)",
				"source", c.Source(), "stream", c.cfg.Stream, "durable", c.cfg.Durable, "error", err)
		}
		return nil
	}
}

// resetTimeout bounds one reset request.
const resetTimeout = 3 * time.Second

// handle stores a batch, then acknowledges it; refused messages are
// terminated.
func (c *Consumer) handle(ctx context.Context, batch []jetstream.Msg) error {
	msgs := make([]dialects.InboxMessage, 0, len(batch))
	keep := make([]jetstream.Msg, 0, len(batch))
	receipts := make([]*tracing.Receipt, 0, len(batch))
	for _, jm := range batch {
		r := received(jm)
		m, receipt, err := c.cfg.Mapping.Receive(ctx, r)
		if err != nil {
			c.cfg.Storer.Reject(r.MessageID, err)
			_ = jm.Term()
			continue
		}
		msgs, keep, receipts = append(msgs, m), append(keep, jm), append(receipts, receipt)
	}
	refused, err := c.cfg.StoreBatch(ctx, msgs, receipts)
	if err != nil {
		return err
	}
	for i, jm := range keep {
		if slices.Contains(refused, i) {
			_ = jm.Term()
			continue
		}
		// An acknowledgement that is lost only makes the message come
		// again after the ack wait, as a duplicate.
		_ = jm.Ack()
	}
	return nil
}

// received reads a message as the inbox sees it.
func received(m jetstream.Msg) inbox.Received {
	h := m.Headers()
	headers := make(map[string]string, len(h))
	for k, vs := range h {
		headers[k] = strings.Join(vs, ", ")
	}
	props := map[string]string{"subject": m.Subject()}
	id := h.Get(jetstream.MsgIDHeader)
	if md, err := m.Metadata(); err == nil {
		props["stream"], props["sequence"] = md.Stream, strconv.FormatUint(md.Sequence.Stream, 10)
		if id == "" {
			id = md.Stream + "/" + props["sequence"]
		}
	}
	return inbox.Received{MessageID: id, Body: m.Data(), Headers: headers, Lookup: func(name string) (string, bool) {
		if v, ok := inbox.LookupFold(headers, name); ok {
			return v, true
		}
		v, ok := props[name]
		return v, ok && v != ""
	}}
}
