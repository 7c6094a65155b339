// Package testrecv is an HTTP receiver for tests: it records every request
// with QueueBox's headers and answers as the test's policy says, so tests can
// check at the receiver that nothing was lost and every key stayed in order.
package testrecv

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testkit"
)

// Request is one request the receiver got.
type Request struct {
	ID       string
	Topic    string
	Key      string
	Sequence int64
	Attempt  int
	Status   int
	Body     []byte
	Header   http.Header
	At       time.Time
}

// Policy answers a request: the status, and optionally a body and headers.
type Policy func(r *Request) (status int, body string, header map[string]string)

// Receiver records requests.
type Receiver struct {
	*httptest.Server
	mu     sync.Mutex
	reqs   []Request
	policy Policy
	delay  time.Duration
}

// New starts a receiver; nil policy answers 200.
func New(t testing.TB, policy Policy) *Receiver {
	r := &Receiver{policy: policy}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Server.Close)
	return r
}

// SetDelay makes every answer wait d (requests stay in flight).
func (r *Receiver) SetDelay(d time.Duration) {
	r.mu.Lock()
	r.delay = d
	r.mu.Unlock()
}

func (r *Receiver) serve(w http.ResponseWriter, hr *http.Request) {
	body, _ := io.ReadAll(hr.Body)
	seq, _ := strconv.ParseInt(hr.Header.Get("X-Sequence"), 10, 64)
	att, _ := strconv.Atoi(hr.Header.Get("X-Attempt"))
	req := Request{ID: hr.Header.Get("X-Message-Id"), Topic: hr.Header.Get("X-Topic"), Key: hr.Header.Get("X-Key"),
		Sequence: seq, Attempt: att, Body: body, Header: hr.Header.Clone(), Status: 200}
	r.mu.Lock()
	delay := r.delay
	r.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	var respBody string
	if r.policy != nil {
		var hdr map[string]string
		req.Status, respBody, hdr = r.policy(&req)
		for k, v := range hdr {
			w.Header().Set(k, v)
		}
	}
	req.At = time.Now()
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	w.WriteHeader(req.Status)
	_, _ = io.WriteString(w, respBody)
}

// Requests returns a copy of every request so far, in arrival order.
func (r *Receiver) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.reqs...)
}

// Delivered counts distinct message ids answered with a 2xx.
func (r *Receiver) Delivered() int {
	seen := map[string]bool{}
	for _, q := range r.Requests() {
		if q.Status < 300 {
			seen[q.ID] = true
		}
	}
	return len(seen)
}

// WaitDelivered waits until n distinct ids were accepted, or fails.
func (r *Receiver) WaitDelivered(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	testkit.Eventually(t, "the receiver to accept every row", timeout, func() error {
		if got := r.Delivered(); got < n {
			return fmt.Errorf("it accepted %d distinct rows, want %d", got, n)
		}
		return nil
	})
}

// OrderReport checks per-key order at the receiver and returns problems.
// The contract: within a key, rows are accepted for the first time in
// sequence order, and no row is even sent for the first time while an
// earlier row of its key has not been accepted. Requests for rows that were
// already accepted are duplicates (at least once delivery after a fault);
// they are counted, not judged.
func (r *Receiver) OrderReport() (problems []string, duplicates int) {
	accepted := map[string]bool{}
	maxAccepted := map[string]int64{} // key -> highest sequence accepted
	pending := map[string]int64{}     // key -> a row sent but not yet accepted
	for _, q := range r.Requests() {
		if accepted[q.ID] {
			if q.Status < 300 {
				duplicates++
			}
			continue
		}
		if q.Key != "" {
			if m, ok := maxAccepted[q.Key]; ok && q.Sequence < m {
				problems = append(problems, fmt.Sprintf("key %s: sequence %d sent for the first time after %d was accepted", q.Key, q.Sequence, m))
			}
			if p, ok := pending[q.Key]; ok && p != q.Sequence && q.Sequence > p {
				problems = append(problems, fmt.Sprintf("key %s: sequence %d sent before %d was accepted", q.Key, q.Sequence, p))
			}
		}
		if q.Status < 300 {
			accepted[q.ID] = true
			if q.Key != "" {
				maxAccepted[q.Key] = max(maxAccepted[q.Key], q.Sequence)
				if pending[q.Key] == q.Sequence {
					delete(pending, q.Key)
				}
			}
		} else if q.Key != "" {
			pending[q.Key] = q.Sequence
		}
	}
	sort.Strings(problems)
	return problems, duplicates
}

// CheckOrder reports the first order problems as test errors and returns
// the number of duplicates.
func (r *Receiver) CheckOrder(t testing.TB) (duplicates int) {
	t.Helper()
	problems, duplicates := r.OrderReport()
	for _, p := range problems[:min(10, len(problems))] {
		t.Error(p)
	}
	return duplicates
}

// JSONField reads a top-level number from a request body.
func JSONField(body []byte, name string) int {
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	f, _ := m[name].(float64)
	return int(f)
}
