package bootstrap

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/internal/testrecv"
	"github.com/queuebox/queuebox/sinks"
	"github.com/queuebox/queuebox/sinks/cloudevents"
	"github.com/queuebox/queuebox/sinks/tracing"
)

func TestCloudEventsKeyIsChecked(t *testing.T) {
	runBad(t, []badCase{
		{name: "no source", yaml: "~type: http, url~type: http, cloudEvents: { mode: binary }, url~",
			key: "destinations.hook.cloudEvents.source", reason: "is required: the event's source"},
		{name: "an unknown mode", yaml: "~type: http, url~type: http, cloudEvents: { mode: json, source: /shop }, url~",
			key: "destinations.hook.cloudEvents.mode", reason: `"json": use binary`},
		{name: "a source that is not a URI reference", yaml: "~type: http, url~type: http, cloudEvents: { source: \"/my shop\" }, url~",
			key: "destinations.hook.cloudEvents.source", reason: "is not a URI reference"},
		{name: "a source template that does not parse", yaml: "~type: http, url~type: http, cloudEvents: { source: \"/shop/{{ nope }}\" }, url~",
			key: "destinations.hook.cloudEvents.source", reason: "nope"},
		{name: "a type template that does not parse", yaml: "~type: http, url~type: http, cloudEvents: { source: /shop, type: \"{{ topic\" }, url~",
			key: "destinations.hook.cloudEvents.type", reason: ""},
		{name: "an empty key", yaml: "@  ce: { type: nats, url: \"nats://127.0.0.1:4222\", subject: s, cloudEvents: }\n",
			key: "destinations.ce.cloudEvents", reason: "is empty; give it at least a source"},
		{name: "on the null destination", yaml: "@  nothing: { type: \"null\", cloudEvents: { source: /shop } }\n",
			key: "destinations.nothing.cloudEvents", reason: "is not a key of a null destination"},
		{name: "an unknown key under it", yaml: "~type: http, url~type: http, cloudEvents: { source: /shop, sorce: /x }, url~",
			key: "destinations.hook.cloudEvents.sorce", reason: "unknown key"},
	})
}

// Every type that sends takes the key; mode and type get their defaults,
// which config check prints.
func TestCloudEventsKeyCompiles(t *testing.T) {
	cfg := strings.NewReplacer(
		"    exchangeFrom: aggregate_type\n", "    exchangeFrom: aggregate_type\n    cloudEvents: { source: \"/shop/{{ aggregateType }}\" }\n",
		"    compression: zstd\n", "    compression: zstd\n    cloudEvents: { mode: structured, source: /shop, type: \"com.example.{{ topic }}\" }\n",
		"    subject: \"events.{{ topic }}\"\n", "    subject: \"events.{{ topic }}\"\n    cloudEvents: { source: https://shop.example.com/ }\n",
	).Replace(brokers)
	l, err := Parse("q.yaml", []byte(cfg), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]cloudevents.Mode{"rabbit": cloudevents.Binary, "kafka": cloudevents.Structured, "nats": cloudevents.Binary} {
		c := l.Compiled.Destinations[name].CloudEvents
		if c == nil {
			t.Fatalf("%s: cloudEvents not compiled", name)
		}
		if c.Mode != want {
			t.Errorf("%s: mode %s, want %s", name, c.Mode, want)
		}
	}
	if typ := l.Compiled.Destinations["rabbit"].CloudEvents.Type.String(); typ != cloudevents.DefaultType {
		t.Errorf("the default type is %q, want %q", typ, cloudevents.DefaultType)
	}
	out, err := l.Effective()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"mode: binary", "mode: structured", "type: '{{ topic }}'", "source: /shop/{{ aggregateType }}", "type: com.example.{{ topic }}"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("config check does not print %q:\n%s", want, out)
		}
	}
	fs, err := SinkFactories(l)
	if err != nil {
		t.Fatal(err)
	}
	// A wrapped sink still takes runs of one key.
	s, err := fs["kafka"]()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(sinks.OrderedBatcher); !ok {
		t.Errorf("the CloudEvents wrapper hides the Kafka sink's ordered batches (%T)", s)
	}
}

// signedHook is an HTTP destination with cloudEvents and a signing secret.
func signedHook(url, mode string) string {
	return `
database:
  url: postgres://localhost/app
destinations:
  hook:
    type: http
    url: ` + url + `/events/{{ topic }}
    signingSecret: ` + oldSigningSecret + `
    cloudEvents: { mode: ` + mode + `, source: "https://shop.example.com/{{ aggregateType }}" }
routes:
  - { topicPattern: "#", destination: hook }
`
}

// The destination's sink as SinkFactories makes it: the span outside the
// CloudEvents wrapper, the signature over the bytes sent, and the
// attempt's own traceparent in what the destination receives.
func TestSinkFactoriesWrapCloudEventsInsideTracing(t *testing.T) {
	for _, mode := range []string{"binary", "structured"} {
		t.Run(mode, func(t *testing.T) {
			recv := testrecv.New(t, nil)
			l, err := Parse("q.yaml", []byte(signedHook(recv.URL, mode)), env(nil))
			if err != nil {
				t.Fatal(err)
			}
			spans := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			l.Tracer = tracing.New(tp, "test", nil)
			fs, err := SinkFactories(l)
			if err != nil {
				t.Fatal(err)
			}
			s, err := fs["hook"]()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()

			ctx, parent := tp.Tracer("shop").Start(context.Background(), "insert order")
			parent.End()
			headers := map[string]string{}
			propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(headers))
			agg := "order"
			m := sinks.Message{ID: "0190a6a4-0000-7000-8000-000000000001", Topic: "order.created", Key: "cust-1", AggregateType: &agg,
				Attempt: 2, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Headers: headers, Body: []byte(`{"n":1}`)}
			if errs := s.Publish(context.Background(), []sinks.Message{m}); errs[0] != nil {
				t.Fatal(errs[0])
			}
			reqs := recv.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests", len(reqs))
			}
			r := reqs[0]

			// The signature signs the bytes received.
			key := l.Compiled.Destinations["hook"].SigningKeys
			if problem := inbox.VerifySignature(key, r.Header, r.Body, time.Now(), time.Minute); problem != "" {
				t.Errorf("the signature does not sign what was sent: %s", problem)
			}

			// The SDK reads the event in the mode configured.
			if mode == "structured" {
				if ct := r.Header.Get("Content-Type"); ct != cloudevents.StructuredContentType {
					t.Errorf("Content-Type %q, want %s", ct, cloudevents.StructuredContentType)
				}
				var e event.Event
				if err := format.JSON.Unmarshal(r.Body, &e); err != nil {
					t.Fatalf("the body is not a structured CloudEvent: %v\n%s", err, r.Body)
				}
				checkRowEvent(t, e, m)
			} else {
				e, err := binding.ToEvent(context.Background(), cehttp.NewMessage(r.Header.Clone(), io.NopCloser(bytes.NewReader(r.Body))))
				if err != nil {
					t.Fatalf("the SDK cannot read a binary CloudEvent: %v (headers %v)", err, r.Header)
				}
				checkRowEvent(t, *e, m)
			}

			// One span, a child of the row's, whose context the destination
			// received.
			ended := spans.GetSpans()
			var send []tracetest.SpanStub
			for _, sp := range ended {
				if sp.Name == "send hook" {
					send = append(send, sp)
				}
			}
			if len(send) != 1 {
				t.Fatalf("%d spans named send hook among %d", len(send), len(ended))
			}
			sp := send[0]
			if sp.Parent.SpanID() != parent.SpanContext().SpanID() || sp.SpanContext.TraceID() != parent.SpanContext().TraceID() {
				t.Errorf("the delivery's span is not a child of the row's: parent %s, want %s", sp.Parent.SpanID(), parent.SpanContext().SpanID())
			}
			got := propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(r.Header))
			if sc := trace.SpanContextFromContext(got); sc.SpanID() != sp.SpanContext.SpanID() || sc.TraceID() != sp.SpanContext.TraceID() {
				t.Errorf("the destination got traceparent %q, want the attempt's span %s", r.Header.Get("traceparent"), sp.SpanContext.SpanID())
			}
			attrs := map[string]any{}
			for _, a := range sp.Attributes {
				attrs[string(a.Key)] = a.Value.AsInterface()
			}
			if attrs["messaging.message.id"] != m.ID || attrs["queuebox.attempt"] != int64(2) || attrs["messaging.destination.name"] != "hook" {
				t.Errorf("span attributes %v", attrs)
			}
		})
	}
}

func checkRowEvent(t *testing.T, e event.Event, m sinks.Message) {
	t.Helper()
	if e.ID() != m.ID || e.Type() != m.Topic || e.Source() != "https://shop.example.com/order" || e.Subject() != m.Key || !e.Time().Equal(m.CreatedAt) {
		t.Errorf("event %s", e.String())
	}
	var got, want any
	_ = json.Unmarshal(e.Data(), &got)
	_ = json.Unmarshal(m.Body, &want)
	if !jsonEqual(got, want) {
		t.Errorf("data %s, want %s", e.Data(), m.Body)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// An OTEL_* variable tracing cannot use is a problem of config check and
// run, named with what to write.
func TestTracingProblems(t *testing.T) {
	for _, name := range []string{"OTEL_TRACES_EXPORTER", "OTEL_TRACES_SAMPLER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_SDK_DISABLED"} {
		t.Setenv(name, "")
	}
	if err := TracingProblems("q.yaml"); err != nil {
		t.Fatalf("no OTEL_* set: %v", err)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	t.Setenv("OTEL_TRACES_SAMPLER", "sometimes")
	err := TracingProblems("q.yaml")
	e, ok := err.(*Error)
	if !ok {
		t.Fatalf("%v", err)
	}
	if !hasProblem(e.Problems, "OTEL_TRACES_EXPORTER (environment)", "use otlp", 0) || !hasProblem(e.Problems, "OTEL_TRACES_SAMPLER (environment)", "parentbased_always_on", 0) {
		t.Errorf("problems %v", e.Problems)
	}
	if !strings.Contains(err.Error(), "q.yaml has 2 problems") {
		t.Errorf("%v", err)
	}
}
