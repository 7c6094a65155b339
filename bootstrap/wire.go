package bootstrap

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/dialects/sqlserver"
	"github.com/queuebox/queuebox/sinks"
	httpsink "github.com/queuebox/queuebox/sinks/http"
	nullsink "github.com/queuebox/queuebox/sinks/null"
)

// NewLogger builds the structured logger of the configuration, with secrets
// redacted from every line.
func NewLogger(l *Loaded, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(l.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if l.Log.Format == "text" {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(RedactingHandler{Handler: h, Secrets: l.Secrets})
}

// OpenDialect opens the configured database (lazily: nothing connects yet).
func OpenDialect(ctx context.Context, l *Loaded) (dialects.Dialect, error) {
	names := l.Names()
	switch l.Database.Dialect {
	case "sqlserver":
		return sqlserver.Open(ctx, sqlserver.Options{URL: l.Database.URL, Names: names, MaxConnections: l.Database.MaxConnections})
	default:
		return postgres.Open(ctx, postgres.Options{URL: l.Database.URL, Names: names, MaxConnections: l.Database.MaxConnections})
	}
}

// SinkFactories builds a factory per destination from the compiled
// configuration.
func SinkFactories(l *Loaded) (map[string]actors.SinkFactory, error) {
	out := map[string]actors.SinkFactory{}
	for name, d := range l.Destinations {
		switch d.Type {
		case "null":
			out[name] = func() (sinks.Sink, error) { return nullsink.New(), nil }
		case "http":
			cd := l.Compiled.Destinations[name]
			cfg := httpsink.Config{
				URL: cd.URL, Method: d.Method, Headers: d.Headers, Timeout: time.Duration(d.TimeoutMs) * time.Millisecond,
				NonRetryableStatus: d.NonRetryableStatus, MaxConnections: d.MaxConnections, SigningSecret: cd.SigningSecret,
				CAFile: d.TLS.CAFile, InsecureSkipVerify: d.TLS.InsecureSkipVerify, MaxErrorBody: l.HTTP.MaxErrorBodyBytes,
			}
			out[name] = func() (sinks.Sink, error) { return httpsink.New(cfg) }
		default:
			return nil, &Error{File: l.File, Problems: []Problem{{Key: "destinations." + name + ".type",
				Reason: fmt.Sprintf("%s destinations are not available in this version of QueueBox yet; use http or null", d.Type)}}}
		}
	}
	return out, nil
}

// EngineOptions maps the configuration onto the engine.
func EngineOptions(l *Loaded, d dialects.Dialect, log *slog.Logger) (actors.Options, error) {
	factories, err := SinkFactories(l)
	if err != nil {
		return actors.Options{}, err
	}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	o := l.Outbox
	return actors.Options{
		Dialect: d, Router: l.Compiled.Router, Destinations: factories,
		BatchSize: o.BatchSize, MaxInFlight: o.MaxInFlight, Lease: ms(o.ClaimTimeoutMs), PollInterval: ms(o.PollIntervalMs),
		ProbeInterval: ms(o.ProbeIntervalMs),
		Backoff:       actors.Backoff{Initial: ms(o.Backoff.InitialMs), Multiplier: o.Backoff.Multiplier, Max: ms(o.Backoff.MaxMs), Jitter: o.Backoff.Jitter},
		Retention: actors.Retention{Delivered: time.Duration(o.Retention.Delivered), Dead: time.Duration(o.Retention.Dead),
			Interval: ms(o.Retention.IntervalMs), BatchSize: o.Retention.BatchSize},
		Mailboxes: actors.Mailboxes{Claimer: l.Engine.Mailbox.Claimer, Key: l.Engine.Mailbox.Key, Sink: l.Engine.Mailbox.Sink, Completer: l.Engine.Mailbox.Completer},
		KeyIdle:   ms(l.Engine.KeyIdleMs), UnorderedConcurrency: l.Engine.UnorderedConcurrency,
		DrainTimeout: ms(l.Shutdown.DrainTimeoutMs), MaxErrorBytes: l.HTTP.MaxErrorBodyBytes,
		Redact: l.Secrets.Redact, Logger: log,
	}, nil
}

// Stderr is where commands write logs; tests may swap it.
var Stderr io.Writer = os.Stderr

// Version information, set by the build (-ldflags -X).
var (
	Version = "dev"
	Commit  = "unknown"
)
