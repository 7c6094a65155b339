package bootstrap

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/internal/otelsetup"
	"github.com/queuebox/queuebox/sinks"
	"github.com/queuebox/queuebox/sinks/cloudevents"
	"github.com/queuebox/queuebox/sinks/tracing"
)

// CloudEventsConfig is a destination's cloudEvents key: every message it
// sends is a CloudEvent (sinks/cloudevents says how each binding carries
// it). Any type but null.
type CloudEventsConfig struct {
	// Mode is binary (the attributes in headers; the default) or
	// structured (the event as a JSON document in the body).
	Mode string `yaml:"mode" zero:"write binary or structured, or leave mode out for binary"`
	// Source is the event's source, a template; required.
	Source string `yaml:"source"`
	// Type is the event's type, a template; {{ topic }} by default.
	Type string `yaml:"type" zero:"give a template, or leave type out for {{ topic }}"`
}

// applyCloudEventsDefaults fills mode and type, so that config check
// prints what is sent.
func (d *DestinationConfig) applyCloudEventsDefaults() {
	if d.CloudEvents == nil {
		return
	}
	if d.CloudEvents.Mode == "" {
		d.CloudEvents.Mode = string(cloudevents.Binary)
	}
	if d.CloudEvents.Type == "" {
		d.CloudEvents.Type = cloudevents.DefaultType
	}
}

// cloudEvents checks and compiles a destination's cloudEvents key (a key
// of another type, null's, is reported by foreignKeys).
func (v *validator) cloudEvents(key string, d *DestinationConfig, cd *CompiledDestination) {
	ceKey := key + ".cloudEvents"
	if _, ok := cloudevents.BindingOf(d.Type); !ok {
		return
	}
	s := d.CloudEvents
	if s == nil {
		if v.d.present[ceKey] && !v.d.bad[ceKey] {
			// cloudEvents: written with nothing under it.
			v.add(ceKey, "is empty; give it at least a source (cloudEvents: { source: /shop/orders }), or remove it to send plain messages")
		}
		return
	}
	c, err := cloudevents.Compile(d.Type, cloudevents.Settings{Mode: s.Mode, Source: s.Source, Type: s.Type})
	if err != nil {
		// Every problem of the block, each under its key.
		for _, p := range cloudevents.Problems(err) {
			k, reason := ceKey, p.Error()
			var ce *sinks.ConfigError
			if errors.As(p, &ce) {
				k, reason = key+"."+ce.Key, ce.Err.Error()
			}
			v.add(k, "%s", reason)
		}
		return
	}
	cd.CloudEvents = &c
}

// telemetry wraps the sinks a destination's factory makes: CloudEvents
// inside (the sink signs and sends the event), the delivery's span outside
// (it covers the whole attempt, and the message the CloudEvents wrapper
// gets already holds the attempt's traceparent). Without cloudEvents and
// with tracing off, the factory is returned as it is.
func telemetry(l *Loaded, name string, f actors.SinkFactory) actors.SinkFactory {
	d := l.Destinations[name]
	var ce *cloudevents.Config
	if cd := l.Compiled.Destinations[name]; cd != nil {
		ce = cd.CloudEvents
	}
	tracer := l.Tracer
	if ce == nil && tracer == nil {
		return f
	}
	dest := tracing.Destination{Name: name, Type: d.Type, Address: address(d)}
	return func() (sinks.Sink, error) {
		s, err := f()
		if err != nil {
			return nil, err
		}
		if ce != nil {
			s = cloudevents.Wrap(s, *ce)
		}
		return tracer.Wrap(s, dest), nil
	}
}

// address is the template of where a destination sends: its span's
// messaging.destination.template.
func address(d *DestinationConfig) string {
	switch d.Type {
	case "http":
		return d.URL
	case "rabbitmq":
		if d.Exchange == "" && d.ExchangeFrom != "" {
			return "{{ aggregateType }}"
		}
		return d.Exchange
	case "kafka":
		return d.Topic
	case "nats":
		return d.Subject
	}
	return ""
}

// TracingProblems reports the OTEL_* variables of the environment that
// tracing cannot use (see internal/otelsetup), as problems of the
// configuration file: `config check` and `run` refuse them.
func TracingProblems(file string) error {
	ps := otelsetup.Check()
	if len(ps) == 0 {
		return nil
	}
	e := &Error{File: file}
	for _, p := range ps {
		e.Problems = append(e.Problems, Problem{Key: p.Variable + " (environment)", Reason: p.Error()})
	}
	return e
}

// tracingShutdownTimeout bounds the flush of the last spans at shutdown: a
// collector that is away must not hold the exit.
const tracingShutdownTimeout = 5 * time.Second

// startTracing sets tracing up from the OTEL_* environment (off, at no
// cost, when none is set), puts its tracer in l.Tracer for the sinks and
// the inbox, and logs once where spans go. The returned stop flushes the
// spans still buffered, within tracingShutdownTimeout.
func startTracing(ctx context.Context, l *Loaded, log *slog.Logger) (stop func(), err error) {
	if err := TracingProblems(l.File); err != nil {
		return nil, err
	}
	t, err := otelsetup.FromEnv(ctx, otelsetup.Options{Version: Version, Logger: log})
	if err != nil {
		return nil, &ExitError{Code: 1, Err: err}
	}
	if !t.Enabled() {
		log.Debug("tracing off (no OTEL_* variable set, or OTEL_TRACES_EXPORTER=none)")
		return func() {}, nil
	}
	l.Tracer = tracing.New(t.Provider, Version, l.Secrets.Redact)
	log.Info("tracing on", "exporter", t.Description)
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingShutdownTimeout)
		defer cancel()
		if err := t.Shutdown(sctx); err != nil {
			log.Warn("tracing: the last spans were not all exported", "error", err)
		}
	}, nil
}
