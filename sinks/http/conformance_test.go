package http

import (
	"io"
	"net"
	nethttp "net/http"
	"sync"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
	"github.com/queuebox/queuebox/sinks/sinktest"
)

func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		Features: sinktest.Features{Observable: true, Templated: true, Unroutable: true,
			Restart: true, CloseConnections: true, Down: true},
		Open: openTarget,
	})
}

// receiver is an HTTP server that records what reaches /r1 (404 anywhere
// else), and that can be restarted at the same address and made to drop
// its connections.
type receiver struct {
	addr string
	mu   sync.Mutex
	got  []sinktest.Delivery
	srv  *nethttp.Server
	conn map[net.Conn]struct{}
}

func (r *receiver) serve(w nethttp.ResponseWriter, req *nethttp.Request) {
	body, _ := io.ReadAll(req.Body)
	if req.URL.Path != "/r1" {
		w.WriteHeader(404)
		return
	}
	d := sinktest.Delivery{ID: req.Header.Get("X-Message-Id"), Key: req.Header.Get("X-Key"), Headers: map[string]string{}, Body: body}
	for k, v := range req.Header {
		d.Headers[k] = v[0]
	}
	r.mu.Lock()
	r.got = append(r.got, d)
	r.mu.Unlock()
	w.WriteHeader(204)
}

func (r *receiver) start(t *testing.T) {
	var ln net.Listener
	testkit.Eventually(t, "listening again on "+r.addr, 5*time.Second, func() (err error) { // the old socket may linger a moment
		ln, err = net.Listen("tcp", r.addr)
		return err
	})
	r.addr = ln.Addr().String()
	srv := &nethttp.Server{Handler: nethttp.HandlerFunc(r.serve), ConnState: func(c net.Conn, s nethttp.ConnState) {
		r.mu.Lock()
		defer r.mu.Unlock()
		switch s {
		case nethttp.StateNew:
			r.conn[c] = struct{}{}
		case nethttp.StateClosed, nethttp.StateHijacked:
			delete(r.conn, c)
		}
	}}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

func (r *receiver) stop() {
	r.mu.Lock()
	srv := r.srv
	r.mu.Unlock()
	_ = srv.Close()
}

func openTarget(t *testing.T, _ bool) *sinktest.Target {
	r := &receiver{addr: "127.0.0.1:0", conn: map[net.Conn]struct{}{}}
	r.start(t)
	t.Cleanup(r.stop)
	s := newSink(t, "http://"+r.addr+"/{{ headers.Route }}")
	return &sinktest.Target{
		Sink: s, Route: "r1", Unroutable: "nowhere",
		Received: func() []sinktest.Delivery {
			r.mu.Lock()
			defer r.mu.Unlock()
			return append([]sinktest.Delivery(nil), r.got...)
		},
		Stop:  func(*testing.T) { r.stop() },
		Start: r.start,
		CloseConnections: func(t *testing.T) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if len(r.conn) == 0 {
				t.Fatal("the sink holds no connection to close")
			}
			for c := range r.conn {
				_ = c.Close()
			}
		},
		Down: func(t *testing.T) (sinks.Sink, string) {
			addr := sinktest.ClosedAddress(t)
			return newSink(t, "http://"+addr+"/{{ headers.Route }}"), addr
		},
	}
}

func newSink(t testing.TB, url string) *Sink {
	tpl, err := routing.ParseTemplate(url)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{URL: tpl, Method: "POST", Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkPublish: 100,000 requests over 1,000 keys to a local receiver
// (on the same cores), one request at a time per key.
func BenchmarkPublish(b *testing.B) {
	srv := &nethttp.Server{Handler: nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(204)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	s := newSink(b, "http://"+ln.Addr().String()+"/{{ topic }}")
	sinktest.Throughput(b, &sinktest.Target{Sink: s}, 1000, 100, 1)
}
