package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testbin"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testlog"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// withoutOTEL is the test's environment without its OTEL_* variables,
// plus kv.
func withoutOTEL(kv ...string) []string {
	var out []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "OTEL_") {
			out = append(out, e)
		}
	}
	return append(out, kv...)
}

// consoleSpan is the part of a span that the console exporter prints that
// the test reads.
type consoleSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
}

// With OTEL_TRACES_EXPORTER=console, a row whose headers carry a
// traceparent reaches its destination with a traceparent of the same trace
// and a new parent id (the attempt's span), and the binary prints that
// span on standard output.
func TestRunPrintsSpansWithTheConsoleExporter(t *testing.T) {
	t.Parallel()
	dbURL := testdb.Database(t)
	recv := testrecv.New(t, nil)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
destinations: { hook: { type: http, url: "%s/{{ topic }}" } }
routes: [ { topicPattern: "#", destination: hook } ]
admin: { listen: "127.0.0.1:0" }
`, dbURL, recv.URL))
	if _, stderr, code := run(t, "migrate", "up", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	d, err := postgres.Open(context.Background(), postgres.Options{URL: dbURL, Names: dialects.DefaultNames()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		parent  = "00f067aa0ba902b7"
	)
	row := testkit.Row("order.created")
	row.Headers = []byte(`{"traceparent": "00-` + traceID + `-` + parent + `-01", "tracestate": "shop=1"}`)
	if err := d.OutboxInsert(context.Background(), []dialects.NewRow{row}); err != nil {
		t.Fatal(err)
	}

	relay := exec.Command(testbin.Path(t), "run", "--config", cfg)
	relay.Env = withoutOTEL("OTEL_TRACES_EXPORTER=console")
	var stdout bytes.Buffer
	logs := &testlog.Buffer{}
	relay.Stdout, relay.Stderr = &stdout, logs
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relay.Process.Kill() })
	recv.WaitDelivered(t, 1, time.Minute)
	_ = relay.Process.Signal(syscall.SIGTERM)
	if err := relay.Wait(); err != nil {
		t.Fatalf("run exited with %v after SIGTERM\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), "tracing on") || !strings.Contains(logs.String(), "console, sampler parentbased_always_on") {
		t.Errorf("the start-up line does not say where spans go:\n%s", logs.String())
	}

	got := recv.Requests()[0].Header
	tp := strings.Split(got.Get("traceparent"), "-")
	if len(tp) != 4 || tp[1] != traceID || tp[2] == parent || tp[2] == strings.Repeat("0", 16) {
		t.Fatalf("the destination got traceparent %q; want trace %s with a parent id of its own", got.Get("traceparent"), traceID)
	}
	if got.Get("tracestate") != "shop=1" {
		t.Errorf("tracestate %q, want the row's shop=1", got.Get("tracestate"))
	}

	// The span of the attempt, printed as JSON on standard output.
	var spans []consoleSpan
	dec := json.NewDecoder(bufio.NewReader(&stdout))
	for dec.More() {
		var s consoleSpan
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("standard output is not the console exporter's spans: %v\n%s", err, stdout.String())
		}
		spans = append(spans, s)
	}
	if len(spans) != 1 {
		t.Fatalf("%d spans printed, want the one delivery's", len(spans))
	}
	s := spans[0]
	if s.Name != "send hook" || s.SpanContext.TraceID != traceID || s.SpanContext.SpanID != tp[2] || s.Parent.SpanID != parent {
		t.Errorf("printed span %+v; want send hook, trace %s, span %s, parent %s", s, traceID, tp[2], parent)
	}
	attrs := map[string]any{}
	for _, a := range s.Attributes {
		attrs[a.Key] = a.Value.Value
	}
	if attrs["messaging.destination.name"] != "hook" || attrs["messaging.message.id"] != recv.Requests()[0].ID {
		t.Errorf("printed attributes %v", attrs)
	}
}

// config check refuses an OTEL_* variable that tracing cannot use, as a
// problem of the configuration (exit 2), and so does run.
func TestConfigCheckNamesABadTracingVariable(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, `database: { url: "postgres://localhost/app" }
destinations: { n: { type: "null" } }
routes: [ { topicPattern: "#", destination: n } ]
`)
	for _, args := range [][]string{{"config", "check", "--config", cfg}, {"run", "--config", cfg}} {
		cmd := exec.Command(testbin.Path(t), args...)
		cmd.Env = withoutOTEL("OTEL_TRACES_EXPORTER=jaeger")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), `OTEL_TRACES_EXPORTER (environment): the environment variable OTEL_TRACES_EXPORTER="jaeger" is not an exporter`) {
			t.Errorf("%s: %v\n%s", args[0], err, stderr.String())
		}
	}
}
