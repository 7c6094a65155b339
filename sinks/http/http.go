// Package http is the HTTP destination: one request per message, with the
// headers every delivery carries (docs/how-it-works.md, "Headers"),
// optional Standard Webhooks signatures (one per signing secret, so that a
// receiver keeps verifying while the secret is rotated), pooled keep-alive
// connections, and typed outcomes (a non-retryable status is permanent,
// Retry-After on 429 and 503 is honoured).
package http

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
)

// Config is a compiled HTTP destination.
type Config struct {
	URL                *routing.Template
	Method             string
	Headers            map[string]string
	Timeout            time.Duration
	NonRetryableStatus []int
	MaxConnections     int
	// SigningSecrets are the decoded Standard Webhooks keys: every request
	// carries one v1 signature per key, in this order, space-separated in
	// webhook-signature, as the specification allows, so that a receiver
	// that knows either key of a rotation accepts it. None: unsigned.
	SigningSecrets [][]byte
	// SigningSecret is one more key, signed with first: the form of one
	// key alone that callers used before rotations.
	SigningSecret      []byte
	CAFile             string
	InsecureSkipVerify bool
	// MaxErrorBody is how much of a failed response's body goes into the
	// error (http.maxErrorBodyBytes).
	MaxErrorBody int
}

// Sink delivers over HTTP.
type Sink struct {
	cfg    Config
	client *nethttp.Client
	now    func() time.Time
	// keys are the signing keys, SigningSecret's first.
	keys [][]byte
}

// New builds the sink and its connection pool.
func New(cfg Config) (*Sink, error) {
	tlsCfg := &tls.Config{InsecureSkipVerify: cfg.InsecureSkipVerify} //nolint:gosec // the user's explicit choice
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.caFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.caFile %s holds no PEM certificate", cfg.CAFile)
		}
		tlsCfg.RootCAs = pool
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = 64
	}
	if cfg.MaxErrorBody <= 0 {
		cfg.MaxErrorBody = 2048
	}
	tr := &nethttp.Transport{
		Proxy:                 nethttp.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          cfg.MaxConnections,
		MaxIdleConnsPerHost:   cfg.MaxConnections,
		MaxConnsPerHost:       cfg.MaxConnections,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       tlsCfg,
	}
	var keys [][]byte
	if cfg.SigningSecret != nil {
		keys = append(keys, cfg.SigningSecret)
	}
	for _, k := range cfg.SigningSecrets {
		if k != nil {
			keys = append(keys, k)
		}
	}
	return &Sink{cfg: cfg, client: &nethttp.Client{Transport: tr, Timeout: cfg.Timeout}, now: time.Now, keys: keys}, nil
}

// Close closes idle connections.
func (s *Sink) Close() error {
	s.client.CloseIdleConnections()
	return nil
}

// Publish sends the messages one after another, stopping at the first
// failure: the rest are not sent and get an error that retries them, so
// that order holds when the caller hands over a run of one key.
func (s *Sink) Publish(ctx context.Context, msgs []sinks.Message) []error {
	errs := make([]error, len(msgs))
	for i := range msgs {
		if err := s.deliver(ctx, &msgs[i]); err != nil {
			errs[i] = err
			for j := i + 1; j < len(msgs); j++ {
				errs[j] = sinks.NotDelivered(msgs[i].ID, err)
			}
			break
		}
	}
	return errs
}

func (s *Sink) render(m *sinks.Message) (string, error) {
	u, err := s.cfg.URL.Render(m.Fields(), func(i int, v string) (string, error) {
		if strings.Contains(s.cfg.URL.PrefixOf(i), "?") {
			return url.QueryEscape(v), nil
		}
		return url.PathEscape(v), nil
	})
	if err != nil {
		return "", sinks.Permanent(err)
	}
	return u, nil
}

func (s *Sink) deliver(ctx context.Context, m *sinks.Message) error {
	target, err := s.render(m)
	if err != nil {
		return err
	}
	req, err := nethttp.NewRequestWithContext(ctx, s.cfg.Method, target, bytes.NewReader(m.Body))
	if err != nil {
		return sinks.Permanent(fmt.Errorf("the rendered URL %q is not valid: %v", target, err))
	}
	h := req.Header
	for k, v := range m.Headers {
		h.Set(k, v)
	}
	for k, v := range s.cfg.Headers {
		h.Set(k, v)
	}
	m.StandardHeaders(h.Set)
	if len(s.keys) > 0 {
		ts := strconv.FormatInt(s.now().Unix(), 10)
		h.Set("webhook-id", m.ID)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", Signatures(s.keys, m.ID, ts, m.Body))
	}
	if err := checkHeaders(h); err != nil {
		return sinks.Permanent(err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return transportError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if n, ok := sinks.Wants(ctx); ok {
			// The attempt history keeps an excerpt of the answer.
			body, _ := io.ReadAll(io.LimitReader(resp.Body, int64(n)))
			sinks.Report(ctx, m.ID, sinks.Answer{Status: "HTTP " + resp.Status, Body: string(body)})
		}
		// Read what is left (bounded) so the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, int64(s.cfg.MaxErrorBody)))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	sinks.Report(ctx, m.ID, sinks.Answer{Status: "HTTP " + resp.Status, Body: string(body)})
	err = statusError(resp, body)
	if slices.Contains(s.cfg.NonRetryableStatus, resp.StatusCode) {
		return sinks.Permanent(err)
	}
	if resp.StatusCode == nethttp.StatusTooManyRequests || resp.StatusCode == nethttp.StatusServiceUnavailable {
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), s.now()); ok {
			return sinks.WithRetryAfter(err, d)
		}
	}
	return err
}

// checkHeaders refuses what HTTP cannot carry in a header (RFC 9110: no
// control characters but tab), naming the header: a row whose topic, key or
// headers column holds such a character can never be sent, and Go's client
// would fail it as a transport error, retried for nothing.
func checkHeaders(h nethttp.Header) error {
	for name, values := range h {
		if !validToken(name) {
			return fmt.Errorf("the header name %q cannot be sent over HTTP: a name is letters, digits and !#$%%&'*+-.^_`|~ only (it comes from the row's headers column)", name)
		}
		for _, v := range values {
			for i := 0; i < len(v); i++ {
				if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
					return fmt.Errorf("the header %s cannot be sent over HTTP: its value holds the control character 0x%02x at byte %d (it comes from the row's topic, key, aggregate_type or headers column)", name, c, i)
				}
			}
		}
	}
	return nil
}

// validToken reports whether s is an HTTP token (RFC 9110, 5.6.2).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func statusError(resp *nethttp.Response, body []byte) error {
	text := strings.TrimSpace(strings.ToValidUTF8(string(body), "\uFFFD"))
	if !utf8.ValidString(text) || text == "" {
		return fmt.Errorf("HTTP %s", resp.Status)
	}
	return fmt.Errorf("HTTP %s: %s", resp.Status, text)
}

// transportError keeps the destination's words and drops Go's wrapping from
// the text, but not from the chain: the engine must still see
// context.Canceled (a drain or a lost claim, not a failing destination).
func transportError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return &wrapped{fmt.Sprintf("%s %s: timed out", ue.Op, ue.URL), ue.Err}
		}
		return &wrapped{fmt.Sprintf("%s %s: %v", ue.Op, ue.URL, ue.Err), ue.Err}
	}
	return err
}

// wrapped is an error with its own text that still unwraps to its cause.
type wrapped struct {
	text  string
	cause error
}

func (e *wrapped) Error() string { return e.text }
func (e *wrapped) Unwrap() error { return e.cause }

// parseRetryAfter reads seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second, true
	}
	if t, err := nethttp.ParseTime(v); err == nil {
		d := t.Sub(now)
		if d < 0 {
			d = 0
		}
		return d, true
	}
	return 0, false
}

// DecodeSigningSecret decodes a Standard Webhooks secret: "whsec_" followed
// by base64, or plain base64, of at least 16 bytes.
func DecodeSigningSecret(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
	if err != nil || len(b) < 16 {
		return nil, errors.New("a Standard Webhooks secret is whsec_ followed by the base64 of at least 16 random bytes (for example whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM=)")
	}
	return b, nil
}

// Signatures is the value of webhook-signature for keys: "v1,<signature>"
// for each key, space-separated, in the order of keys.
func Signatures(keys [][]byte, id, timestamp string, body []byte) string {
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(Sign(k, id, timestamp, body))
	}
	return b.String()
}

// Sign computes a Standard Webhooks signature: base64 of
// HMAC-SHA256(key, "{id}.{timestamp}.{body}").
func Sign(key []byte, id, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}
