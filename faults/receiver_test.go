package faults

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// receiverMode is how the HTTP receiver answers.
type receiverMode int32

const (
	answerOK   receiverMode = iota // 200 after a short delay
	answer503                      // 503 at once: the destination is failing
	answerSlow                     // 200 after longer than the relay's timeout
)

// receiver is the HTTP destination of the suite. It writes every request
// to the ledger when it arrives and when it is answered.
type receiver struct {
	URL    string
	ledger *ledger
	srv    *http.Server
	mode   atomic.Int32
	delay  time.Duration // the answer's delay in answerOK
	slow   time.Duration // the answer's delay in answerSlow
	reqs   atomic.Int64
}

func newReceiver(t *testing.T, l *ledger, delay, slow time.Duration) *receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{URL: "http://" + ln.Addr().String(), ledger: l, delay: delay, slow: slow}
	r.srv = &http.Server{
		Handler:     r,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, tapKey{}, c) },
	}
	go func() { _ = r.srv.Serve(&tapListener{ln}) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.srv.Shutdown(ctx)
		_ = r.srv.Close()
	})
	return r
}

func (r *receiver) setMode(m receiverMode) { r.mode.Store(int32(m)) }

func (r *receiver) ServeHTTP(w http.ResponseWriter, hr *http.Request) {
	tc, _ := hr.Context().Value(tapKey{}).(*tapConn)
	var first time.Time
	if tc != nil {
		first = tc.firstByte()
	}
	seq, _ := strconv.ParseInt(hr.Header.Get("X-Sequence"), 10, 64)
	att, _ := strconv.Atoi(hr.Header.Get("X-Attempt"))
	dest := "http"
	if strings.HasPrefix(hr.URL.Path, "/fanb/") {
		dest = "http-b" // the second destination of the fan-out route
	}
	d := r.ledger.arrive(delivery{Dest: dest, ID: hr.Header.Get("X-Message-Id"), Key: hr.Header.Get("X-Key"), Seq: seq, Attempt: att,
		Replica: hr.Header.Get("X-Replica"), Request: int(r.reqs.Add(1)), FirstByte: first})
	_, _ = io.Copy(io.Discard, hr.Body)
	if tc != nil {
		tc.arm() // the next bytes on this connection are the next request's
	}
	var wait time.Duration
	switch receiverMode(r.mode.Load()) {
	case answer503:
		r.ledger.finish(d, refused, 503)
		http.Error(w, "the receiver is failing on purpose", http.StatusServiceUnavailable)
		return
	case answerSlow:
		wait = r.slow
	default:
		wait = r.delay
	}
	if wait > 0 {
		select {
		case <-time.After(wait):
		case <-hr.Context().Done():
			r.ledger.finish(d, abandoned, 0)
			return
		}
	}
	if hr.Context().Err() != nil {
		r.ledger.finish(d, abandoned, 0)
		return
	}
	// Recorded before the answer leaves: the relay cannot send the key's
	// next row before it reads this answer, so that row's arrival comes
	// after this event.
	r.ledger.finish(d, accepted, 200)
	w.WriteHeader(http.StatusOK)
}

type tapKey struct{}

// tapListener wraps accepted connections in tapConn.
type tapListener struct{ net.Listener }

func (l *tapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &tapConn{Conn: c, armed: true}, nil
}

// tapConn notes when the first byte of each request arrives. HTTP/1.1
// clients send the next request on a connection only after the previous
// answer, so once a request's body has been read, the next bytes that
// arrive begin the next request.
type tapConn struct {
	net.Conn
	mu    sync.Mutex
	armed bool
	first time.Time
}

func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		if c.armed {
			c.first, c.armed = time.Now(), false
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *tapConn) firstByte() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first
}

func (c *tapConn) arm() {
	c.mu.Lock()
	c.armed = true
	c.mu.Unlock()
}
