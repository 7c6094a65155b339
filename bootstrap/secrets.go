package bootstrap

import (
	"context"
	"log/slog"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// Secrets is the registry of secret values: every value the configuration
// took from an environment variable, the password of every URL, the values
// of destination headers, signing secrets, tokens. Redact replaces each with
// [REDACTED] wherever it appears (last_error, logs, `config check`).
type Secrets struct {
	mu       sync.RWMutex
	values   map[string]struct{}
	replacer *strings.Replacer
}

// Redacted is what a secret becomes.
const Redacted = "[REDACTED]"

// MinSecretLength is the shortest value treated as a secret: replacing every
// "on" or "500" in an error message would destroy it and protect nothing.
const MinSecretLength = 4

// NewSecrets returns an empty registry.
func NewSecrets() *Secrets { return &Secrets{values: map[string]struct{}{}} }

var plainValueRE = regexp.MustCompile(`^(?i:[0-9]+(\.[0-9]+)?|true|false|yes|no|on|off|null)$`)

// Add registers a secret value.
func (s *Secrets) Add(v string) {
	v = strings.TrimSpace(v)
	if len(v) < MinSecretLength {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.values[v]; !ok {
		s.values[v] = struct{}{}
		s.replacer = nil
	}
}

// AddFromEnv registers a value substituted from the environment, unless it is
// a plain number or boolean (a port, a size, a switch).
func (s *Secrets) AddFromEnv(v string) {
	if plainValueRE.MatchString(strings.TrimSpace(v)) {
		return
	}
	s.Add(v)
	// A URL's password is a secret too, even when the URL came whole.
	s.AddURLPassword(v)
}

// AddURLPassword registers the password of a URL, if it has one.
func (s *Secrets) AddURLPassword(raw string) {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return
	}
	if p, ok := u.User.Password(); ok {
		s.Add(p)
		s.Add(url.QueryEscape(p))
	}
}

// Redact replaces every secret value in text.
func (s *Secrets) Redact(text string) string {
	if s == nil {
		return text
	}
	s.mu.RLock()
	r := s.replacer
	n := len(s.values)
	s.mu.RUnlock()
	if n == 0 {
		return text
	}
	if r == nil {
		s.mu.Lock()
		vals := make([]string, 0, len(s.values))
		for v := range s.values {
			vals = append(vals, v)
		}
		// Longest first, so that a secret containing another is replaced whole.
		sort.Slice(vals, func(i, j int) bool { return len(vals[i]) > len(vals[j]) })
		pairs := make([]string, 0, 2*len(vals))
		for _, v := range vals {
			pairs = append(pairs, v, Redacted)
		}
		r = strings.NewReplacer(pairs...)
		s.replacer = r
		s.mu.Unlock()
	}
	return r.Replace(text)
}

// collectSecrets registers the secret values of a validated configuration.
func collectSecrets(c *Config, s *Secrets) {
	s.AddURLPassword(c.Database.URL)
	for _, o := range c.Outboxes {
		if o != nil {
			s.AddURLPassword(o.Database.URL)
		}
	}
	s.Add(c.Admin.Token)
	for _, d := range c.Destinations {
		s.AddURLPassword(d.URL)
		s.Add(d.SigningSecret)
		for _, k := range d.SigningSecrets {
			s.Add(k)
		}
		s.Add(d.SASL.Password)
		for _, v := range d.Headers {
			s.Add(v)
			// "Bearer abc123": the credential alone is a secret too.
			if _, cred, ok := strings.Cut(v, " "); ok {
				s.Add(cred)
			}
		}
	}
	for _, src := range c.Inbox.Sources {
		s.Add(src.Token)
		s.Add(src.SigningSecret)
		for _, k := range src.SigningSecrets {
			s.Add(k)
		}
		s.Add(src.SASL.Password)
		s.AddURLPassword(src.URL)
	}
}

// RedactingHandler wraps a slog.Handler so that no secret reaches a log line:
// the message and every string attribute pass through Redact.
type RedactingHandler struct {
	slog.Handler
	Secrets *Secrets
}

func (h RedactingHandler) Handle(ctx context.Context, r slog.Record) error {
	nr := slog.NewRecord(r.Time, r.Level, h.Secrets.Redact(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		nr.AddAttrs(h.redactAttr(a))
		return true
	})
	return h.Handler.Handle(ctx, nr)
}

func (h RedactingHandler) redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.Secrets.Redact(v.String()))
	case slog.KindGroup:
		attrs := v.Group()
		out := make([]any, len(attrs))
		for i, g := range attrs {
			out[i] = h.redactAttr(g)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, h.Secrets.Redact(err.Error()))
		}
		return slog.String(a.Key, h.Secrets.Redact(v.String()))
	}
	return a
}

func (h RedactingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = h.redactAttr(a)
	}
	return RedactingHandler{Handler: h.Handler.WithAttrs(out), Secrets: h.Secrets}
}

func (h RedactingHandler) WithGroup(name string) slog.Handler {
	return RedactingHandler{Handler: h.Handler.WithGroup(name), Secrets: h.Secrets}
}
