package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/queuebox/queuebox/internal/otelsetup"
	"github.com/queuebox/queuebox/internal/testdest"
)

// With OTEL_TRACES_EXPORTER=console, a row whose headers carry a
// traceparent is delivered with a traceparent of the same trace and a new
// parent id (the attempt's span), and that span is printed on standard
// output when tracing shuts down.
func TestConsoleExporter(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "OTEL_") {
			t.Setenv(name, "")
			_ = os.Unsetenv(name)
		}
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	var out bytes.Buffer
	otel, err := otelsetup.FromEnv(context.Background(), otelsetup.Options{Version: "test", Console: &out})
	if err != nil {
		t.Fatal(err)
	}
	d := testdest.Open(t, "http", testdest.Options{})
	sender, h := producer(t, sdktrace.NewTracerProvider(), TraceparentHeader)
	testdest.PublishThrough(t, New(otel.Provider, "test", nil).Wrap(d.Sink, Destination{Name: "orders", Type: "http"}), message("order.created", 0, h))
	got, _ := d.Wait(t, 1)[0].Get(TraceparentHeader)
	if err := otel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	sc := parse(t, got)
	if sc.TraceID() != sender.TraceID() || sc.SpanID() == sender.SpanID() {
		t.Fatalf("delivered with traceparent %s, want trace %s and a parent other than the producer's %s", got, sender.TraceID(), sender.SpanID())
	}
	var span struct {
		Name        string
		SpanContext struct{ TraceID, SpanID string }
		Parent      struct{ TraceID, SpanID string }
	}
	if err := json.NewDecoder(&out).Decode(&span); err != nil {
		t.Fatalf("standard output is not a printed span (%v):\n%s", err, out.String())
	}
	if span.Name != "send orders" || span.SpanContext.TraceID != sc.TraceID().String() || span.SpanContext.SpanID != sc.SpanID().String() || span.Parent.SpanID != sender.SpanID().String() {
		t.Errorf("printed span %+v, want send orders, span %s of trace %s, child of %s", span, sc.SpanID(), sc.TraceID(), sender.SpanID())
	}
}
