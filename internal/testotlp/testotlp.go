// Package testotlp is an OTLP/HTTP trace receiver for tests: it speaks the
// protocol an OpenTelemetry collector speaks on :4318 (protobuf
// ExportTraceServiceRequest at POST /v1/traces, gzip or not), keeps every
// span it receives, and tells waiting tests when spans arrive.
package testotlp

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/queuebox/queuebox/internal/testkit"
)

// Span is one received span, flattened for assertions.
type Span struct {
	TraceID, SpanID, ParentSpanID string // hex; ParentSpanID "" for a root
	Name                          string
	Kind                          tracepb.Span_SpanKind
	Attributes                    map[string]any
	StatusCode                    tracepb.Status_StatusCode
	StatusMessage                 string
	// Resource holds the attributes of the span's resource (service.name).
	Resource map[string]any
	// Scope is the instrumentation scope's name.
	Scope string
}

// Receiver is a running OTLP/HTTP receiver.
type Receiver struct {
	// URL is the receiver's base URL, for OTEL_EXPORTER_OTLP_ENDPOINT
	// (the exporter adds /v1/traces).
	URL string
	// TracesURL is the URL of the traces signal, for
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and otlptracehttp.WithEndpointURL.
	TracesURL string

	discard bool // read each export and answer, keep nothing (benchmarks)
	mu      sync.Mutex
	spans   []Span
	arrived chan struct{} // closed and replaced on every export
}

// New starts a receiver, stopped when the test ends.
func New(t testing.TB) *Receiver { return start(t, false) }

// Discarding starts a receiver that reads every export and answers it as
// a collector does, but keeps nothing: a benchmark's receiver, whose memory
// does not grow with the spans it gets.
func Discarding(t testing.TB) *Receiver { return start(t, true) }

func start(t testing.TB, discard bool) *Receiver {
	r := &Receiver{arrived: make(chan struct{}), discard: discard}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL, r.TracesURL = srv.URL, srv.URL+"/v1/traces"
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "this receiver takes POST /v1/traces", http.StatusNotFound)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.discard {
		w.Header().Set("Content-Type", "application/x-protobuf")
		return
	}
	var export collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &export); err != nil {
		http.Error(w, "not an ExportTraceServiceRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range export.ResourceSpans {
		res := attributes(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := Span{
					TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
					ParentSpanID: hex.EncodeToString(s.ParentSpanId), Name: s.Name, Kind: s.Kind,
					Attributes: attributes(s.Attributes), StatusCode: s.GetStatus().GetCode(),
					StatusMessage: s.GetStatus().GetMessage(), Resource: res, Scope: ss.GetScope().GetName(),
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	close(r.arrived)
	r.arrived = make(chan struct{})
	r.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func attributes(kvs []*commonpb.KeyValue) map[string]any {
	out := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.Key] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			out[kv.Key] = x.IntValue
		case *commonpb.AnyValue_BoolValue:
			out[kv.Key] = x.BoolValue
		case *commonpb.AnyValue_DoubleValue:
			out[kv.Key] = x.DoubleValue
		default:
			out[kv.Key] = v.String()
		}
	}
	return out
}

// Spans returns every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Wait waits until the spans received so far include n named name, and
// returns those, or fails the test after testkit.Wait.
func (r *Receiver) Wait(t testing.TB, name string, n int) []Span {
	t.Helper()
	deadline := time.NewTimer(testkit.Wait)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		var match []Span
		for _, s := range r.spans {
			if s.Name == name {
				match = append(match, s)
			}
		}
		arrived, all := r.arrived, len(r.spans)
		r.mu.Unlock()
		if len(match) >= n {
			return match
		}
		select {
		case <-arrived:
		case <-deadline.C:
			t.Fatalf("the OTLP receiver got %d spans named %q after %s, want %d (%d spans in all)", len(match), name, testkit.Wait, n, all)
		}
	}
}

// ByID returns the received span with the given hex span id.
func (r *Receiver) ByID(id string) (Span, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if s.SpanID == id {
			return s, nil
		}
	}
	return Span{}, fmt.Errorf("no span %s among the %d received", id, len(r.spans))
}
