package inbox_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/sinks/tracing"
)

// ceServer serves an open source "events" whose topic reads the event's
// type, without an aggregateId template, and a source "keyed" with one.
func ceServer(t *testing.T, d dialects.Inbox, tracer *tracing.Tracer) *httptest.Server {
	t.Helper()
	events := mapping(t, "events", "ev.{{ headers.Ce-Type }}", "", "")
	keyed := mapping(t, "keyed", "keyed.in", "", "{{ headers.X-Order }}")
	for _, m := range []*inbox.Mapping{events, keyed} {
		m.Tracer, m.Type = tracer, "http"
	}
	h := inbox.NewHTTP(inbox.HTTPOptions{Store: d, Sources: map[string]*inbox.HTTPSource{
		"events": {Mapping: events}, "keyed": {Mapping: keyed},
	}})
	mux := http.NewServeMux()
	mux.Handle(inbox.Prefix, h)
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// sendEvent sends e with the CloudEvents SDK's HTTP client in the given
// encoding, and returns the inbox's answer code.
func sendEvent(t *testing.T, url string, e cloudevents.Event, structured bool) int {
	t.Helper()
	c, err := cloudevents.NewClientHTTP(cehttp.WithTarget(url))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if structured {
		ctx = cloudevents.WithEncodingStructured(ctx)
	} else {
		ctx = cloudevents.WithEncodingBinary(ctx)
	}
	res := c.Send(ctx, e)
	var hr *cehttp.Result
	if !cloudevents.ResultAs(res, &hr) {
		t.Fatalf("no HTTP result: %v", res)
	}
	return hr.StatusCode
}

// An HTTP source takes what the CloudEvents SDK sends, in both modes: the
// event's id is the message id (a repeat is a duplicate), its subject,
// else its partitionkey, the aggregate id unless the source has a
// template, its data the payload, and its attributes Ce- headers that the
// templates read.
func TestHTTPSourceTakesCloudEvents(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 20)
	s := ceServer(t, d, nil)
	event := func(id, subject, pk string) cloudevents.Event {
		e := cloudevents.NewEvent()
		e.SetID(id)
		e.SetSource("/payments")
		e.SetType("captured")
		if subject != "" {
			e.SetSubject(subject)
		}
		if pk != "" {
			e.SetExtension("partitionkey", pk)
		}
		if err := e.SetData(cloudevents.ApplicationJSON, map[string]any{"amount": 1250}); err != nil {
			t.Fatal(err)
		}
		return e
	}
	if code := sendEvent(t, s.URL+"/inbox/events", event("evt-1", "pay 77", ""), false); code != http.StatusAccepted {
		t.Fatalf("binary: %d", code)
	}
	if code := sendEvent(t, s.URL+"/inbox/events", event("evt-2", "", "pk-9"), true); code != http.StatusAccepted {
		t.Fatalf("structured: %d", code)
	}
	if code := sendEvent(t, s.URL+"/inbox/events", event("evt-1", "pay 77", ""), true); code != http.StatusOK {
		t.Fatalf("the same event again, in the other mode: %d, want 200 (a duplicate)", code)
	}
	if code := sendEvent(t, s.URL+"/inbox/keyed", event("evt-3", "ignored", ""), true); code != http.StatusBadRequest {
		t.Fatalf("a source whose aggregateId template needs a header the event lacks: %d, want 400", code)
	}
	rows := inboxRows(t, d)
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2: %+v", len(rows), rows)
	}
	for i, want := range []struct{ id, agg string }{{"evt-1", "pay 77"}, {"evt-2", "pk-9"}} {
		r := rows[i]
		if r.MessageID != want.id || r.Topic != "ev.captured" || r.AggregateID == nil || *r.AggregateID != want.agg {
			t.Errorf("row %d: message id %s, topic %s, aggregate id %v; want %s, ev.captured, %s", i, r.MessageID, r.Topic, r.AggregateID, want.id, want.agg)
		}
		if r.Payload["amount"] != float64(1250) {
			t.Errorf("row %d: payload %v, want the event's data", i, r.Payload)
		}
		if r.Headers["Ce-Id"] != want.id || r.Headers["Ce-Source"] != "/payments" || r.Headers["Content-Type"] != "application/json" {
			t.Errorf("row %d: headers %v, want the attributes as Ce- headers and the data's content type", i, r.Headers)
		}
	}
}

// A receipt is a span, a child of the sender's traceparent, and the row
// keeps the receipt's context; with tracing off, the sender's as it came.
func TestHTTPSourceKeepsTheTraceContext(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, sender := tp.Tracer("sender").Start(context.Background(), "send payment")
	sender.End()
	h := map[string]string{}
	propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(h))

	for _, traced := range []bool{true, false} {
		d := testdb.Migrated(t, 20)
		var tracer *tracing.Tracer
		if traced {
			tracer = tracing.New(tp, "test", nil)
		}
		s := ceServer(t, d, tracer)
		r := post(t, s.URL+"/inbox/keyed", `{"n":1}`, map[string]string{"X-Order": "o-1", "X-Message-Id": "m-1", "traceparent": h["traceparent"]})
		if r.Status != http.StatusAccepted {
			t.Fatalf("traced %v: %+v", traced, r)
		}
		rows := inboxRows(t, d)
		stored, _ := inbox.LookupFold(rows[0].Headers, "traceparent")
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": stored}))
		if !traced {
			if stored != h["traceparent"] {
				t.Errorf("tracing off: stored traceparent %q, want the sender's %q", stored, h["traceparent"])
			}
			continue
		}
		var receive []tracetest.SpanStub
		for _, s := range spans.GetSpans() {
			if s.Name == "receive keyed" {
				receive = append(receive, s)
			}
		}
		if len(receive) != 1 {
			t.Fatalf("%d receive spans", len(receive))
		}
		rs := receive[0]
		if rs.Parent.SpanID() != sender.SpanContext().SpanID() || rs.SpanContext.TraceID() != sender.SpanContext().TraceID() {
			t.Errorf("the receipt's span is not a child of the sender's")
		}
		if sc.SpanID() != rs.SpanContext.SpanID() || sc.TraceID() != rs.SpanContext.TraceID() {
			t.Errorf("stored traceparent %q, want the receipt's span %s", stored, rs.SpanContext.SpanID())
		}
		if rs.SpanKind != trace.SpanKindConsumer || rs.Status.Code != 0 {
			t.Errorf("receipt span kind %v, status %v", rs.SpanKind, rs.Status)
		}
	}
}
