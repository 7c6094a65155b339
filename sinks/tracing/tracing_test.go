package tracing

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/queuebox/queuebox/internal/testdest"
	"github.com/queuebox/queuebox/internal/testotlp"
	"github.com/queuebox/queuebox/internal/testrabbit"
	"github.com/queuebox/queuebox/sinks"
)

func TestMain(m *testing.M) { testrabbit.Main(m) }

// otlp is a tracer provider that exports over OTLP/HTTP to a receiver of
// the test's own, as a deployment exports to its collector.
type otlp struct {
	tp   *sdktrace.TracerProvider
	recv *testotlp.Receiver
}

func newOTLP(t *testing.T, sampler sdktrace.Sampler) *otlp {
	t.Helper()
	recv := testotlp.New(t)
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(recv.TracesURL))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithSampler(sampler))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &otlp{tp: tp, recv: recv}
}

// flush exports every ended span now.
func (o *otlp) flush(t *testing.T) {
	t.Helper()
	if err := o.tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// producer starts and ends the span of the application that writes a row,
// and returns its context as the row's headers carry it (name is the
// header's spelling of traceparent).
func producer(t *testing.T, tp trace.TracerProvider, name string) (trace.SpanContext, map[string]string) {
	t.Helper()
	ctx, span := tp.Tracer("shop").Start(context.Background(), "insert order")
	span.End()
	h := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, h)
	if name != TraceparentHeader {
		h[name] = h[TraceparentHeader]
		delete(h, TraceparentHeader)
	}
	return span.SpanContext(), h
}

// parse reads a traceparent header value.
func parse(t *testing.T, v string) trace.SpanContext {
	t.Helper()
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{TraceparentHeader: v})
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		t.Fatalf("%q is not a traceparent", v)
	}
	return sc
}

func message(topic string, attempt int, headers map[string]string) sinks.Message {
	return sinks.Message{ID: uuid.NewString(), Topic: topic, Key: "cust-42", Attempt: attempt, CreatedAt: time.Now(),
		Headers: headers, Body: []byte(`{"amount":1250}`)}
}

// TestDeliverySpans delivers through every real sink: a row with the
// producer's context (in the W3C spelling, and as the HTTP inbox stores
// it), and a row without one.
func TestDeliverySpans(t *testing.T) {
	for _, typ := range testdest.Types {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			o := newOTLP(t, sdktrace.ParentBased(sdktrace.AlwaysSample()))
			d := testdest.Open(t, typ, testdest.Options{})
			s := New(o.tp, "test", nil).Wrap(d.Sink, Destination{Name: "orders", Type: typ, Address: d.Address})
			if _, ok := d.Sink.(sinks.OrderedBatcher); ok {
				if _, still := s.(sinks.OrderedBatcher); !still {
					t.Error("the wrapped sink is no longer an OrderedBatcher")
				}
			}
			p1, h1 := producer(t, o.tp, TraceparentHeader)
			p2, h2 := producer(t, o.tp, "Traceparent")
			h1["X-Custom"] = "kept"
			msgs := []sinks.Message{message("order.created", 0, h1), message("order.paid", 3, h2), message("order.shipped", 1, nil)}
			before := fmt.Sprint(h1)
			testdest.PublishThrough(t, s, msgs...)
			if fmt.Sprint(h1) != before {
				t.Errorf("the caller's headers changed: %v, were %v", h1, before)
			}
			got := d.Wait(t, len(msgs))
			o.flush(t)
			o.recv.Wait(t, "send orders", len(msgs))
			for i, r := range got {
				tp, ok := r.Get(TraceparentHeader)
				if !ok {
					t.Fatalf("message %d arrived without a traceparent: %v", i, r.Headers)
				}
				n := 0
				for _, h := range r.Headers {
					if strings.EqualFold(h.Name, TraceparentHeader) {
						n++
					}
				}
				if n != 1 {
					t.Errorf("message %d arrived with %d traceparent headers: %v", i, n, r.Headers)
				}
				sc := parse(t, tp)
				span, err := o.recv.ByID(sc.SpanID().String())
				if err != nil {
					t.Fatalf("message %d: its traceparent %s is not the id of an exported span: %v", i, tp, err)
				}
				switch i {
				case 0, 1:
					parent := []trace.SpanContext{p1, p2}[i]
					if sc.TraceID() != parent.TraceID() || span.ParentSpanID != parent.SpanID().String() {
						t.Errorf("message %d: trace %s parent %s, want the producer's trace %s and span %s", i, sc.TraceID(), span.ParentSpanID, parent.TraceID(), parent.SpanID())
					}
				case 2:
					if span.ParentSpanID != "" || sc.TraceID() == p1.TraceID() || sc.TraceID() == p2.TraceID() {
						t.Errorf("the row without a trace context: trace %s parent %q, want a new trace", sc.TraceID(), span.ParentSpanID)
					}
				}
				if sc.SpanID() == p1.SpanID() || sc.SpanID() == p2.SpanID() {
					t.Errorf("message %d carries the producer's span id, not the attempt's", i)
				}
				want := map[string]any{
					"messaging.system": typ, "messaging.destination.name": "orders", "messaging.destination.template": d.Address,
					"messaging.operation.type": "send", "messaging.operation.name": "send",
					"messaging.message.id": msgs[i].ID, "queuebox.attempt": int64(msgs[i].Attempt), "queuebox.topic": msgs[i].Topic,
					"queuebox.key": "cust-42", "messaging.message.body.size": int64(len(msgs[i].Body)),
				}
				for k, v := range want {
					if span.Attributes[k] != v {
						t.Errorf("message %d: span attribute %s = %v (%T), want %v (%T)", i, k, span.Attributes[k], span.Attributes[k], v, v)
					}
				}
				if span.Kind != tracepb.Span_SPAN_KIND_PRODUCER || span.StatusCode != tracepb.Status_STATUS_CODE_UNSET || span.Scope != ScopeName {
					t.Errorf("message %d: kind %s, status %s, scope %q; want producer, unset, %s", i, span.Kind, span.StatusCode, span.Scope, ScopeName)
				}
			}
			if v, _ := got[0].Get("X-Custom"); v != "kept" {
				t.Errorf("the row's header X-Custom = %q, want kept", v)
			}
		})
	}
}

// stub is a sink that fails each message as told: the outcomes a span
// must report, whatever the destination.
type stub []error

func (s stub) Publish(_ context.Context, msgs []sinks.Message) []error { return s[:len(msgs)] }
func (stub) Close() error                                              { return nil }

func TestFailedDeliverySpans(t *testing.T) {
	o := newOTLP(t, sdktrace.AlwaysSample())
	redact := func(s string) string { return strings.ReplaceAll(s, "hunter2", "[REDACTED]") }
	fail := stub{
		sinks.Permanent(errors.New("HTTP 400 Bad Request: token hunter2 refused")),
		sinks.WithRetryAfter(errors.New("HTTP 503 Service Unavailable"), time.Second),
		sinks.NotDelivered("x", context.DeadlineExceeded),
		errors.New("connection refused"),
		nil,
	}
	s := New(o.tp, "test", redact).Wrap(fail, Destination{Name: "hooks", Type: "http"})
	var msgs []sinks.Message
	for range fail {
		msgs = append(msgs, message("t", 0, nil))
	}
	errs := s.Publish(context.Background(), msgs)
	for i := range fail {
		if !errors.Is(errs[i], fail[i]) {
			t.Errorf("result %d = %v, want the sink's %v", i, errs[i], fail[i])
		}
	}
	o.flush(t)
	o.recv.Wait(t, "send hooks", len(msgs))
	want := []struct {
		code    tracepb.Status_StatusCode
		errType any
		says    string
	}{
		{tracepb.Status_STATUS_CODE_ERROR, "permanent", "token [REDACTED] refused"},
		{tracepb.Status_STATUS_CODE_ERROR, "retry_after", "HTTP 503"},
		{tracepb.Status_STATUS_CODE_ERROR, "timeout", "not delivered"},
		{tracepb.Status_STATUS_CODE_ERROR, "_OTHER", "connection refused"},
		{tracepb.Status_STATUS_CODE_UNSET, nil, ""},
	}
	for i, m := range msgs {
		var span testotlp.Span
		for _, sp := range o.recv.Spans() {
			if sp.Attributes["messaging.message.id"] == m.ID {
				span = sp
			}
		}
		w := want[i]
		if span.StatusCode != w.code || span.Attributes["error.type"] != w.errType || !strings.Contains(span.StatusMessage, w.says) {
			t.Errorf("message %d: status %s %q, error.type %v; want %s containing %q, %v", i, span.StatusCode, span.StatusMessage, span.Attributes["error.type"], w.code, w.says, w.errType)
		}
		if strings.Contains(span.StatusMessage, "hunter2") {
			t.Errorf("message %d: the span status holds a secret: %q", i, span.StatusMessage)
		}
	}
}

// A row without a trace context starts a trace only when the sampler says
// so; the destination still learns the decision (flags 00), so that it
// does not start a trace of its own for what the relay dropped.
func TestSamplerDecidesNewTraces(t *testing.T) {
	o := newOTLP(t, sdktrace.ParentBased(sdktrace.NeverSample()))
	d := testdest.Open(t, "http", testdest.Options{})
	s := New(o.tp, "test", nil).Wrap(d.Sink, Destination{Name: "hooks", Type: "http"})
	sampled, h := producer(t, sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample())), TraceparentHeader)
	testdest.PublishThrough(t, s, message("new", 0, nil), message("continued", 0, h))
	got := d.Wait(t, 2)
	o.flush(t)
	spans := o.recv.Wait(t, "send hooks", 1)
	if len(spans) != 1 || spans[0].Attributes["queuebox.topic"] != "continued" || spans[0].ParentSpanID != sampled.SpanID().String() {
		t.Errorf("exported %+v, want only the span of the sampled producer's row", spans)
	}
	fresh, _ := got[0].Get(TraceparentHeader)
	if sc := parse(t, fresh); sc.IsSampled() {
		t.Errorf("the dropped row's destination got %s, a sampled context", fresh)
	}
	cont, _ := got[1].Get(TraceparentHeader)
	if sc := parse(t, cont); !sc.IsSampled() || sc.TraceID() != sampled.TraceID() {
		t.Errorf("the sampled row's destination got %s, want a sampled context of trace %s", cont, sampled.TraceID())
	}
}

// One trace runs from the sender through the inbox and the relay to the
// destination: the inbox row stores the receipt's context, the relayed
// row's delivery is its child, and the destination gets the delivery's.
func TestInboxReceiptJoinsTheTrace(t *testing.T) {
	o := newOTLP(t, sdktrace.ParentBased(sdktrace.AlwaysSample()))
	tr := New(o.tp, "test", nil)
	sender, h := producer(t, o.tp, "Traceparent") // as the HTTP inbox stores a request's headers
	h["X-Event-Type"] = "captured"
	stored, receipt := tr.Receive(context.Background(), Source{Name: "payments", Type: "http"}, "evt-1", h)
	receipt.End(nil)
	if _, ok := stored["Traceparent"]; ok || stored["X-Event-Type"] != "captured" {
		t.Errorf("stored headers %v: want the sender's Traceparent replaced and the rest kept", stored)
	}
	d := testdest.Open(t, "http", testdest.Options{})
	testdest.PublishThrough(t, tr.Wrap(d.Sink, Destination{Name: "billing", Type: "http"}), message("payment.captured", 0, stored))
	got := d.Wait(t, 1)[0]
	o.flush(t)
	recv := o.recv.Wait(t, "receive payments", 1)[0]
	send := o.recv.Wait(t, "send billing", 1)[0]
	tp, _ := got.Get(TraceparentHeader)
	dest := parse(t, tp)
	if recv.TraceID != sender.TraceID().String() || recv.ParentSpanID != sender.SpanID().String() {
		t.Errorf("the receipt: trace %s parent %s, want the sender's %s %s", recv.TraceID, recv.ParentSpanID, sender.TraceID(), sender.SpanID())
	}
	if send.TraceID != recv.TraceID || send.ParentSpanID != recv.SpanID {
		t.Errorf("the delivery: trace %s parent %s, want the receipt's %s %s", send.TraceID, send.ParentSpanID, recv.TraceID, recv.SpanID)
	}
	if dest.TraceID().String() != send.TraceID || dest.SpanID().String() != send.SpanID {
		t.Errorf("the destination got %s, want the delivery's context %s %s", tp, send.TraceID, send.SpanID)
	}
	if recv.Kind != tracepb.Span_SPAN_KIND_CONSUMER || recv.Attributes["messaging.message.id"] != "evt-1" || recv.Attributes["messaging.operation.type"] != "receive" {
		t.Errorf("the receipt span: kind %s, attributes %v", recv.Kind, recv.Attributes)
	}
}

// Tracing off wraps nothing and keeps every header as it is.
func TestNilTracerIsOff(t *testing.T) {
	var tr *Tracer
	if New(nil, "test", nil) != nil || New(noop.NewTracerProvider(), "test", nil) != nil {
		t.Fatal("New of no provider, or of the no-op provider, is not tracing off")
	}
	s := stub{nil}
	if got := tr.Wrap(s, Destination{Name: "x"}); fmt.Sprintf("%T", got) != fmt.Sprintf("%T", s) {
		t.Errorf("tracing off wrapped the sink: %T", got)
	}
	h := map[string]string{"Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	stored, receipt := tr.Receive(context.Background(), Source{Name: "x"}, "id", h)
	receipt.End(errors.New("ignored"))
	if fmt.Sprint(stored) != fmt.Sprint(h) {
		t.Errorf("tracing off changed the stored headers: %v", stored)
	}
}
