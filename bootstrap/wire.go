package bootstrap

import (
	"context"
	"errors"
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
	kafkasink "github.com/queuebox/queuebox/sinks/kafka"
	natssink "github.com/queuebox/queuebox/sinks/nats"
	nullsink "github.com/queuebox/queuebox/sinks/null"
	rabbitsink "github.com/queuebox/queuebox/sinks/rabbitmq"
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
		// A duration reads as in the text format ("30s"), not as a count
		// of nanoseconds.
		opts.ReplaceAttr = func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				a.Value = slog.StringValue(a.Value.Duration().String())
			}
			return a
		}
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(RedactingHandler{Handler: h, Secrets: l.Secrets})
}

// OpenDialect opens the configured database for a relay (lazily: nothing
// connects yet).
func OpenDialect(ctx context.Context, l *Loaded) (dialects.Dialect, error) {
	return openDialectAs(ctx, l, dialects.RelayApplicationName)
}

// OpenToolDialect opens the configured database for a command that is not a
// relay (status, replay, migrate): its sessions go by another name, so that
// the relays do not count them as one of theirs.
func OpenToolDialect(ctx context.Context, l *Loaded) (dialects.Dialect, error) {
	return openDialectAs(ctx, l, dialects.ToolApplicationName)
}

func openDialectAs(ctx context.Context, l *Loaded, app string) (dialects.Dialect, error) {
	names := l.Names()
	switch l.Database.Dialect {
	case "sqlserver":
		return sqlserver.Open(ctx, sqlserver.Options{URL: l.Database.URL, Names: names, MaxConnections: l.Database.MaxConnections, ApplicationName: app})
	default:
		return postgres.Open(ctx, postgres.Options{URL: l.Database.URL, Names: names, MaxConnections: l.Database.MaxConnections, ApplicationName: app})
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
				NonRetryableStatus: d.NonRetryableStatus, MaxConnections: d.MaxConnections, SigningSecrets: cd.SigningKeys,
				CAFile: d.TLS.CAFile, InsecureSkipVerify: d.TLS.InsecureSkipVerify, MaxErrorBody: l.HTTP.MaxErrorBodyBytes,
			}
			out[name] = func() (sinks.Sink, error) { return httpsink.New(cfg) }
		case "rabbitmq":
			cd := l.Compiled.Destinations[name]
			cfg := rabbitsink.Config{
				URL: d.URL, Exchange: cd.Exchange, RoutingKey: cd.RoutingKey, Mandatory: d.Mandatory == nil || *d.Mandatory,
				DeclareExchange: d.DeclareExchange, Name: "queuebox " + name,
			}
			// New only checks (it connects on the first publish): a problem
			// here is the configuration's.
			if _, err := rabbitsink.New(cfg); err != nil {
				return nil, destinationError(l, name, err)
			}
			out[name] = func() (sinks.Sink, error) { return rabbitsink.New(cfg) }
		case "kafka":
			cd := l.Compiled.Destinations[name]
			cfg := kafkasink.Config{
				Brokers: d.Brokers, Topic: cd.Topic, Acks: d.Acks, Compression: d.Compression, Partitioner: d.Partitioner,
				SASL: kafkaSASL(d.SASL), TLS: kafkaTLS(d.TLS),
			}
			probe, err := kafkasink.New(cfg) // no connection yet: checks only
			if err != nil {
				return nil, destinationError(l, name, err)
			}
			_ = probe.Close()
			out[name] = func() (sinks.Sink, error) { return kafkasink.New(cfg) }
		case "nats":
			cd := l.Compiled.Destinations[name]
			cfg := natssink.Config{
				URL: d.URL, Subject: cd.Subject, JetStream: d.JetStream == nil || *d.JetStream,
				CredentialsFile: d.CredentialsFile, Name: "queuebox " + name,
			}
			if cfg.CredentialsFile != "" {
				if _, err := os.Stat(cfg.CredentialsFile); err != nil {
					return nil, &Error{File: l.File, Problems: []Problem{{Key: "destinations." + name + ".credentialsFile", Reason: err.Error()}}}
				}
			}
			// New connects (in the background when the server is away).
			out[name] = func() (sinks.Sink, error) { return natssink.New(cfg) }
		default:
			return nil, &Error{File: l.File, Problems: []Problem{{Key: "destinations." + name + ".type",
				Reason: fmt.Sprintf("%q is not a destination type", d.Type)}}}
		}
		out[name] = telemetry(l, name, out[name])
	}
	return out, nil
}

// kafkaSASL and kafkaTLS map the sasl and tls keys of a Kafka destination
// or Kafka inbox source onto sinks/kafka, which builds them for both.
func kafkaSASL(s SASLConfig) kafkasink.SASL {
	return kafkasink.SASL{Mechanism: s.Mechanism, Username: s.Username, Password: s.Password}
}

func kafkaTLS(t TLSConfig) kafkasink.TLS {
	return kafkasink.TLS{Enabled: t.Enabled, CAFile: t.CAFile, InsecureSkipVerify: t.InsecureSkipVerify}
}

// destinationError reports a sink's refusal of its configuration under the
// key it names.
func destinationError(l *Loaded, name string, err error) error {
	key, reason := "destinations."+name, err.Error()
	var ce *sinks.ConfigError
	if errors.As(err, &ce) {
		key, reason = key+"."+ce.Key, ce.Err.Error()
	}
	return &Error{File: l.File, Problems: []Problem{{Key: key, Reason: reason}}}
}

// EngineOptions maps the configuration onto the engine (of one outbox:
// l is its view, Loaded.ForOutbox), with sinks of its own.
func EngineOptions(l *Loaded, d dialects.Dialect, log *slog.Logger) (actors.Options, error) {
	factories, err := SinkFactories(l)
	if err != nil {
		return actors.Options{}, err
	}
	o := engineOptions(l, d, log)
	o.Destinations, o.Policies = factories, DestinationPolicies(l)
	return o, nil
}

// SharedDestinations builds the destinations that the engines of every
// outbox share: one sink, rate limit and circuit each.
func SharedDestinations(l *Loaded) (*actors.SharedDestinations, error) {
	factories, err := SinkFactories(l)
	if err != nil {
		return nil, err
	}
	inFlight := 0
	for _, v := range l.OutboxViews() {
		inFlight = max(inFlight, v.Outbox.MaxInFlight)
	}
	return actors.NewSharedDestinations(factories, DestinationPolicies(l), inFlight, nil), nil
}

// engineOptions maps an outbox's view onto its engine, without its
// destinations.
func engineOptions(l *Loaded, d dialects.Dialect, log *slog.Logger) actors.Options {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	o := l.Outbox
	return actors.Options{
		Dialect: d, Router: l.Compiled.Router,
		BatchSize: o.BatchSize, MaxInFlight: o.MaxInFlight, Lease: ms(o.ClaimTimeoutMs), PollInterval: ms(o.PollIntervalMs),
		ProbeInterval: ms(o.ProbeIntervalMs), LongTransactionWarning: ms(l.Database.LongTransactionWarningMs),
		Backoff: actors.Backoff{Initial: ms(o.Backoff.InitialMs), Multiplier: o.Backoff.Multiplier, Max: ms(o.Backoff.MaxMs), Jitter: o.Backoff.Jitter},
		Retention: actors.Retention{Delivered: time.Duration(o.Retention.Delivered), Dead: time.Duration(o.Retention.Dead),
			Interval: ms(o.Retention.IntervalMs), BatchSize: o.Retention.BatchSize},
		History:   actors.History{Enabled: o.History.Enabled, AllDeliveries: o.History.AllDeliveries, Retention: time.Duration(o.History.Retention)},
		Mailboxes: actors.Mailboxes{Claimer: l.Engine.Mailbox.Claimer, Key: l.Engine.Mailbox.Key, Sink: l.Engine.Mailbox.Sink, Completer: l.Engine.Mailbox.Completer},
		KeyIdle:   ms(l.Engine.KeyIdleMs), UnorderedConcurrency: l.Engine.UnorderedConcurrency,
		DrainTimeout: ms(l.Shutdown.DrainTimeoutMs), MaxErrorBytes: l.HTTP.MaxErrorBodyBytes,
		Redact: l.Secrets.Redact, Logger: log,
		Inbox: InboxRelayOptions(l),
	}
}

// DestinationPolicies maps each destination's rateLimit, maxConcurrency and
// circuitBreaker onto the engine.
func DestinationPolicies(l *Loaded) map[string]actors.DestinationPolicy {
	out := make(map[string]actors.DestinationPolicy, len(l.Destinations))
	for name, d := range l.Destinations {
		p := actors.DestinationPolicy{RatePerSecond: d.RateLimit.PerSecond, Burst: d.RateLimit.Burst, MaxConcurrency: d.MaxConcurrency}
		if cb := d.CircuitBreaker; cb.Enabled != nil && *cb.Enabled {
			p.CircuitBreaker = actors.CircuitBreaker{Window: time.Duration(cb.Window), MinAttempts: cb.MinAttempts, ProbeInterval: time.Duration(cb.ProbeInterval)}
		}
		out[name] = p
	}
	return out
}

// Stderr is where commands write logs; tests may swap it.
var Stderr io.Writer = os.Stderr
