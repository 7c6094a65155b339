package tracing

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/queuebox/queuebox/internal/testotlp"
	"github.com/queuebox/queuebox/sinks"
	nullsink "github.com/queuebox/queuebox/sinks/null"
)

// BenchmarkPublish is the cost of tracing one delivery into the null
// destination (the sink costs next to nothing, so what is left is the
// decorator's): off (no provider, or the no-op one: the sink is not
// wrapped), on with a sampler that drops every new trace, and on with
// every span exported over OTLP/HTTP to a local receiver (whose work runs
// on the same cores, as a collector beside the relay would).
func BenchmarkPublish(b *testing.B) {
	msg := sinks.Message{ID: uuid.NewString(), Topic: "order.created", Key: "cust-42",
		Headers: map[string]string{"X-Tenant": "acme", "X-Source": "shop"}, Body: []byte(`{"amount":1250,"currency":"EUR"}`)}
	withParent := msg
	withParent.Headers = map[string]string{"X-Tenant": "acme", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	run := func(b *testing.B, tr *Tracer, m sinks.Message) {
		s := tr.Wrap(nullsink.New(), Destination{Name: "orders", Type: "null"})
		msgs := []sinks.Message{m}
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if errs := s.Publish(ctx, msgs); errs[0] != nil {
				b.Fatal(errs[0])
			}
		}
	}
	b.Run("off", func(b *testing.B) { run(b, New(nil, "bench", nil), msg) })
	b.Run("noop-provider", func(b *testing.B) { run(b, New(noop.NewTracerProvider(), "bench", nil), msg) })
	b.Run("sampled-out", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		run(b, New(tp, "bench", nil), msg)
	})
	for _, c := range []struct {
		name string
		m    sinks.Message
	}{{"otlp-new-trace", msg}, {"otlp-child", withParent}} {
		b.Run(c.name, func(b *testing.B) {
			recv := testotlp.Discarding(b)
			exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(recv.TracesURL))
			if err != nil {
				b.Fatal(err)
			}
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			run(b, New(tp, "bench", nil), c.m)
		})
	}
}
