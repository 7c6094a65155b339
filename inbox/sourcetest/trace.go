package sourcetest

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/internal/inboxtest"
	"github.com/queuebox/queuebox/sinks/tracing"
)

// Traced gives m the suite's tracer (Options.Tracer): a harness passes the
// mapping of every consumer it builds through it.
func (o Options) Traced(m *inbox.Mapping) *inbox.Mapping {
	m.Tracer = o.Tracer
	return m
}

// keepsTheTraceContext: a message whose headers carry a traceparent is
// stored under a receipt span, a child of the sender's, and the row keeps
// the receipt's context, so that the outbox row relayed from it continues
// the trace; a message the source refuses ends its span with an error.
func keepsTheTraceContext(t *testing.T, h Harness) {
	tg := h.Open(t, false)
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, sender := tp.Tracer("sender").Start(context.Background(), "send")
	sender.End()
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)

	obs := &inboxtest.Counter{}
	start(t, tg, Options{Observer: obs, Tracer: tracing.New(tp, "test", nil)})
	tg.Send(t,
		Message{ID: "traced", Type: "created", Aggregate: "o-1", Headers: map[string]string{"Traceparent": carrier["traceparent"]}, Body: Body(0)},
		Message{ID: "untyped", Aggregate: "o-1", Headers: map[string]string{"Traceparent": carrier["traceparent"]}, Body: Body(1)},
	)
	eventually(t, "one stored and one refused", func() error { return counted(obs, 1, 0, 1) })
	rows := inboxtest.Rows(t, tg.Inbox)
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rows))
	}
	var receipts []tracetest.SpanStub
	eventually(t, "the two receipts' spans", func() error {
		receipts = receipts[:0]
		for _, s := range spans.GetSpans() {
			if s.SpanKind == trace.SpanKindConsumer {
				receipts = append(receipts, s)
			}
		}
		if len(receipts) != 2 {
			return fmt.Errorf("%d receipt spans", len(receipts))
		}
		return nil
	})
	stored, _ := inbox.LookupFold(rows[0].Headers, "traceparent")
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": stored}))
	var ok, refused int
	for _, r := range receipts {
		if r.Parent.SpanID() != sender.SpanContext().SpanID() || r.SpanContext.TraceID() != sender.SpanContext().TraceID() {
			t.Errorf("a receipt's span is not a child of the sender's: parent %s", r.Parent.SpanID())
		}
		if r.Status.Code == codes.Error {
			refused++
			continue
		}
		ok++
		if sc.SpanID() != r.SpanContext.SpanID() || sc.TraceID() != r.SpanContext.TraceID() {
			t.Errorf("the row keeps traceparent %q, want the receipt's span %s of the sender's trace", stored, r.SpanContext.SpanID())
		}
	}
	if ok != 1 || refused != 1 {
		t.Errorf("%d receipts ended well and %d with an error, want one of each", ok, refused)
	}
}

// Broker is what a broker source's configuration takes from the suite:
// the mapping of the source named source (traced as the suite asks), a
// storer into tg's inbox with the suite's observer, tg's batch size and
// the suite's AfterStore hook.
func (o Options) Broker(t *testing.T, tg *Target, source, typeHeader, aggregateHeader string) inbox.Broker {
	t.Helper()
	return inbox.Broker{Mapping: o.Traced(Mapping(t, source, typeHeader, aggregateHeader)),
		Storer: inbox.NewStorer(source, tg.Inbox, o.Observer, nil), MaxBatch: tg.MaxBatch, AfterStore: o.AfterStore}
}
