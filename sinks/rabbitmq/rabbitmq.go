// Package rabbitmq is the RabbitMQ destination (AMQP 0-9-1, amqp091-go).
//
// Every message is published persistent, with publisher confirms: a
// delivery succeeds only on the broker's ack. A mandatory message that the
// broker cannot route comes back as basic.return (312 NO_ROUTE) and its
// confirm is still an ack: the return is what makes it a failed delivery.
//
// Channels. The sink keeps one connection, and for each exchange a few
// channels in confirm mode (Config.Channels, default one) that every call
// publishing to that exchange shares: a key always uses the same one, so a
// key's messages are routed in the order they were published, across calls
// too. Many keys' messages are in flight on one channel at once, up to
// Config.MaxInFlight unconfirmed; the broker then confirms them in groups
// (one ack for many) and the throughput is what its queues can store, not
// one round trip per message. An exchange of its own per channel keeps a
// channel error (404 NOT_FOUND for an exchange that does not exist, 403 for
// one the user may not write to) from failing the publishes to other
// exchanges: only the calls that publish to that exchange see it.
//
// Confirms and returns. One goroutine per channel reads the channel's
// confirms (amqp091-go hands them over in delivery-tag order) and returns,
// and settles each message by its delivery tag. It needs no call to read
// its own returns: the broker sends a message's basic.return before its
// basic.ack on the same channel, and the connection's reader hands them to
// the goroutine in that order, so when a message's confirm is read its
// return, if any, has been read already. A return is matched to its message
// by message_id and X-Attempt (the same row published twice at once, an
// earlier attempt that timed out and its retry, is two attempts).
//
// Order within a call. A call holds one key's run. Consecutive messages to
// the same exchange and routing key are published without waiting (a
// return or a nack of one means, bar a binding added or a queue that made
// room at that moment, the same for those right behind it, which have the
// same address); before a message to another address, the sink waits for
// the confirms of those before it, because a return or a nack is learnt
// after the fact and a message to another address could be routed while
// the one before it is not. At the first failure the call stops: the
// messages after it are not published, or, when already pipelined behind
// it, are reported failed too, so that they are retried after it, with the
// same message_id.
//
// Failures. A channel error closes that channel: its unconfirmed messages
// fail, and the next call on it opens a new one. A connection error (the
// broker restarted, or closed connections) fails the calls in progress,
// which the engine retries, and the next call dials again. Getting a
// connection, and each part of a call that goes to one address, is bounded
// by the configured timeout, including a connection whose writes block (the
// broker's memory or disk alarm); the whole call is not, since a run whose
// address keeps changing waits for one confirm after another, and the
// engine keeps the rows' claims while it does. A call that gives up leaves
// its unconfirmed messages to the channel's goroutine, which settles them
// when their confirms come.
package rabbitmq

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"net/url"
	"strconv"
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
	// Timeout bounds getting a connection, and each part of a Publish
	// that goes to one address: getting its channel, publishing, and the
	// broker's confirms. Default 10 s. A run whose address changes at
	// every message waits for one confirm per message, and under a
	// sustained load a confirm waits for the queue's next sync to disk:
	// a bound on the whole call would fail long runs that are merely slow.
	Timeout time.Duration
	// Channels is how many channels the publishes to one exchange share;
	// a key always uses the same one. Default 1, at most 16.
	Channels int
	// MaxInFlight is how many messages may wait for their confirm on one
	// channel; a publish beyond it waits for room. Default 4,096.
	MaxInFlight int
	// Name shows in the broker's connection list.
	Name string
	// TLS is used for amqps:// (nil: the system's roots).
	TLS *tls.Config
}

// MaxOrderedBatch is how many messages of one key a call may carry.
const MaxOrderedBatch = 256

// maxExchanges is how many exchanges keep their channels open at once;
// beyond it, the channels of exchanges with nothing in flight are closed.
const maxExchanges = 256

// Sink publishes to RabbitMQ.
type Sink struct {
	cfg  Config
	addr string // host:port, for errors (never the credentials)
	seed maphash.Seed

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
	switch {
	case cfg.Channels <= 0:
		cfg.Channels = 1
	case cfg.Channels > 16:
		return nil, sinks.Configf("channels", "%d: at most 16 channels per exchange", cfg.Channels)
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 4096
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
	return &Sink{cfg: cfg, addr: addr, seed: maphash.MakeSeed(), dial: make(chan struct{}, 1)}, nil
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

// Publish publishes msgs in order on their key's channel; see the package
// doc.
func (s *Sink) Publish(ctx context.Context, msgs []sinks.Message) []error {
	errs := make([]error, len(msgs))

	// Render every address first: a message that can never be delivered
	// ends the call before anything of it is published.
	addrs := sinks.Prepare(msgs, errs, s.render)
	if len(addrs) == 0 {
		return errs
	}
	c := &call{s: s, msgs: msgs, errs: errs, results: make(chan result, len(addrs))}
	failed := -1
	if err := ctx.Err(); err != nil {
		errs[0], failed = s.ctxError(err), 0
	} else {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		if c.sess, err = s.connect(cctx); err != nil {
			errs[0], failed = err, 0
		}
		cancel()
	}
	for from := 0; from < len(addrs) && failed < 0; {
		to := from + 1
		for to < len(addrs) && addrs[to] == addrs[from] {
			to++
		}
		rctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		failed = c.run(rctx, addrs[from], from, to)
		cancel()
		from = to
	}
	if failed >= 0 {
		sinks.FailFrom(errs, msgs, failed, errs[failed])
	}
	return errs
}

func (s *Sink) ctxError(err error) error {
	return sinks.ContextError(fmt.Sprintf("rabbitmq %s", s.addr), "confirm", s.cfg.Timeout, err)
}

// call is the state of one Publish.
type call struct {
	s    *Sink
	sess *session
	msgs []sinks.Message
	errs []error
	// results receives the outcome of each published message from its
	// channel's goroutine, in the order they were published; it has room
	// for all of them, so that the goroutine never waits for a call (nor
	// for one that gave up).
	results chan result
}

type result struct {
	i   int
	err error
	// tag is the message's delivery tag on its channel.
	tag uint64
}

// run publishes msgs[from:to], which all go to a, back to back on the
// key's channel, and waits for their confirms. It returns the index of the
// first failed message, or -1.
func (c *call) run(ctx context.Context, a address, from, to int) int {
	if c.s.cfg.DeclareExchange && a.exchange != "" {
		if err := c.sess.declare(ctx, c.s, a.exchange); err != nil {
			c.errs[from] = err
			return from
		}
	}
	ch, err := c.sess.channel(ctx, c.s, a.exchange, c.msgs[from].Key)
	if err != nil {
		c.errs[from] = err
		return from
	}
	failed, published := -1, from
	for i := from; i < to; i++ {
		if err := ch.publish(ctx, c, i, a); err != nil {
			c.errs[i], failed = err, i
			break
		}
		published = i + 1
	}
	// The outcomes come in the order of the messages (see settle).
	for next := from; next < published; {
		select {
		case r := <-c.results:
			if r.i < next || r.i >= published {
				continue // a failed publish that the goroutine settled too
			}
			if r.err != nil {
				c.errs[next] = r.err
				return next
			}
			if _, ok := sinks.Wants(ctx); ok {
				sinks.Report(ctx, c.msgs[r.i].ID, sinks.Answer{Status: fmt.Sprintf("confirmed by the broker (delivery tag %d)", r.tag)})
			}
			next = r.i + 1
		case <-ctx.Done():
			c.errs[next] = c.s.ctxError(ctx.Err())
			return next
		}
	}
	return failed
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
		ContentType:  m.MediaType(),
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
		conn:     conn,
		done:     make(chan struct{}),
		declare1: make(chan struct{}, 1),
		lanes:    map[string]*lane{},
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

	mu    sync.Mutex
	lanes map[string]*lane // by exchange
	// declare1 is a one-slot lock over declaring (the admin channel and
	// declared).
	declare1 chan struct{}
	admin    *amqp.Channel
	declared map[string]bool
}

// lane is the channels of one exchange.
type lane struct {
	open1 chan struct{} // a one-slot lock over opening chans
	chans []*channel
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

// lock takes a one-slot lock, honouring ctx and the connection's end.
func (ss *session) lock(ctx context.Context, s *Sink, l chan struct{}) error {
	select {
	case l <- struct{}{}:
		return nil
	case <-ss.done:
		return fmt.Errorf("rabbitmq %s: %v", s.addr, ss.reason(amqp.ErrClosed))
	case <-ctx.Done():
		return s.ctxError(ctx.Err())
	}
}

// declare declares ex (durable, topic) once per connection, on a channel
// of its own: a refusal (406 PRECONDITION_FAILED for an exchange that
// exists with other properties) closes that channel, not one that carries
// publishes.
func (ss *session) declare(ctx context.Context, s *Sink, ex string) error {
	if err := ss.lock(ctx, s, ss.declare1); err != nil {
		return err
	}
	defer func() { <-ss.declare1 }()
	if ss.declared[ex] {
		return nil
	}
	if ss.admin == nil || ss.admin.IsClosed() {
		ch, err := ss.conn.Channel()
		if err != nil {
			return fmt.Errorf("rabbitmq %s: open a channel: %v", s.addr, ss.reason(err))
		}
		ss.admin = ch
	}
	if err := ss.admin.ExchangeDeclare(ex, "topic", true, false, false, false, nil); err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && !ss.dead() {
			err = fmt.Errorf("channel closed by the broker: %s", describe(ae))
		} else {
			err = ss.reason(err)
		}
		return fmt.Errorf("rabbitmq %s: declaring the exchange %q: %v", s.addr, ex, err)
	}
	if ss.declared == nil {
		ss.declared = map[string]bool{}
	}
	ss.declared[ex] = true
	return nil
}

// channel returns the channel that key's publishes to ex use, opening it
// when there is none or the broker closed it.
func (ss *session) channel(ctx context.Context, s *Sink, ex, key string) (*channel, error) {
	if r := ss.blocked.Load(); r != nil {
		return nil, fmt.Errorf("rabbitmq %s: the broker blocks publishers: %s", s.addr, *r)
	}
	ss.mu.Lock()
	l := ss.lanes[ex]
	if l == nil {
		ss.retire()
		l = &lane{open1: make(chan struct{}, 1), chans: make([]*channel, s.cfg.Channels)}
		ss.lanes[ex] = l
	}
	ss.mu.Unlock()
	slot := 0
	if len(l.chans) > 1 {
		slot = int(maphash.String(s.seed, key) % uint64(len(l.chans)))
	}
	if err := ss.lock(ctx, s, l.open1); err != nil {
		return nil, err
	}
	defer func() { <-l.open1 }()
	if ch := l.chans[slot]; ch != nil && !ch.closed() {
		return ch, nil
	}
	ch, err := ss.open(s)
	if err != nil {
		return nil, err
	}
	l.chans[slot] = ch
	return ch, nil
}

// retire closes the channels of exchanges with nothing in flight when
// there are too many exchanges; ss.mu is held.
func (ss *session) retire() {
	if len(ss.lanes) < maxExchanges {
		return
	}
	for ex, l := range ss.lanes {
		select {
		case l.open1 <- struct{}{}:
		default:
			continue // being opened
		}
		idle := true
		for _, ch := range l.chans {
			idle = idle && (ch == nil || ch.idle())
		}
		if idle {
			for _, ch := range l.chans {
				if ch != nil {
					go func() { _ = ch.ch.Close() }() // may wait for the broker
				}
			}
			delete(ss.lanes, ex)
		}
		<-l.open1
	}
}

func (ss *session) open(s *Sink) (*channel, error) {
	ch, err := ss.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq %s: open a channel: %v", s.addr, ss.reason(err))
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("rabbitmq %s: open a channel: %v", s.addr, ss.reason(err))
	}
	c := &channel{
		s: s, sess: ss, ch: ch,
		room:     make(chan struct{}, s.cfg.MaxInFlight),
		publish1: make(chan struct{}, 1),
		sent:     make(chan waiter, s.cfg.MaxInFlight),
		done:     make(chan struct{}),
	}
	// Room for a return of every message in flight: amqp091-go drops a
	// notification that waits longer than a few seconds.
	returns := ch.NotifyReturn(make(chan amqp.Return, s.cfg.MaxInFlight))
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	go c.settle(returns, closes)
	return c, nil
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

// channel is one AMQP channel in confirm mode, shared by the calls that
// publish to its exchange.
type channel struct {
	s    *Sink
	sess *session
	ch   *amqp.Channel
	// room holds a token per message waiting for its confirm.
	room chan struct{}
	// publish1 is a one-slot lock over publishing, so that the messages
	// enter sent in the order of their delivery tags.
	publish1 chan struct{}
	// sent holds the published messages waiting for their confirms, in
	// the order they were published.
	sent chan waiter
	// mu guards shut: the goroutine has seen the channel close and is
	// settling the last messages in sent; a message published after that
	// is settled by its publisher.
	mu   sync.Mutex
	shut bool
	// closeErr is the broker's reason for closing the channel, once told.
	closeErr atomic.Pointer[amqp.Error]
	// done is closed when the channel is gone and every message sent was
	// settled; err then says why it went.
	done chan struct{}
	err  error
}

// waiter is a published message waiting for its confirm.
type waiter struct {
	dc      *amqp.DeferredConfirmation
	results chan<- result
	i       int
	ret     returnKey
}

// returnKey tells a message's return from others: the row's id and the
// attempt.
type returnKey struct{ id, attempt string }

func (c *channel) closed() bool {
	select {
	case <-c.done:
		return true
	default:
		return c.ch.IsClosed()
	}
}

func (c *channel) idle() bool { return len(c.room) == 0 }

// publish publishes msgs[i] of call cl to a; its outcome comes on
// cl.results.
func (c *channel) publish(ctx context.Context, cl *call, i int, a address) error {
	select {
	case c.room <- struct{}{}:
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return c.s.ctxError(ctx.Err())
	}
	select {
	case c.publish1 <- struct{}{}:
	case <-c.done:
		<-c.room
		return c.err
	case <-ctx.Done():
		<-c.room
		return c.s.ctxError(ctx.Err())
	}
	m := &cl.msgs[i]
	dc, err := c.ch.PublishWithDeferredConfirm(a.exchange, a.key, c.s.cfg.Mandatory, false, publishing(m))
	if err == nil {
		c.mu.Lock()
		if !c.shut {
			c.sent <- waiter{dc: dc, results: cl.results, i: i, ret: returnKey{m.ID, strconv.Itoa(m.Attempt)}}
			c.mu.Unlock()
			<-c.publish1
			return nil
		}
		c.mu.Unlock()
	}
	<-c.publish1
	<-c.room
	if err == nil || c.ch.IsClosed() {
		// Published as the channel closed (its confirm is lost with it),
		// or refused because it had: the goroutine, which is settling
		// the last messages, knows why.
		select {
		case <-c.done:
			return c.err
		case <-ctx.Done():
			return c.s.ctxError(ctx.Err())
		}
	}
	return fmt.Errorf("rabbitmq %s: publish: %v", c.s.addr, c.sess.reason(err))
}

// settle is the channel's goroutine: it waits for the confirm of each
// message in the order they were published, and sends its waiter the
// outcome. Every return precedes its message's confirm, and every
// confirm follows the returns of the messages published before it (see
// the package doc), so when a message's confirm is in, its return, if
// any, is already in returns: the goroutine keeps reading returns while
// it waits, and reads those buffered before it decides.
//
// The confirms are amqp091-go's deferred confirmations, not its
// NotifyPublish listeners: those report a nack as an ack when a later
// ack for many messages covers its delivery tag.
func (c *channel) settle(returns <-chan amqp.Return, closes <-chan *amqp.Error) {
	st := &settler{c: c, returns: returns, closes: closes, returned: map[returnKey][]amqp.Return{}}
	// amqp091-go closes returns and closes as the channel closes, and
	// then resolves the confirms still outstanding.
	for st.returns != nil || st.closes != nil || len(c.sent) > 0 {
		select {
		case w := <-c.sent:
			st.settle(w)
		case r, ok := <-st.returns:
			st.onReturn(r, ok)
		case e, ok := <-st.closes:
			st.onClose(e, ok)
		}
	}
	// The channel is closed and what was sent is settled; what a
	// publisher sent as it closed is settled here, and later publishers
	// settle their own.
	c.err = fmt.Errorf("rabbitmq %s: not confirmed: %v", c.s.addr, c.reason())
	c.mu.Lock()
	c.shut = true
	c.mu.Unlock()
	for len(c.sent) > 0 {
		st.settle(<-c.sent)
	}
	close(c.done)
}

// settler is the state of a channel's goroutine.
type settler struct {
	c        *channel
	returns  <-chan amqp.Return
	closes   <-chan *amqp.Error
	returned map[returnKey][]amqp.Return
}

func (st *settler) onReturn(r amqp.Return, ok bool) {
	if !ok {
		st.returns = nil
		return
	}
	attempt, _ := r.Headers["X-Attempt"].(string)
	k := returnKey{r.MessageId, attempt}
	st.returned[k] = append(st.returned[k], r)
}

func (st *settler) onClose(e *amqp.Error, ok bool) {
	if !ok {
		st.closes = nil
	} else if e != nil {
		st.c.closeErr.Store(e)
	}
}

// settle waits for w's confirm, reading returns and the channel's close
// meanwhile, then the returns already buffered, and sends w its outcome.
func (st *settler) settle(w waiter) {
	c := st.c
	for waiting := true; waiting; {
		select {
		case <-w.dc.Done():
			waiting = false
		case r, ok := <-st.returns:
			st.onReturn(r, ok)
		case e, ok := <-st.closes:
			st.onClose(e, ok)
		}
	}
	// What came before the confirm: returns, and the reason of a close
	// (amqp091-go hands it over before it fails the confirms).
	for buffered := true; buffered && (st.returns != nil || st.closes != nil); {
		select {
		case r, ok := <-st.returns:
			st.onReturn(r, ok)
		case e, ok := <-st.closes:
			st.onClose(e, ok)
		default:
			buffered = false
		}
	}
	var err error
	if rs := st.returned[w.ret]; len(rs) > 0 {
		r := rs[0]
		if st.returned[w.ret] = rs[1:]; len(rs) == 1 {
			delete(st.returned, w.ret)
		}
		err = fmt.Errorf("rabbitmq %s: the broker returned the message: %d %s (exchange %q, routing key %q): no queue is bound for it",
			c.s.addr, r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey)
	} else if !w.dc.Acked() {
		if c.ch.IsClosed() {
			// amqp091-go fails what is outstanding when a channel closes
			// as if the broker had refused it.
			err = fmt.Errorf("rabbitmq %s: not confirmed: %v", c.s.addr, c.reason())
		} else {
			err = fmt.Errorf("rabbitmq %s: the broker refused the message (nack)", c.s.addr)
		}
	}
	<-c.room
	w.results <- result{w.i, err, w.dc.DeliveryTag}
}

// reason explains why the channel closed, in the broker's words when it
// said them (404 NOT_FOUND for an exchange that does not exist).
func (c *channel) reason() error {
	if e := c.closeErr.Load(); e != nil && !c.sess.dead() {
		return fmt.Errorf("channel closed by the broker: %s", describe(e))
	}
	return c.sess.reason(amqp.ErrClosed)
}

func describe(e *amqp.Error) string {
	text := strings.TrimSpace(e.Reason)
	if e.Code != 0 {
		return fmt.Sprintf("%s (%d)", text, e.Code)
	}
	return text
}
