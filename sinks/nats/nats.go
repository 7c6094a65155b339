// Package nats is the NATS destination (nats.go), with or without
// JetStream.
//
// With JetStream (the default), each message is published to the stream
// that captures its subject and the delivery succeeds on the stream's ack.
// The message carries Nats-Msg-Id = the row id, so that the stream's
// duplicate window drops a redelivery (a retry after a lost ack, a replica
// that died after publishing).
//
// Order. The server stores the messages that one connection publishes to
// one stream in the order they were published, and what fails a message
// there (the stream's limits, a stream that went away, the connection)
// fails the messages right behind it too. So the consecutive messages of a
// key's run that go to one stream are published without waiting (their
// acks are read afterwards, in order), and before a message to another
// stream, or to a subject whose stream the sink has not yet seen in an ack,
// the sink waits for the acks of those before it: a subject that no stream
// captures fails alone, and nothing behind it is published. The sink learns
// each subject's stream from the acks (the ack names the stream).
//
// At the first failure the rest of the run is not published; the messages
// already published behind it are reported failed too and are retried after
// it. Should one of them have been stored all the same (a stream that made
// room at that moment, a leader that changed), the duplicate window would
// drop its retry and leave it ahead of the failed one; so the sink
// remembers those rows and publishes them again with a message id of their
// own (the row id, a slash and the attempt), which the stream keeps: the
// key's last copies are in order, as with the other brokers.
//
// Without JetStream (core NATS), a call's messages are written and then
// flushed: the delivery succeeds once the server has read them. Core NATS
// gives no guarantee beyond that: a subject without subscribers drops the
// message, and a subscriber that is slow or away misses it.
//
// The connection is shared and reconnects by itself (nats.go); while it is
// away, Publish fails at once (nothing is buffered for later), and the
// engine retries.
package nats

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
)

// Config is a compiled NATS destination.
type Config struct {
	// URL is nats://host:4222 (a comma-separated list for a cluster);
	// tls:// for TLS.
	URL     string
	Subject *routing.Template
	// JetStream publishes to a stream and waits for its ack.
	JetStream bool
	// CredentialsFile is a NATS .creds file (JWT and NKey seed); "" for none.
	CredentialsFile string
	// Timeout bounds one Publish. Default 10 s.
	Timeout time.Duration
	// Name shows in the server's connection list.
	Name string
}

// MaxOrderedBatch is how many messages of one key a call may carry.
const MaxOrderedBatch = 256

// Sink publishes to NATS.
type Sink struct {
	cfg  Config
	nc   *natsgo.Conn
	js   jetstream.JetStream
	addr string // the servers, without credentials, for errors

	// streams maps a subject to the stream its last ack named.
	streams streamCache
	// again holds the rows published behind a failure: their next publish
	// takes a message id of its own.
	again rowSet
}

// New connects. A server that is down is not an error: the connection keeps
// trying in the background and Publish fails until it is up.
func New(cfg Config) (*Sink, error) {
	if cfg.Subject == nil {
		return nil, errors.New("the subject template is required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Name == "" {
		cfg.Name = "queuebox"
	}
	addr, err := servers(cfg.URL)
	if err != nil {
		return nil, err
	}
	opts := []natsgo.Option{
		natsgo.Name(cfg.Name),
		natsgo.RetryOnFailedConnect(true),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(500 * time.Millisecond),
		natsgo.ReconnectJitter(250*time.Millisecond, time.Second),
		// Nothing is kept while disconnected: a publish then fails and the
		// engine retries it, instead of a buffer that the caller believes
		// delivered.
		natsgo.ReconnectBufSize(-1),
		natsgo.Timeout(cfg.Timeout),
		natsgo.NoCallbacksAfterClientClose(),
	}
	if cfg.CredentialsFile != "" {
		if _, err := os.Stat(cfg.CredentialsFile); err != nil {
			return nil, &sinks.ConfigError{Key: "credentialsFile", Err: err}
		}
		opts = append(opts, natsgo.UserCredentials(cfg.CredentialsFile))
	}
	nc, err := natsgo.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats %s: %v", addr, err)
	}
	s := &Sink{cfg: cfg, nc: nc, addr: addr}
	if cfg.JetStream {
		// The engine bounds what is in flight; the publisher's own bound
		// must not fail a publish below it.
		if s.js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxPending), jetstream.WithPublishAsyncTimeout(cfg.Timeout)); err != nil {
			nc.Close()
			return nil, fmt.Errorf("nats %s: %v", addr, err)
		}
	}
	return s, nil
}

// servers lists the URL's hosts without credentials.
func servers(raw string) (string, error) {
	var hosts []string
	for _, part := range strings.Split(raw, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss") {
			return "", sinks.Configf("url", "%q is not a NATS URL; write nats://host:4222 (tls:// for TLS)", part)
		}
		hosts = append(hosts, u.Host)
	}
	return strings.Join(hosts, ","), nil
}

// MaxOrderedBatch lets a key actor hand over a run of one key.
func (*Sink) MaxOrderedBatch() int { return MaxOrderedBatch }

// Close closes the connection.
func (s *Sink) Close() error {
	s.nc.Close()
	return nil
}

// Publish publishes msgs in order; see the package doc.
func (s *Sink) Publish(ctx context.Context, msgs []sinks.Message) []error {
	ctx, cancel, errs := sinks.Start(ctx, msgs, s.cfg.Timeout)
	defer cancel()
	out := sinks.Prepare(msgs, errs, s.message)
	if len(out) == 0 {
		return errs
	}
	if err := s.ready(ctx); err != nil {
		for i := range out {
			errs[i] = err
		}
		return errs
	}
	if s.js != nil {
		for from := 0; from < len(out); {
			to := s.streams.run(out, from)
			if failed := s.publishRun(ctx, msgs, out, errs, from, to); failed >= 0 {
				sinks.FailFrom(errs, msgs, failed, errs[failed])
				break
			}
			from = to
		}
		return errs
	}
	sent := 0
	for i, m := range out {
		if err := s.nc.PublishMsg(m); err != nil {
			sinks.FailFrom(errs, msgs, i, s.publishError(ctx, m.Subject, err))
			break
		}
		sent++
	}
	if sent > 0 {
		if err := s.nc.FlushWithContext(ctx); err != nil {
			err = s.publishError(ctx, "", fmt.Errorf("flush: %w", err))
			for i := range sent {
				errs[i] = err
			}
		}
	}
	return errs
}

// publishRun publishes out[from:to], which go to one stream, without
// waiting, then reads their acks in order. It returns the index of the
// first failed message, or -1.
func (s *Sink) publishRun(ctx context.Context, msgs []sinks.Message, out []*natsgo.Msg, errs []error, from, to int) int {
	acks := make([]jetstream.PubAckFuture, 0, to-from)
	failed := -1
	for i := from; i < to; i++ {
		// No retry inside nats.go: it would publish the message again
		// behind those that followed it.
		f, err := s.js.PublishMsgAsync(out[i], jetstream.WithMsgID(s.msgID(&msgs[i])), jetstream.WithRetryAttempts(0))
		if err != nil {
			errs[i], failed = s.publishError(ctx, out[i].Subject, err), i
			break
		}
		acks = append(acks, f)
	}
	for j, f := range acks {
		i := from + j
		var err error
		select {
		case ack := <-f.Ok():
			s.streams.learn(out[i].Subject, ack.Stream)
			if _, ok := sinks.Wants(ctx); ok {
				sinks.Report(ctx, msgs[i].ID, sinks.Answer{Status: ackStatus(ack)})
			}
			s.again.remove(msgs[i].ID)
			continue
		case err = <-f.Err():
			if errors.Is(err, natsgo.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
				s.streams.forget(out[i].Subject)
			}
			err = s.publishError(ctx, out[i].Subject, err)
		case <-ctx.Done():
			err = s.ctxError(ctx.Err())
		}
		errs[i], failed = err, i
		// What was published behind it may be stored all the same.
		for k := i + 1; k < from+len(acks); k++ {
			s.again.add(msgs[k].ID)
		}
		break
	}
	return failed
}

// msgID is the message's Nats-Msg-Id: the row id, unless the row was
// published behind a failure (see the package doc).
func (s *Sink) msgID(m *sinks.Message) string {
	if s.again.has(m.ID) {
		return m.ID + "/" + strconv.Itoa(m.Attempt)
	}
	return m.ID
}

// maxPending bounds the acks the sink waits for at once; the engine's
// maxInFlight keeps below it.
const maxPending = 1 << 16

// streamCache maps subjects to the streams that captured them, as the
// acks said; bounded, since subjects may hold keys.
type streamCache struct {
	mu sync.RWMutex
	m  map[string]string
}

const maxSubjects = 4096

func (c *streamCache) learn(subject, stream string) {
	c.mu.RLock()
	known := c.m[subject] == stream
	c.mu.RUnlock()
	if known || stream == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxSubjects {
		c.m = map[string]string{}
	}
	c.m[subject] = stream
}

func (c *streamCache) forget(subject string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, subject)
}

// run returns the end of the run of messages from out[from] that go to
// one stream as far as the acks have told: a message whose subject no ack
// has named a stream for is a run of its own.
func (c *streamCache) run(out []*natsgo.Msg, from int) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	stream, ok := c.m[out[from].Subject]
	to := from + 1
	for ok && to < len(out) && c.m[out[to].Subject] == stream {
		to++
	}
	return to
}

// rowSet is a bounded set of row ids; the oldest go first. It is read for
// every message and written only after a failure.
type rowSet struct {
	mu    sync.RWMutex
	m     map[string]struct{}
	order []string
}

const maxRows = 1 << 16

func (r *rowSet) add(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]struct{}{}
	}
	if _, ok := r.m[id]; ok {
		return
	}
	if len(r.order) >= maxRows {
		delete(r.m, r.order[0])
		r.order = r.order[1:]
	}
	r.m[id] = struct{}{}
	r.order = append(r.order, id)
}

func (r *rowSet) has(id string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.m[id]
	return ok
}

func (r *rowSet) remove(id string) {
	if !r.has(id) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[id]; ok {
		delete(r.m, id)
		r.order = slices.DeleteFunc(r.order, func(x string) bool { return x == id })
	}
}

// ready fails at once while the connection is away.
func (s *Sink) ready(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return s.ctxError(err)
	}
	if s.nc.IsConnected() {
		return nil
	}
	if last := s.nc.LastError(); last != nil {
		return fmt.Errorf("nats %s: not connected (%s; last error: %v)", s.addr, strings.ToLower(s.nc.Status().String()), last)
	}
	return fmt.Errorf("nats %s: not connected (%s)", s.addr, strings.ToLower(s.nc.Status().String()))
}

func (s *Sink) publishError(ctx context.Context, subject string, err error) error {
	if ctx.Err() != nil {
		return s.ctxError(ctx.Err())
	}
	if subject == "" {
		return fmt.Errorf("nats %s: %w", s.addr, err)
	}
	if errors.Is(err, natsgo.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		return fmt.Errorf("nats %s: subject %q: no stream captures this subject (%v)", s.addr, subject, err)
	}
	return fmt.Errorf("nats %s: subject %q: %w", s.addr, subject, err)
}

func (s *Sink) ctxError(err error) error {
	return sinks.ContextError(fmt.Sprintf("nats %s", s.addr), "acknowledgement", s.cfg.Timeout, err)
}

// message builds the NATS message: the row's headers, QueueBox's (which
// win), and Nats-Msg-Id = the row id.
func (s *Sink) message(m *sinks.Message) (*natsgo.Msg, error) {
	subject, err := s.cfg.Subject.Render(m.Fields(), checkValue(s.cfg.Subject))
	if err != nil {
		return nil, sinks.Permanent(err)
	}
	if err := validSubject(subject); err != nil {
		return nil, sinks.Permanent(fmt.Errorf("the subject template %q gave %q, which %v", s.cfg.Subject.String(), subject, err))
	}
	h := make(natsgo.Header, len(m.Headers)+9)
	for k, v := range m.Headers {
		h.Set(k, v)
	}
	m.StandardHeaders(h.Set)
	h.Set(jetstream.MsgIDHeader, m.ID) // JetStream's publish sets its own (msgID)
	return &natsgo.Msg{Subject: subject, Header: h, Data: m.Body}, nil
}

// checkValue rejects what a subject cannot hold: white space, and the
// wildcards * and >, which would make a publish subject invalid.
func checkValue(t *routing.Template) func(int, string) (string, error) {
	return func(_ int, v string) (string, error) {
		for _, r := range v {
			switch {
			case unicode.IsSpace(r) || unicode.IsControl(r):
				return "", fmt.Errorf("the subject template %q would hold the value %q, which has white space or a control character; NATS subjects cannot", t.String(), v)
			case r == '*' || r == '>':
				return "", fmt.Errorf("the subject template %q would hold the value %q, which has the wildcard %q; a NATS publish subject cannot", t.String(), v, r)
			}
		}
		return v, nil
	}
}

// validSubject checks the rendered subject's tokens.
func validSubject(s string) error {
	if s == "" {
		return errors.New("is empty")
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" {
			return errors.New("has an empty token (a leading, trailing or double dot)")
		}
	}
	return nil
}

// ackStatus words a stream's ack for the attempt history.
func ackStatus(ack *jetstream.PubAck) string {
	st := fmt.Sprintf("stream %s seq %d", ack.Stream, ack.Sequence)
	if ack.Duplicate {
		st += " (duplicate)"
	}
	return st
}
