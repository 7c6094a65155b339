package benchmarks

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/queuebox/queuebox/bootstrap"
	"github.com/queuebox/queuebox/sinks/tracing"
)

// tracingKeys is the keys of the tracing scenario's backlog, as drain-keys.
const tracingKeys = 1000

// runTracing drains the same backlog (over 1,000 keys, to the null
// destination) with tracing off, as a relay with no OTEL_* variable runs,
// and with tracing on as OTEL_TRACES_EXPORTER=otlp and
// OTEL_TRACES_SAMPLER=always_on set it up (a span per delivery, batched
// and exported over OTLP/HTTP to a receiver in this process that reads
// every export and keeps nothing), in the order of offOnOnOff. The lines
// of tracing on carry their rate against the mean of those with it off.
func runTracing(ctx context.Context, e *env) ([]Result, error) {
	recv, err := startDiscardingOTLP()
	if err != nil {
		return nil, err
	}
	defer recv.close()
	offs := 0
	return offOnOnOff(func(i int, on bool) (Result, error) {
		if on {
			r, err := e.tracedDrain(ctx, recv)
			r.Variant = fmt.Sprintf("tracing on (%d): OTLP/HTTP, always_on", i)
			return r, err
		}
		offs++
		r, err := e.drain(ctx, "tracing", e.o.Rows, tracingKeys, nil)
		r.Variant = fmt.Sprintf("tracing off (%d)", offs)
		return r, err
	})
}

// tracedDrain drains with a span per delivery, exported to recv.
func (e *env) tracedDrain(ctx context.Context, recv *discardingOTLP) (Result, error) {
	exports, bytes := recv.exports.Load(), recv.bytes.Load()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(recv.url+"/v1/traces"))
	if err != nil {
		return Result{}, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	e.tracer = tracing.New(tp, bootstrap.Version, nil)
	r, err := e.drain(ctx, "tracing", e.o.Rows, tracingKeys, nil)
	e.tracer = nil
	// The spans still buffered go out after the drain's clock stopped.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	flushErr := tp.Shutdown(sctx)
	cancel()
	if err != nil {
		return r, err
	}
	note := fmt.Sprintf("%d exports of %.1f MB to a receiver in this process", recv.exports.Load()-exports, float64(recv.bytes.Load()-bytes)/1e6)
	if flushErr != nil {
		note += fmt.Sprintf("; the last spans were not all exported: %v", flushErr)
	}
	r.Note = joinNote(note, r.Note)
	return r, nil
}

func joinNote(a, b string) string {
	if b == "" {
		return a
	}
	return a + "; " + b
}

// discardingOTLP answers OTLP/HTTP trace exports as a collector does (200
// with an empty ExportTraceServiceResponse) after reading them whole, and
// keeps nothing but counts.
type discardingOTLP struct {
	url            string
	srv            *http.Server
	exports, bytes atomic.Int64
}

func startDiscardingOTLP() (*discardingOTLP, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &discardingOTLP{url: "http://" + ln.Addr().String()}
	r.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n, _ := io.Copy(io.Discard, req.Body)
		r.exports.Add(1)
		r.bytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *discardingOTLP) close() { _ = r.srv.Close() }
