package inbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/inbox/sourcetest"
	"github.com/queuebox/queuebox/internal/testdb"
)

// The HTTP source passes the sources' conformance suite with a sender of
// the harness's own, which posts each message until a running source
// answers it, as a webhook sender retries: a source that dies after the
// commit and before the answer (a test hook drops the request) gets the
// message again from the sender, and a source that stops leaves the
// unanswered messages with their sender. It refuses by answering 400.
func TestConformance(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, sourcetest.Harness{
		Features: sourcetest.Features{Refusal: sourcetest.Answered},
		Open: func(t *testing.T, _ bool) *sourcetest.Target {
			w := newWebhooks(t, testdb.Migrated(t, 10))
			return &sourcetest.Target{
				Inbox: w.d,
				// The sender posts one message at a time: each
				// statement stores one.
				MaxBatch:    1,
				GeneratedID: sourcetest.NewID,
				Send:        w.send,
				Consumer: func(t *testing.T, o sourcetest.Options) (inbox.Consumer, error) {
					return &webhookSource{w: w, o: o, mapping: o.Traced(sourcetest.Mapping(t, "hooks", "Event-Type", "Aggregate-Id"))}, nil
				},
				Left:     w.left,
				Refusals: w.refused,
			}
		},
	})
}

// webhooks is one HTTP source of a case: the server that runs it (one at a
// time, or none) and the senders that post to it.
type webhooks struct {
	d      *postgres.Dialect
	client *http.Client

	mu sync.Mutex
	// changed is signalled when url changes and when the test ends.
	changed *sync.Cond
	// url is the running source's, "" while none runs.
	url string
	// unanswered counts the messages sent and not answered yet.
	unanswered int
	refusals   map[string]string
	ended      bool
}

func newWebhooks(t *testing.T, d *postgres.Dialect) *webhooks {
	w := &webhooks{d: d, client: &http.Client{Timeout: sourcetest.Wait}, refusals: map[string]string{}}
	w.changed = sync.NewCond(&w.mu)
	t.Cleanup(func() {
		w.mu.Lock()
		w.ended = true
		w.changed.Broadcast()
		w.mu.Unlock()
	})
	return w
}

// serve makes url the running source's; from is the url it replaces ("" for
// any): a source that stops clears only its own.
func (w *webhooks) serve(from, url string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if from == "" || w.url == from {
		w.url = url
		w.changed.Broadcast()
	}
}

// send is one sender: it posts msgs in order, each until it is answered.
func (w *webhooks) send(t *testing.T, msgs ...sourcetest.Message) {
	w.mu.Lock()
	w.unanswered += len(msgs)
	w.mu.Unlock()
	go func() {
		failed := ""
		for i := 0; i < len(msgs); {
			w.mu.Lock()
			for !w.ended && (w.url == "" || w.url == failed) {
				w.changed.Wait()
			}
			url, ended := w.url, w.ended
			w.mu.Unlock()
			if ended {
				return
			}
			if !w.post(t, url, msgs[i]) {
				failed = url // no answer: wait for the next source
				continue
			}
			failed = ""
			i++
		}
	}()
}

// post sends one message and reports whether it was answered.
func (w *webhooks) post(t *testing.T, url string, m sourcetest.Message) bool {
	req, err := http.NewRequest(http.MethodPost, url+"/inbox/hooks", bytes.NewReader(m.Body))
	if err != nil {
		t.Error(err)
		return true
	}
	for name, v := range map[string]string{"X-Message-Id": m.ID, "Event-Type": m.Type, "Aggregate-Id": m.Aggregate} {
		if v != "" {
			req.Header.Set(name, v)
		}
	}
	for name, v := range m.Headers {
		req.Header.Set(name, v)
	}
	res, err := w.client.Do(req)
	if err != nil {
		return false
	}
	defer res.Body.Close()
	var a struct{ Error string }
	_ = json.NewDecoder(res.Body).Decode(&a)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unanswered--
	switch res.StatusCode {
	case http.StatusOK, http.StatusAccepted:
	case http.StatusBadRequest:
		w.refusals[m.ID] = a.Error
	default:
		if !w.ended {
			t.Errorf("%s was answered %d %s", m.ID, res.StatusCode, a.Error)
		}
	}
	return true
}

func (w *webhooks) left(*testing.T) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.unanswered, nil
}

func (w *webhooks) refused() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]string, len(w.refusals))
	for id, r := range w.refusals {
		out[id] = r
	}
	return out
}

// webhookSource runs the handler as an inbox.Consumer for the suite: Start
// serves it, Stop closes the server once the requests in hand are
// answered.
type webhookSource struct {
	w       *webhooks
	o       sourcetest.Options
	mapping *inbox.Mapping
	srv     *httptest.Server
}

func (s *webhookSource) Source() string { return "hooks" }

func (s *webhookSource) Start() error {
	h := inbox.NewHTTP(inbox.HTTPOptions{Store: s.w.d, Observer: s.o.Observer, Sources: map[string]*inbox.HTTPSource{
		"hooks": {Mapping: s.mapping},
	}})
	mux := http.NewServeMux()
	mux.Handle(inbox.Prefix, h)
	s.srv = httptest.NewUnstartedServer(mux)
	if s.o.AfterStore != nil {
		srv := s.srv
		inbox.SetAfterStore(h, func() error {
			err := s.o.AfterStore()
			if err != nil {
				// The replica died: no sender reaches it again.
				s.w.serve(srv.URL, "")
				go srv.Close()
			}
			return err
		})
	}
	s.srv.Start()
	s.w.serve("", s.srv.URL)
	return nil
}

func (s *webhookSource) Stop(context.Context) error {
	if s.srv != nil {
		s.w.serve(s.srv.URL, "")
		s.srv.Close()
	}
	return nil
}
