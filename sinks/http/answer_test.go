package http

import (
	"context"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/queuebox/queuebox/sinks"
)

// With a collector in the context, the sink reports each message's status
// and an excerpt of the body, cut to the collector's limit on a character;
// a failure's too. Without one it reports nothing and fails as always.
func TestAnswersAreReportedWhenAsked(t *testing.T) {
	status := 200
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.WriteHeader(status)
		_, _ = w.Write([]byte("accepted " + strings.Repeat("é", 50)))
	}))
	defer srv.Close()
	s := sink(t, srv.URL+"/x", nil)
	msgs := []sinks.Message{msg()}

	ans := sinks.NewAnswers(msgs, 20)
	if errs := s.Publish(sinks.WithAnswers(context.Background(), ans), msgs); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if a := ans.Of(0); a.Status != "HTTP 200 OK" || a.Body != "accepted "+strings.Repeat("é", 5) {
		t.Errorf("the answer to a delivery: %+v", a)
	}

	status = 503
	ans = sinks.NewAnswers(msgs, 1000)
	errs := s.Publish(sinks.WithAnswers(context.Background(), ans), msgs)
	if errs[0] == nil || !strings.HasPrefix(errs[0].Error(), "HTTP 503 Service Unavailable: accepted") {
		t.Fatalf("error %v", errs[0])
	}
	// The body is read up to http.maxErrorBodyBytes (64 here) for a failure.
	if a := ans.Of(0); a.Status != "HTTP 503 Service Unavailable" || !strings.HasPrefix(a.Body, "accepted é") || len(a.Body) > 64 {
		t.Errorf("the answer to a failure: %+v", a)
	}

	if _, ok := sinks.Wants(context.Background()); ok {
		t.Error("a context without a collector wants answers")
	}
	sinks.Report(context.Background(), msgs[0].ID, sinks.Answer{Status: "x"}) // no collector: a no-op
}
