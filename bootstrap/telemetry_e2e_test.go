package bootstrap

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testlog"
	"github.com/queuebox/queuebox/internal/testotlp"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// setOTEL sets the tracing environment of a test (and clears the OTEL_*
// variables it does not set).
func setOTEL(t *testing.T, kv map[string]string) {
	t.Helper()
	for _, e := range os.Environ() {
		if name, _, _ := strings.Cut(e, "="); strings.HasPrefix(name, "OTEL_") {
			t.Setenv(name, "")
		}
	}
	for k, v := range kv {
		t.Setenv(k, v)
	}
}

// One trace from the sender to the destination: a message posted to an
// HTTP inbox source with a traceparent is stored under a receipt span (a
// child of the sender's), relayed, and delivered by attempts whose spans
// are children of the receipt; the destination gets the attempt's own
// traceparent, of the sender's trace. Each attempt's span says the
// destination, the row id, the attempt and the outcome. The spans are
// exported over OTLP/HTTP as the OTEL_* variables say, and those still
// buffered at shutdown are flushed then.
func TestRunTracesFromInboxToDestination(t *testing.T) {
	otlp := testotlp.New(t)
	setOTEL(t, map[string]string{
		"OTEL_TRACES_EXPORTER":        "otlp",
		"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.URL,
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_TRACES_SAMPLER":         "always_on",
		"OTEL_SERVICE_NAME":           "relay-under-test",
		// Nothing is exported before shutdown: the flush must send it.
		"OTEL_BSP_SCHEDULE_DELAY": "600000",
	})
	var calls atomic.Int32
	recv := testrecv.New(t, func(*testrecv.Request) (int, string, map[string]string) {
		if calls.Add(1) == 1 {
			return http.StatusServiceUnavailable, "busy", nil
		}
		return http.StatusOK, "", nil
	})

	cfg := Defaults()
	cfg.Database.URL = testdb.Database(t)
	cfg.Outbox.PollIntervalMs = 50
	cfg.Outbox.Backoff.InitialMs = 50
	cfg.Shutdown.DrainTimeoutMs = 5000
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Destinations = map[string]*DestinationConfig{"hook": {Type: "http", URL: recv.URL + "/{{ topic }}"}}
	cfg.Routes = []RouteConfig{{TopicPattern: "#", Destination: "hook"}}
	cfg.Inbox.Sources = map[string]*InboxSourceConfig{"payments": {Type: "http", Topic: "payment.in", AggregateID: "{{ headers.X-Order }}"}}
	l, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := openDialect(t, l)
	logs := &testlog.Buffer{}
	sigs, started, done := make(chan os.Signal, 2), make(chan struct{}), make(chan error, 1)
	adminURL := make(chan string, 1)
	stop := watchSignals(sigs)
	t.Cleanup(stop.Release)
	go func() {
		done <- Run(stop.Stop, l, d, logs.Logger(), RunOptions{Migrate: true, Abort: stop.Abort,
			Started: func(*actors.Engine) { close(started) }, AdminListening: func(u string) { adminURL <- u }})
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("run ended at start: %v\n%s", err, logs.String())
	case <-time.After(time.Minute):
		t.Fatal("run did not start")
	}
	logs.WaitFor(t, "tracing on")
	if !strings.Contains(logs.String(), "otlp http/protobuf to "+otlp.URL+", sampler always_on") {
		t.Errorf("the start-up line does not say where spans go:\n%s", logs.String())
	}

	// The sender's span, as an application instrumented with OpenTelemetry
	// makes it.
	tp := sdktrace.NewTracerProvider()
	ctx, sender := tp.Tracer("sender").Start(context.Background(), "checkout")
	sender.End()
	h := map[string]string{}
	propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(h))
	req, _ := http.NewRequest(http.MethodPost, strings.TrimSuffix(<-adminURL, "/")+"/inbox/payments", strings.NewReader(`{"amount": 1250}`))
	req.Header.Set("traceparent", h["traceparent"])
	req.Header.Set("X-Order", "order-7")
	req.Header.Set("X-Message-Id", "pay-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the inbox answered %d", resp.StatusCode)
	}
	recv.WaitDelivered(t, 1, time.Minute)
	reqs := recv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want a failed attempt and a delivery", len(reqs))
	}
	if n := len(otlp.Spans()); n != 0 {
		t.Fatalf("%d spans exported before shutdown with a schedule delay of ten minutes", n)
	}

	sigs <- syscall.SIGTERM
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after SIGTERM: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not stop after SIGTERM")
	}

	// Run has returned: the spans were flushed on the way out.
	receive := otlp.Wait(t, "receive payments", 1)[0]
	sends := otlp.Wait(t, "send hook", 2)
	traceID := sender.SpanContext().TraceID().String()
	if receive.TraceID != traceID || receive.ParentSpanID != sender.SpanContext().SpanID().String() {
		t.Errorf("the receipt's span: trace %s parent %s; want the sender's trace %s and span %s", receive.TraceID, receive.ParentSpanID, traceID, sender.SpanContext().SpanID())
	}
	if receive.Kind != tracepb.Span_SPAN_KIND_CONSUMER || receive.Attributes["messaging.message.id"] != "pay-1" || receive.Attributes["messaging.destination.name"] != "payments" {
		t.Errorf("the receipt's span: kind %v, attributes %v", receive.Kind, receive.Attributes)
	}
	if receive.Resource["service.name"] != "relay-under-test" {
		t.Errorf("service.name %v, want OTEL_SERVICE_NAME's", receive.Resource["service.name"])
	}
	byAttempt := map[int64]testotlp.Span{}
	for _, s := range sends {
		byAttempt[s.Attributes["queuebox.attempt"].(int64)] = s
		if s.TraceID != traceID || s.ParentSpanID != receive.SpanID {
			t.Errorf("attempt %v: trace %s parent %s; want the receipt %s of trace %s", s.Attributes["queuebox.attempt"], s.TraceID, s.ParentSpanID, receive.SpanID, traceID)
		}
		if s.Kind != tracepb.Span_SPAN_KIND_PRODUCER || s.Attributes["messaging.destination.name"] != "hook" || s.Attributes["messaging.system"] != "http" ||
			s.Attributes["messaging.message.id"] != reqs[0].ID {
			t.Errorf("attempt span: kind %v, attributes %v; want the destination hook and the row id %s", s.Kind, s.Attributes, reqs[0].ID)
		}
	}
	failed, ok := byAttempt[0]
	if !ok || failed.StatusCode != tracepb.Status_STATUS_CODE_ERROR || !strings.Contains(failed.StatusMessage, "503") {
		t.Errorf("the failed attempt's span: %+v; want status error with the 503", failed)
	}
	delivered, ok := byAttempt[1]
	if !ok || delivered.StatusCode == tracepb.Status_STATUS_CODE_ERROR {
		t.Fatalf("the delivery's span: %+v", delivered)
	}
	got := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(reqs[1].Header)))
	if got.TraceID().String() != traceID || got.SpanID().String() != delivered.SpanID {
		t.Errorf("the destination got traceparent %q; want trace %s, span %s (the attempt's)", reqs[1].Header.Get("traceparent"), traceID, delivered.SpanID)
	}
	if reqs[0].Header.Get("traceparent") == reqs[1].Header.Get("traceparent") {
		t.Errorf("two attempts sent the same traceparent %q", reqs[0].Header.Get("traceparent"))
	}
}
