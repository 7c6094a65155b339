// Package nats is the NATS destination (nats.go), with or without
// JetStream.
//
// With JetStream (the default), each message is published to the stream
// that captures its subject and the delivery succeeds on the stream's ack.
// The message carries Nats-Msg-Id = the row id, so that the stream's
// duplicate window drops a redelivery (a retry after a lost ack, a replica
// that died after publishing). A key's messages are published one after
// another, each waiting for its ack: pipelining them would let a failure in
// the middle of a run put a later message in the stream first, and the
// duplicate window would then drop the retries that could have restored the
// order. Throughput comes from many keys at once on the shared connection.
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
	"strings"
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
		if s.js, err = jetstream.New(nc); err != nil {
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
		for i, m := range out {
			if _, err := s.js.PublishMsg(ctx, m, jetstream.WithMsgID(msgs[i].ID)); err != nil {
				sinks.FailFrom(errs, msgs, i, s.publishError(ctx, m.Subject, err))
				break
			}
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
	h.Set(jetstream.MsgIDHeader, m.ID)
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
