package otelsetup

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testotlp"
)

// clearEnv unsets every OTEL_* variable for the test (and restores them
// after it).
func clearEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "OTEL_") {
			t.Setenv(name, "") // restores the value when the test ends
			_ = os.Unsetenv(name)
		}
	}
}

func setEnv(t *testing.T, kv ...string) {
	t.Helper()
	clearEnv(t)
	for i := 0; i < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

func fromEnv(t *testing.T) *Tracing {
	t.Helper()
	tr, err := FromEnv(context.Background(), Options{Version: "1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr
}

func TestOff(t *testing.T) {
	for _, c := range []struct {
		name string
		env  []string
	}{
		{"no OTEL variable", nil},
		{"empty values", []string{"OTEL_SERVICE_NAME", " ", "OTEL_TRACES_EXPORTER", ""}},
		{"exporter none", []string{"OTEL_TRACES_EXPORTER", "none", "OTEL_SERVICE_NAME", "relay"}},
		{"SDK disabled", []string{"OTEL_SDK_DISABLED", "true", "OTEL_TRACES_EXPORTER", "otlp"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			setEnv(t, c.env...)
			tr := fromEnv(t)
			if tr.Enabled() || tr.Provider != nil || tr.Description != "off" {
				t.Errorf("tracing is on (%q) with %v", tr.Description, c.env)
			}
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Errorf("Shutdown with tracing off: %v", err)
			}
		})
	}
	var none *Tracing
	if none.Enabled() || none.Shutdown(context.Background()) != nil {
		t.Error("a nil *Tracing is not tracing off")
	}
}

// The OTLP exporter sends to the endpoint of the environment, with the
// service's name and version, and Shutdown flushes: the span is at the
// receiver when Shutdown returns, well before the batch's delay.
func TestOTLPFromEnv(t *testing.T) {
	for _, c := range []struct {
		name, service string
		env           []string
	}{
		{"named", "orders-relay", []string{"OTEL_SERVICE_NAME", "orders-relay"}},
		{"default name", DefaultServiceName, nil},
		{"resource attributes", "from-attributes", []string{"OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes,deployment.environment=test"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			recv := testotlp.New(t)
			setEnv(t, append([]string{"OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL, "OTEL_BSP_SCHEDULE_DELAY", "60000"}, c.env...)...)
			tr := fromEnv(t)
			if !tr.Enabled() || !strings.Contains(tr.Description, "otlp http/protobuf to "+recv.URL) {
				t.Fatalf("tracing: enabled %v, %q", tr.Enabled(), tr.Description)
			}
			_, span := tr.Provider.Tracer("test").Start(context.Background(), "work")
			span.End()
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := recv.Spans()
			if len(got) != 1 || got[0].Name != "work" {
				t.Fatalf("received %+v after Shutdown, want the span", got)
			}
			if got[0].Resource["service.name"] != c.service || got[0].Resource["service.version"] != "1.2.3" {
				t.Errorf("resource %v, want service.name %s and service.version 1.2.3", got[0].Resource, c.service)
			}
		})
	}
}

// The sampler of OTEL_TRACES_SAMPLER decides which new traces are kept.
func TestSamplerFromEnv(t *testing.T) {
	recv := testotlp.New(t)
	setEnv(t, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", recv.TracesURL, "OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0")
	tr := fromEnv(t)
	if !strings.Contains(tr.Description, "sampler traceidratio 0") {
		t.Errorf("description %q does not name the sampler", tr.Description)
	}
	for range 20 {
		_, span := tr.Provider.Tracer("test").Start(context.Background(), "dropped")
		span.End()
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := recv.Spans(); len(got) != 0 {
		t.Errorf("a ratio of 0 kept %d spans", len(got))
	}
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		env      []string
		variable string
		says     string
	}{
		{[]string{"OTEL_TRACES_EXPORTER", "jaeger"}, "OTEL_TRACES_EXPORTER", "use otlp"},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp,console"}, "OTEL_TRACES_EXPORTER", "several exporters"},
		{[]string{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf (port 4318) or grpc"},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "udp"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "or grpc"},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT", "not a URL"},
		{[]string{"OTEL_TRACES_SAMPLER", "jaeger_remote"}, "OTEL_TRACES_SAMPLER", "parentbased_traceidratio"},
		{[]string{"OTEL_TRACES_SAMPLER", "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG", "1.5"}, "OTEL_TRACES_SAMPLER_ARG", "from 0 to 1"},
	} {
		setEnv(t, c.env...)
		ps := Check()
		if len(ps) != 1 || ps[0].Variable != c.variable || !strings.Contains(ps[0].Error(), c.says) || !strings.Contains(ps[0].Error(), c.variable) {
			t.Errorf("%v: Check() = %v, want one problem with %s saying %q", c.env, ps, c.variable, c.says)
		}
		if _, err := FromEnv(context.Background(), Options{}); err == nil || !strings.Contains(err.Error(), c.variable) {
			t.Errorf("%v: FromEnv = %v, want the problem", c.env, err)
		}
	}
	setEnv(t, "OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_TRACES_SAMPLER", "ParentBased_TraceIDRatio",
		"OTEL_TRACES_SAMPLER_ARG", "0.25", "OTEL_EXPORTER_OTLP_ENDPOINT", "https://queuebox:s3cret@collector.internal:4317")
	if ps := Check(); len(ps) != 0 {
		t.Errorf("a good environment has problems: %v", ps)
	}
	tr := fromEnv(t)
	if want := "otlp grpc to https://queuebox@collector.internal:4317, sampler ParentBased_TraceIDRatio 0.25"; tr.Description != want {
		t.Errorf("description %q, want %q", tr.Description, want)
	}
}

// An exporter that fails (a collector that is away) is logged, at most a
// line per interval, and the lines left out are counted for the next.
func TestExportErrorsAreLoggedSparingly(t *testing.T) {
	var buf bytes.Buffer
	e := newErrorLog(slog.New(slog.NewTextHandler(&buf, nil)), time.Hour)
	for range 5 {
		e.Handle(errors.New("traces export: connection refused"))
	}
	if n := strings.Count(buf.String(), "connection refused"); n != 1 || !strings.Contains(buf.String(), "suppressed=0") {
		t.Fatalf("%d lines for 5 errors in one interval:\n%s", n, buf.String())
	}
	if n := e.dropped.Load(); n != 4 {
		t.Errorf("%d errors counted for the next line, want 4", n)
	}
}
