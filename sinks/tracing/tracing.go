// Package tracing makes QueueBox's OpenTelemetry spans and carries the W3C
// trace context (the traceparent and tracestate headers) from the producer
// of a row to the destination that receives it.
//
// A row's producer writes its trace context into the row's headers column.
// Each delivery attempt is one span, a child of that context, that follows
// the OpenTelemetry semantic conventions for messaging (a producer span,
// "send <destination>", with messaging.system, messaging.destination.name,
// messaging.message.id = the row id, and queuebox.attempt = the row's
// attempt, 0 on the first delivery). The attempt's own context replaces the
// row's in the headers the destination receives, so the consumer's span is
// the attempt's child. A row without a trace context starts a new trace, in
// which the configured sampler decides whether the span is recorded.
//
// Inbox sources do the same on the way in (Receive): the receipt is a span,
// a child of the sender's context, and the inbox row keeps the receipt's
// context in its headers, so that the outbox row relayed from it, and the
// delivery of that row, join the sender's trace.
//
// Tracing off costs nothing: New returns nil for no tracer provider, and a
// nil *Tracer wraps no sink and starts no span.
package tracing

import (
	"context"
	"errors"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/queuebox/queuebox/sinks"
	"github.com/queuebox/queuebox/sinks/middleware"
)

// ScopeName is the instrumentation scope of QueueBox's spans.
const ScopeName = "github.com/queuebox/queuebox"

// The header names of the W3C trace context. A row may hold them in any
// case (the HTTP inbox stores Traceparent); QueueBox writes them in lower
// case, as the W3C recommendation spells them.
const (
	TraceparentHeader = "traceparent"
	TracestateHeader  = "tracestate"
)

// AttemptKey is the attribute of a delivery span that holds the row's
// attempt: how many deliveries failed before this one.
const AttemptKey = attribute.Key("queuebox.attempt")

// Attribute keys of the row's topic and key on a delivery span.
const (
	TopicKey = attribute.Key("queuebox.topic")
	KeyKey   = attribute.Key("queuebox.key")
)

// Tracer makes QueueBox's spans. A nil *Tracer is tracing off.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TraceContext
	redact func(string) string
}

// New returns a Tracer whose spans go to tp, with error texts passed through
// redact (nil keeps them) before they become a span's status, so that a
// secret in an error never leaves the process. It returns nil, tracing
// off, when tp is nil or OpenTelemetry's no-op provider.
func New(tp trace.TracerProvider, version string, redact func(string) string) *Tracer {
	if _, noop := tp.(noop.TracerProvider); tp == nil || noop {
		return nil
	}
	if redact == nil {
		redact = func(s string) string { return s }
	}
	return &Tracer{tracer: tp.Tracer(ScopeName, trace.WithInstrumentationVersion(version)), redact: redact}
}

// Destination is what the spans of a wrapped sink say about where it
// delivers.
type Destination struct {
	// Name is the destination's name in the configuration
	// (destinations.NAME): messaging.destination.name.
	Name string
	// Type is the destination's type (http, rabbitmq, kafka, nats):
	// messaging.system.
	Type string
	// Address is the source of the destination's address template (url,
	// exchange, topic or subject), if it has one:
	// messaging.destination.template.
	Address string
}

// Wrap returns inner with a span around the delivery of each message, or
// inner itself when t is nil.
func (t *Tracer) Wrap(inner sinks.Sink, d Destination) sinks.Sink {
	if t == nil {
		return inner
	}
	s := &delivery{t: t, name: "send " + d.Name, attrs: []attribute.KeyValue{
		semconv.MessagingSystemKey.String(d.Type),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("send"),
		semconv.MessagingDestinationName(d.Name),
	}}
	if d.Address != "" {
		s.attrs = append(s.attrs, semconv.MessagingDestinationTemplate(d.Address))
	}
	return middleware.Wrap(inner, s.publish)
}

type delivery struct {
	t     *Tracer
	name  string
	attrs []attribute.KeyValue // the same on every span of the destination
}

// publish starts one span per message, hands the messages on with each
// span's context in their headers, and ends each span with its message's
// outcome. A call carries several messages only for a run of one key; their
// spans then share the call's duration.
func (s *delivery) publish(ctx context.Context, msgs []sinks.Message, next sinks.Sink) []error {
	out := make([]sinks.Message, len(msgs))
	spans := make([]trace.Span, len(msgs))
	for i := range msgs {
		m := msgs[i]
		parent := s.t.prop.Extract(ctx, headerCarrier(m.Headers))
		_, span := s.t.tracer.Start(parent, s.name, trace.WithSpanKind(trace.SpanKindProducer))
		if span.IsRecording() {
			// One call: each takes the span's lock.
			attrs := append(make([]attribute.KeyValue, 0, len(s.attrs)+5), s.attrs...)
			attrs = append(attrs,
				semconv.MessagingMessageID(m.ID),
				AttemptKey.Int(m.Attempt),
				TopicKey.String(m.Topic),
				semconv.MessagingMessageBodySize(len(m.Body)),
			)
			if m.Key != "" {
				attrs = append(attrs, KeyKey.String(m.Key))
			}
			span.SetAttributes(attrs...)
		}
		m.Headers = s.t.withContext(m.Headers, span.SpanContext())
		out[i], spans[i] = m, span
	}
	if len(spans) == 1 {
		// Whatever the sink does on the way (its own instrumentation, a
		// client that traces) is then part of the attempt's span.
		ctx = trace.ContextWithSpan(ctx, spans[0])
	}
	errs := next.Publish(ctx, out)
	for i, span := range spans {
		var err error
		if i < len(errs) {
			err = errs[i]
		}
		s.t.end(span, err)
	}
	return errs
}

// end ends span with the outcome err (nil: delivered).
func (t *Tracer) end(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err)))
		span.SetStatus(codes.Error, t.redact(err.Error()))
	}
	span.End()
}

// errorType is the low-cardinality class of a failed delivery (error.type):
// what the engine does next depends on it.
func errorType(err error) string {
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case sinks.IsPermanent(err):
		return "permanent"
	}
	if _, ok := sinks.RetryAfter(err); ok {
		return "retry_after"
	}
	return semconv.ErrorTypeOther.Value.AsString()
}

// Source is what the spans of an inbox source say about it.
type Source struct {
	// Name is the source's name in the configuration
	// (inbox.sources.NAME): messaging.destination.name.
	Name string
	// Type is the source's type (http, rabbitmq, kafka, nats):
	// messaging.system.
	Type string
}

// Receipt is the span of one message an inbox source received. A nil
// *Receipt (tracing off) does nothing.
type Receipt struct {
	t    *Tracer
	span trace.Span
}

// Receive starts the span of a message that an inbox source received with
// messageID and headers, as a child of the sender's trace context in
// headers (found in any case). It returns the headers to store with the
// inbox row: headers with the receipt's context in place of the sender's.
// With t nil it returns headers as they are, so that the sender's context
// still reaches the relayed row. End the receipt once the row is stored (or
// refused).
func (t *Tracer) Receive(ctx context.Context, src Source, messageID string, headers map[string]string) (map[string]string, *Receipt) {
	if t == nil {
		return headers, nil
	}
	parent := t.prop.Extract(ctx, headerCarrier(headers))
	_, span := t.tracer.Start(parent, "receive "+src.Name, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(
			semconv.MessagingSystemKey.String(src.Type),
			semconv.MessagingOperationTypeReceive,
			semconv.MessagingOperationName("receive"),
			semconv.MessagingDestinationName(src.Name),
			semconv.MessagingMessageID(messageID),
		)
	}
	return t.withContext(headers, span.SpanContext()), &Receipt{t: t, span: span}
}

// End ends the receipt's span: err nil is stored (or a duplicate of a
// stored message), anything else a message that was not.
func (r *Receipt) End(err error) {
	if r == nil {
		return
	}
	r.t.end(r.span, err)
}

// withContext returns a copy of h whose trace context is sc, without any
// other spelling of the trace context's headers. The copy leaves the
// caller's map alone: the engine may hand the same headers to another
// attempt.
func (t *Tracer) withContext(h map[string]string, sc trace.SpanContext) map[string]string {
	out := make(map[string]string, len(h)+2)
	for k, v := range h {
		if !isTraceHeader(k) {
			out[k] = v
		}
	}
	t.prop.Inject(trace.ContextWithSpanContext(context.Background(), sc), propagation.MapCarrier(out))
	return out
}

func isTraceHeader(name string) bool {
	return strings.EqualFold(name, TraceparentHeader) || strings.EqualFold(name, TracestateHeader)
}

// headerCarrier reads a trace context from a row's or a message's headers,
// whatever the case of their names.
type headerCarrier map[string]string

func (c headerCarrier) Get(key string) string {
	if v, ok := c[key]; ok {
		return v
	}
	for k, v := range c {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}

func (c headerCarrier) Set(key, value string) { c[key] = value }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
