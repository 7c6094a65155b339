// Package otelsetup configures OpenTelemetry tracing the way every
// OpenTelemetry program is configured: from the standard OTEL_* environment
// variables, read as the contrib autoexport package and the SDK read them.
//
//   - OTEL_TRACES_EXPORTER: otlp (the default), console (spans printed on
//     standard output) or none.
//   - OTEL_EXPORTER_OTLP_PROTOCOL (or ..._TRACES_PROTOCOL): http/protobuf
//     (the default) or grpc; OTEL_EXPORTER_OTLP_ENDPOINT (or
//     ..._TRACES_ENDPOINT), OTEL_EXPORTER_OTLP_HEADERS, ..._TIMEOUT,
//     ..._COMPRESSION and the rest of the OTLP exporter's variables.
//   - OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG: the SDK's samplers
//     (parentbased_always_on by default).
//   - OTEL_SERVICE_NAME (default queuebox) and OTEL_RESOURCE_ATTRIBUTES.
//   - OTEL_BSP_*: the batch span processor's queue, batch and delay.
//
// Tracing is off, with no exporter and no tracer provider at all, unless
// the environment has an OTEL_* variable; OTEL_TRACES_EXPORTER=none or
// OTEL_SDK_DISABLED=true turn it off whatever else is set. Spans are
// exported in batches in the background, and Shutdown flushes what is left.
package otelsetup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"
)

// DefaultServiceName is service.name when neither OTEL_SERVICE_NAME nor
// OTEL_RESOURCE_ATTRIBUTES names the service.
const DefaultServiceName = "queuebox"

// Options are what the environment does not say.
type Options struct {
	// Version is service.version (the release, or "dev").
	Version string
	// Logger hears export failures, at most one line per ten seconds; nil
	// discards them.
	Logger *slog.Logger
	// Console is where OTEL_TRACES_EXPORTER=console prints spans (one JSON
	// document each); nil is standard output.
	Console io.Writer
}

// Tracing is the configured tracing. A nil *Tracing, or one whose Provider
// is nil, is tracing off.
type Tracing struct {
	// Provider is where spans go; nil when tracing is off.
	Provider trace.TracerProvider
	// Description says where spans go, for the start-up log line (it holds
	// no header or credential).
	Description string
	sdk         *sdktrace.TracerProvider
}

// Enabled reports whether spans are made at all.
func (t *Tracing) Enabled() bool { return t != nil && t.Provider != nil }

// Shutdown exports the spans still buffered and stops the exporter, within
// ctx. It does nothing when tracing is off.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.sdk == nil {
		return nil
	}
	if err := t.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flushing the last spans: %w", err)
	}
	return nil
}

// FromEnv configures tracing from the environment. A variable that
// QueueBox cannot use is an error that names it (the same as Check).
func FromEnv(ctx context.Context, o Options) (*Tracing, error) {
	if err := errors.Join(problems(Check())...); err != nil {
		return nil, err
	}
	if !On() {
		return &Tracing{Description: "off"}, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	if o.Console != nil && strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")) == "console" {
		exp, err = stdouttrace.New(stdouttrace.WithWriter(o.Console))
	} else {
		exp, err = autoexport.NewSpanExporter(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: the exporter of OTEL_TRACES_EXPORTER: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceNameKey.String(DefaultServiceName), semconv.ServiceVersionKey.String(o.Version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID(),
	)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: the resource of OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	setErrorHandler(o.Logger)
	// The SDK reads OTEL_TRACES_SAMPLER(_ARG) and OTEL_BSP_* itself.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{Provider: tp, sdk: tp, Description: describe()}, nil
}

// On reports whether the environment turns tracing on: an OTEL_* variable
// is set, and neither OTEL_TRACES_EXPORTER=none nor OTEL_SDK_DISABLED=true.
func On() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if v := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); v != "" {
		return v != "none"
	}
	for _, kv := range os.Environ() {
		if name, value, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "OTEL_") && strings.TrimSpace(value) != "" {
			return true
		}
	}
	return false
}

// Problem is an OTEL_* variable whose value QueueBox cannot use.
type Problem struct {
	Variable, Value, Reason string
}

func (p Problem) Error() string {
	return fmt.Sprintf("the environment variable %s=%q %s", p.Variable, p.Value, p.Reason)
}

func problems(ps []Problem) []error {
	out := make([]error, len(ps))
	for i, p := range ps {
		out[i] = p
	}
	return out
}

// samplers are the values of OTEL_TRACES_SAMPLER that the SDK knows.
var samplers = []string{"always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"}

// Check reads the tracing variables of the environment and reports each
// that the exporter or the SDK would refuse or ignore. Without it, an
// unknown sampler falls back to the default with a line on standard error,
// and an unknown exporter fails only at start.
func Check() []Problem {
	var out []Problem
	env := func(name string) string { return strings.TrimSpace(os.Getenv(name)) }
	if v := env("OTEL_TRACES_EXPORTER"); v != "" && v != "otlp" && v != "console" && v != "none" {
		reason := "is not an exporter QueueBox has: use otlp (an OpenTelemetry collector, Jaeger, or any OTLP backend), console or none"
		if strings.Contains(v, ",") {
			reason = "names several exporters; QueueBox sends spans to one: use otlp, console or none"
		}
		out = append(out, Problem{"OTEL_TRACES_EXPORTER", v, reason})
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if v := env(name); v != "" && v != "http/protobuf" && v != "grpc" {
			out = append(out, Problem{name, v, "is not a protocol of the OTLP exporter: use http/protobuf (port 4318) or grpc (port 4317)"})
		}
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		v := env(name)
		if v == "" {
			continue
		}
		if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			out = append(out, Problem{name, redactURL(v), "is not a URL: write http://host:4318 (https:// for TLS; port 4317 with OTEL_EXPORTER_OTLP_PROTOCOL=grpc)"})
		}
	}
	sampler := strings.ToLower(env("OTEL_TRACES_SAMPLER"))
	if sampler != "" && !slices.Contains(samplers, sampler) {
		out = append(out, Problem{"OTEL_TRACES_SAMPLER", sampler, "is not a sampler the OpenTelemetry Go SDK has: use " + strings.Join(samplers, ", ")})
	}
	if arg := env("OTEL_TRACES_SAMPLER_ARG"); arg != "" && strings.HasSuffix(sampler, "traceidratio") {
		if f, err := strconv.ParseFloat(arg, 64); err != nil || f < 0 || f > 1 {
			out = append(out, Problem{"OTEL_TRACES_SAMPLER_ARG", arg, "is not a ratio: write a number from 0 to 1 (0.25 keeps a quarter of the traces that start here)"})
		}
	}
	return out
}

// describe says where spans go, without credentials.
func describe() string {
	exporter := os.Getenv("OTEL_TRACES_EXPORTER")
	if exporter == "" {
		exporter = "otlp"
	}
	sampler := os.Getenv("OTEL_TRACES_SAMPLER")
	if sampler == "" {
		sampler = "parentbased_always_on"
	}
	if a := os.Getenv("OTEL_TRACES_SAMPLER_ARG"); a != "" {
		sampler += " " + a
	}
	if exporter != "otlp" {
		return fmt.Sprintf("%s, sampler %s", exporter, sampler)
	}
	proto := firstSet("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	if proto == "" {
		proto = "http/protobuf"
	}
	endpoint := firstSet("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
	if endpoint == "" {
		endpoint = "http://localhost:4318"
		if proto == "grpc" {
			endpoint = "http://localhost:4317"
		}
	}
	return fmt.Sprintf("otlp %s to %s, sampler %s", proto, redactURL(endpoint), sampler)
}

func firstSet(names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(os.Getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// redactURL drops a password from an endpoint before it is shown.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = url.User(u.User.Username())
	return u.String()
}

// errorLog reports the SDK's errors (an export that failed: the collector
// is away) through the logger, the first at once and then at most one line
// per interval, with how many were left out in between: a collector that
// is down must not flood the log.
type errorLog struct {
	log     *slog.Logger
	every   rate.Sometimes
	dropped atomic.Int64
}

func newErrorLog(log *slog.Logger, interval time.Duration) *errorLog {
	return &errorLog{log: log, every: rate.Sometimes{First: 1, Interval: interval}}
}

func (e *errorLog) Handle(err error) {
	logged := false
	e.every.Do(func() {
		logged = true
		e.log.Warn("tracing: "+err.Error(), "suppressed", e.dropped.Swap(0))
	})
	if !logged {
		e.dropped.Add(1)
	}
}

// setErrorHandler sends OpenTelemetry's errors to log. The handler is the
// process's (OpenTelemetry keeps one), which is why only FromEnv sets it.
func setErrorHandler(log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	otel.SetErrorHandler(newErrorLog(log, 10*time.Second))
}
