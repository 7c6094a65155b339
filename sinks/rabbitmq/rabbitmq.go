// Package rabbitmq is the RabbitMQ destination (AMQP 0-9-1, amqp091-go).
//
// Every message is published persistent, with publisher confirms: a
// delivery succeeds only on the broker's ack. A mandatory message that the
// broker cannot route comes back as basic.return (312 NO_ROUTE) and its
// confirm is still an ack: the return is what makes it a failed delivery, so
// the sink matches returns to their messages (by message_id, within the
// call that published them).
//
// Concurrency and order. The sink keeps one connection and a pool of
// channels in confirm mode. Each Publish takes a channel of its own for the
// whole call, so a call's messages go out in order on one channel, and calls
// of different keys run side by side on different channels. Within a call,
// consecutive messages to the same exchange and routing key are pipelined
// (published without waiting, confirmed together); before a message to
// another address, the sink waits for the confirms of those before it. The
// reason: a return or a nack is learnt only after the fact, and a message
// after it that went to the same address met the same fate, whereas one to
// another address could have been delivered ahead of the failed one. At the
// first failure the call stops: the messages after it are not published
// (or, when already pipelined behind it, are reported failed too, so that
// they are retried after it, with the same message_id).
//
// A channel error (an exchange that does not exist: 404 NOT_FOUND) closes
// only the channel of that call; a connection error (the broker restarted,
// or closed connections) fails the calls in progress, which the engine
// retries, and the next call dials again. Every call is bounded by the
// configured timeout, including a connection whose writes block (the
// broker's memory or disk alarm).
package rabbitmq

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
)

// Config is a compiled RabbitMQ destination.
type Config struct {
	// URL is amqp:// or amqps://, with credentials and vhost.
	URL string
	// Exchange is the exchange template; exchangeFrom: aggregate_type is
	// the template {{ aggregateType }}.
	Exchange *routing.Template
	// RoutingKey is the routing key template (default {{ topic }}).
	RoutingKey *routing.Template
	// Mandatory makes an unroutable message a failed delivery.
	Mandatory bool
	// DeclareExchange declares each exchange (durable, topic) before its
	// first publish on a connection.
	DeclareExchange bool
	// Timeout bounds one Publish: getting a connection and channel,
	// publishing, and the broker's confirms. Default 10 s.
	Timeout time.Duration
	// Channels is how many channels (concurrent calls) one connection
	// holds at most. Default 256.
	Channels int
	// Name shows in the broker's connection list.
	Name string
	// TLS is used for amqps:// (nil: the system's roots).
	TLS *tls.Config
}

// MaxOrderedBatch is how many messages of one key a call may carry: the
// pipeline depth on one channel, and the size of the channel's return
// buffer (which must hold every return of a call until it is read).
const MaxOrderedBatch = 256

// Sink publishes to RabbitMQ.
type Sink struct {
	cfg  Config
	addr string // host:port, for errors (never the credentials)

	dial    chan struct{} // a one-slot lock that honours ctx
	session atomic.Pointer[session]
	// lastDial remembers a failed dial for a moment, so that a broker that
	// is down costs one attempt per moment, not one per waiting call.
	lastDial struct {
		at  time.Time
		err error
	}
	closed atomic.Bool
}

// New checks the configuration; the sink connects on its first Publish, so
// that a broker that is down at start-up is retried like any other failure.
func New(cfg Config) (*Sink, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "" {
		return nil, sinks.Configf("url", "want amqp://user:password@host:5672/vhost or amqps://")
	}
	if _, err := amqp.ParseURI(cfg.URL); err != nil {
		return nil, sinks.Configf("url", "%v", err)
	}
	if cfg.Exchange == nil || cfg.RoutingKey == nil {
		return nil, errors.New("the exchange and routing key templates are required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Channels <= 0 {
		cfg.Channels = 256
	}
	if cfg.Name == "" {
		cfg.Name = "queuebox"
	}
	addr := u.Host
	if u.Port() == "" {
		port := "5672"
		if u.Scheme == "amqps" {
			port = "5671"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	return &Sink{cfg: cfg, addr: addr, dial: make(chan struct{}, 1)}, nil
}

// MaxOrderedBatch lets a key actor hand over a run of one key.
func (*Sink) MaxOrderedBatch() int { return MaxOrderedBatch }

// Close closes the connection.
func (s *Sink) Close() error {
	s.closed.Store(true)
	if sess := s.session.Swap(nil); sess != nil {
		sess.close()
	}
	return nil
}

// address is where one message goes.
type address struct{ exchange, key string }

// Publish publishes msgs in order on one channel; see the package doc.
func (s *Sink) Publish(ctx context.Context, msgs []sinks.Message) []error {
	ctx, cancel, errs := sinks.Start(ctx, msgs, s.cfg.Timeout)
	defer cancel()

	// Render every address first: a message that can never be delivered
	// ends the call before anything of it is published.
	addrs := sinks.Prepare(msgs, errs, s.render)
	n := len(addrs) // messages that may be published

	fail := func(from int, err error) {
		for j := from; j < n; j++ {
			if errs[j] == nil {
				errs[j] = err
			}
		}
	}
	if n == 0 {
		return errs
	}
	if err := ctx.Err(); err != nil {
		fail(0, s.ctxError(err))
		return errs
	}
	sess, err := s.connect(ctx)
	if err != nil {
		fail(0, err)
		return errs
	}
	ch, err := sess.acquire(ctx, s)
	if err != nil {
		fail(0, err)
		return errs
	}
	healthy := true
	defer func() { sess.release(ch, healthy) }()

	c := call{s: s, ch: ch, msgs: msgs, errs: errs, addrs: addrs}
	failedAt := -1
	for i := 0; i < n && failedAt < 0; i++ {
		if len(c.pending) > 0 && (addrs[i] != addrs[i-1] || len(c.pending) >= MaxOrderedBatch) {
			if failedAt = c.settle(ctx); failedAt >= 0 {
				break
			}
		}
		if s.cfg.DeclareExchange && addrs[i].exchange != "" && !sess.declared(addrs[i].exchange) {
			// Confirms outstanding on this channel must not be mixed with
			// an RPC that may close it: settle them first.
			if failedAt = c.settle(ctx); failedAt >= 0 {
				break
			}
			if err := ch.ch.ExchangeDeclare(addrs[i].exchange, "topic", true, false, false, false, nil); err != nil {
				errs[i] = fmt.Errorf("rabbitmq %s: declaring the exchange %q: %v", s.addr, addrs[i].exchange, ch.reason(err))
				failedAt = i
				break
			}
			sess.markDeclared(addrs[i].exchange)
		}
		dc, err := ch.ch.PublishWithDeferredConfirmWithContext(ctx, addrs[i].exchange, addrs[i].key, s.cfg.Mandatory, false, publishing(&msgs[i]))
		if err != nil {
			if ctx.Err() != nil {
				errs[i] = s.ctxError(ctx.Err())
			} else {
				errs[i] = fmt.Errorf("rabbitmq %s: publish: %v", s.addr, ch.reason(err))
			}
			failedAt = i
			break
		}
		c.pending = append(c.pending, pending{i: i, dc: dc})
	}
	// What is still pending was published before the failure (if any) or
	// pipelined behind it; either way its confirms must be read, so that the
	// channel is clean for the next call.
	if f := c.settle(ctx); f >= 0 && (failedAt < 0 || f < failedAt) {
		failedAt = f
	}
	if failedAt >= 0 {
		sinks.FailFrom(errs, msgs, failedAt, errs[failedAt])
	}
	healthy = !c.broken && !ch.closed() && ctx.Err() == nil
	return errs
}

func (s *Sink) ctxError(err error) error {
	return sinks.ContextError(fmt.Sprintf("rabbitmq %s", s.addr), "confirm", s.cfg.Timeout, err)
}

type pending struct {
	i  int
	dc *amqp.DeferredConfirmation
}

// call is the state of one Publish.
type call struct {
	s       *Sink
	ch      *channel
	msgs    []sinks.Message
	errs    []error
	addrs   []address
	pending []pending
	// returned holds the returns read so far, by message id.
	returned map[string]amqp.Return
	// broken: confirms may still be outstanding (a timeout): the channel
	// must not serve another call.
	broken bool
}

// settle waits for the confirms of the pending messages, in order, and
// records their outcomes. It returns the index of the first failed message,
// or -1.
func (c *call) settle(ctx context.Context) int {
	failed := -1
	for _, p := range c.pending {
		ok, err := p.dc.WaitContext(ctx)
		if err != nil {
			c.broken = true
			c.errs[p.i] = c.s.ctxError(err)
		} else if !ok {
			if c.ch.closed() {
				c.errs[p.i] = fmt.Errorf("rabbitmq %s: not confirmed: %v", c.s.addr, c.ch.reason(amqp.ErrClosed))
			} else {
				c.errs[p.i] = fmt.Errorf("rabbitmq %s: the broker refused the message (nack)", c.s.addr)
			}
		} else {
			// A return comes before the ack of its message, and the
			// connection's reader has put it in our buffer before it
			// resolved the confirm: reading now cannot miss it.
			c.drainReturns()
			if r, ok := c.returned[c.msgs[p.i].ID]; ok {
				a := c.addrs[p.i]
				c.errs[p.i] = fmt.Errorf("rabbitmq %s: the broker returned the message: %d %s (exchange %q, routing key %q): no queue is bound for it",
					c.s.addr, r.ReplyCode, r.ReplyText, a.exchange, a.key)
			}
		}
		if c.errs[p.i] != nil && failed < 0 {
			failed = p.i
		}
	}
	c.pending = c.pending[:0]
	return failed
}

func (c *call) drainReturns() {
	for {
		select {
		case r := <-c.ch.returns:
			if c.returned == nil {
				c.returned = map[string]amqp.Return{}
			}
			c.returned[r.MessageId] = r
		default:
			return
		}
	}
}

// publishing builds the AMQP message: persistent, message_id = row id,
// timestamp = created_at, the row's headers and then QueueBox's (which win).
func publishing(m *sinks.Message) amqp.Publishing {
	h := make(amqp.Table, len(m.Headers)+8)
	for k, v := range m.Headers {
		h[k] = v
	}
	m.StandardHeaders(func(name, value string) { h[name] = value })
	return amqp.Publishing{
		Headers:      h,
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    m.ID,
		Timestamp:    m.CreatedAt,
		Body:         m.Body,
	}
}

func (s *Sink) render(m *sinks.Message) (address, error) {
	f := m.Fields()
	ex, err := s.cfg.Exchange.Render(f, checkValue("exchange", s.cfg.Exchange, false))
	if err != nil {
		return address{}, sinks.Permanent(err)
	}
	if len(ex) > 255 {
		return address{}, sinks.Permanent(fmt.Errorf("the exchange %q is %d bytes long; AMQP allows 255", ex, len(ex)))
	}
	key, err := s.cfg.RoutingKey.Render(f, checkValue("routing key", s.cfg.RoutingKey, true))
	if err != nil {
		return address{}, sinks.Permanent(err)
	}
	if len(key) > 255 {
		return address{}, sinks.Permanent(fmt.Errorf("the routing key %q is %d bytes long; AMQP allows 255", key, len(key)))
	}
	return address{ex, key}, nil
}

// checkValue rejects values that would not mean what they say in an
// exchange name or routing key: white space and control characters, and in
// a routing key the wildcards of topic bindings (* and #).
func checkValue(what string, t *routing.Template, wildcards bool) func(int, string) (string, error) {
	return func(_ int, v string) (string, error) {
		for _, r := range v {
			switch {
			case unicode.IsSpace(r):
				return "", fmt.Errorf("the %s template %q would hold the value %q, which has white space; RabbitMQ %ss must not", what, t.String(), v, what)
			case unicode.IsControl(r) || r == unicode.ReplacementChar:
				return "", fmt.Errorf("the %s template %q would hold the value %q, which has a control or invalid character", what, t.String(), v)
			case wildcards && (r == '*' || r == '#'):
				return "", fmt.Errorf("the %s template %q would hold the value %q, which has the wildcard %q of topic bindings", what, t.String(), v, r)
			}
		}
		return v, nil
	}
}

// connect returns a live session, dialling when there is none.
func (s *Sink) connect(ctx context.Context) (*session, error) {
	if sess := s.session.Load(); sess != nil && !sess.dead() {
		return sess, nil
	}
	select {
	case s.dial <- struct{}{}:
	case <-ctx.Done():
		return nil, s.ctxError(ctx.Err())
	}
	defer func() { <-s.dial }()
	if s.closed.Load() {
		return nil, errors.New("rabbitmq: the sink is closed")
	}
	if sess := s.session.Load(); sess != nil && !sess.dead() {
		return sess, nil
	}
	if time.Since(s.lastDial.at) < 500*time.Millisecond && s.lastDial.err != nil {
		return nil, s.lastDial.err
	}
	sess, err := s.open(ctx)
	s.lastDial.at, s.lastDial.err = time.Now(), err
	if err != nil {
		return nil, err
	}
	if old := s.session.Swap(sess); old != nil {
		old.close()
	}
	if s.closed.Load() { // Close ran while we dialled
		s.session.CompareAndSwap(sess, nil)
		sess.close()
		return nil, errors.New("rabbitmq: the sink is closed")
	}
	return sess, nil
}

func (s *Sink) open(ctx context.Context) (*session, error) {
	deadline, _ := ctx.Deadline()
	writeTimeout := s.cfg.Timeout
	cfg := amqp.Config{
		Properties:      amqp.Table{"connection_name": s.cfg.Name},
		TLSClientConfig: s.cfg.TLS,
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Deadline: deadline, KeepAlive: 30 * time.Second}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The handshake must end by the call's deadline; amqp091
			// clears it once the connection is open.
			if err := conn.SetDeadline(deadline); err != nil {
				_ = conn.Close()
				return nil, err
			}
			return &writeDeadlineConn{Conn: conn, timeout: writeTimeout}, nil
		},
	}
	conn, err := amqp.DialConfig(s.cfg.URL, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil, s.ctxError(ctx.Err())
		}
		return nil, fmt.Errorf("rabbitmq %s: connect: %v", s.addr, err)
	}
	sess := &session{
		conn:  conn,
		done:  make(chan struct{}),
		free:  make(chan *channel, s.cfg.Channels),
		slots: make(chan struct{}, s.cfg.Channels),
	}
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	go sess.watch(closes, blocks)
	return sess, nil
}

// writeDeadlineConn bounds every write: a broker that stops reading (a
// memory or disk alarm blocks publishers) fails the connection instead of
// holding the caller past its timeout.
type writeDeadlineConn struct {
	net.Conn
	timeout time.Duration
}

func (c *writeDeadlineConn) Write(b []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// session is one connection and its channels.
type session struct {
	conn *amqp.Connection
	done chan struct{} // closed when the connection is gone
	err  atomic.Pointer[amqp.Error]
	// blocked holds the broker's reason while it blocks publishers.
	blocked atomic.Pointer[string]

	free  chan *channel   // idle channels
	slots chan struct{}   // one per open channel
	mu    sync.Mutex      // guards exchanges
	exchs map[string]bool // declared on this connection
}

func (ss *session) watch(closes chan *amqp.Error, blocks chan amqp.Blocking) {
	for {
		select {
		case e, ok := <-closes:
			if ok && e != nil {
				ss.err.Store(e)
			}
			close(ss.done)
			return
		case b, ok := <-blocks:
			if !ok {
				blocks = nil
				continue
			}
			if b.Active {
				r := b.Reason
				ss.blocked.Store(&r)
			} else {
				ss.blocked.Store(nil)
			}
		}
	}
}

func (ss *session) dead() bool {
	select {
	case <-ss.done:
		return true
	default:
		return ss.conn.IsClosed()
	}
}

func (ss *session) close() {
	_ = ss.conn.CloseDeadline(time.Now().Add(2 * time.Second))
}

func (ss *session) declared(ex string) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.exchs[ex]
}

func (ss *session) markDeclared(ex string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.exchs == nil {
		ss.exchs = map[string]bool{}
	}
	ss.exchs[ex] = true
}

// acquire takes an idle channel, or opens one when there is room.
func (ss *session) acquire(ctx context.Context, s *Sink) (*channel, error) {
	if r := ss.blocked.Load(); r != nil {
		return nil, fmt.Errorf("rabbitmq %s: the broker blocks publishers: %s", s.addr, *r)
	}
	for {
		select {
		case ch := <-ss.free:
			if !ch.closed() {
				return ch, nil
			}
			<-ss.slots
			continue
		default:
		}
		select {
		case ch := <-ss.free:
			if !ch.closed() {
				return ch, nil
			}
			<-ss.slots
			continue
		case ss.slots <- struct{}{}:
			ch, err := ss.open()
			if err != nil {
				<-ss.slots
				return nil, fmt.Errorf("rabbitmq %s: open a channel: %v", s.addr, ss.reason(err))
			}
			return ch, nil
		case <-ss.done:
			return nil, fmt.Errorf("rabbitmq %s: %v", s.addr, ss.reason(amqp.ErrClosed))
		case <-ctx.Done():
			return nil, s.ctxError(ctx.Err())
		}
	}
}

func (ss *session) open() (*channel, error) {
	ch, err := ss.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	c := &channel{
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, MaxOrderedBatch+16)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}
	return c, nil
}

// release gives the channel back, or closes it when it may still hold
// confirms or returns of this call.
func (ss *session) release(ch *channel, healthy bool) {
	if healthy && !ch.closed() {
		select {
		case ss.free <- ch:
			return
		default:
		}
	}
	go func() { _ = ch.ch.Close() }() // may wait for the broker; nobody needs to
	<-ss.slots
}

// reason explains a connection-level failure in the broker's words.
func (ss *session) reason(err error) error {
	if e := ss.err.Load(); e != nil {
		return fmt.Errorf("connection closed by the broker: %s", describe(e))
	}
	if ss.dead() {
		return errors.New("connection lost")
	}
	return err
}

type channel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
	err     *amqp.Error // the close reason, once read
}

func (c *channel) closed() bool { return c.ch.IsClosed() }

// reason explains a channel-level failure in the broker's words (404
// NOT_FOUND for an exchange that does not exist).
func (c *channel) reason(err error) error {
	if c.err == nil {
		select {
		case e, ok := <-c.closes:
			if ok && e != nil {
				c.err = e
			}
		default:
		}
	}
	if c.err != nil {
		return fmt.Errorf("channel closed by the broker: %s", describe(c.err))
	}
	return err
}

func describe(e *amqp.Error) string {
	text := strings.TrimSpace(e.Reason)
	if e.Code != 0 {
		return fmt.Sprintf("%s (%d)", text, e.Code)
	}
	return text
}
