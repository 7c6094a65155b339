package http

import (
	"context"
	"errors"
	"io"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
)

// The Standard Webhooks specification's published test vector.
func TestSignMatchesStandardWebhooksVector(t *testing.T) {
	key, err := DecodeSigningSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", []byte(`{"test": 2432232314}`))
	if got != "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" {
		t.Fatalf("signature %s", got)
	}
}

func sink(t *testing.T, url string, mod func(*Config)) *Sink {
	t.Helper()
	tpl, err := routing.ParseTemplate(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{URL: tpl, Method: "PUT", Timeout: 2 * time.Second, MaxErrorBody: 64}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func msg() sinks.Message {
	agg := "order"
	return sinks.Message{ID: "0b7e3f4e-0000-4000-8000-000000000001", Topic: "order.created", Key: "cust 42/a", AggregateType: &agg,
		Sequence: 7, Attempt: 2, CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Headers: map[string]string{"X-Tenant": "acme", "X-Topic": "spoofed", "Authorization": "row-value"}, Body: []byte(`{"a":1}`)}
}

func TestRequestCarriesHeadersBodyAndEscapedURL(t *testing.T) {
	var got *nethttp.Request
	var body []byte
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		got, body = r, must(io.ReadAll(r.Body))
		w.WriteHeader(204)
	}))
	defer srv.Close()
	key := must(DecodeSigningSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"))
	s := sink(t, srv.URL+"/k/{{ key }}?t={{ topic }}", func(c *Config) {
		c.Headers = map[string]string{"Authorization": "Bearer configured"}
		c.SigningSecret = key
	})
	s.now = func() time.Time { return time.Unix(1700000000, 0) }
	errs := s.Publish(context.Background(), []sinks.Message{msg()})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	if got.Method != "PUT" || got.URL.EscapedPath() != "/k/cust%2042%2Fa" || got.URL.Query().Get("t") != "order.created" {
		t.Errorf("request %s %s", got.Method, got.URL)
	}
	want := map[string]string{
		"X-Message-Id": "0b7e3f4e-0000-4000-8000-000000000001", "X-Attempt": "2", "X-Topic": "order.created",
		"X-Key": "cust 42/a", "X-Aggregate-Type": "order", "X-Sequence": "7", "X-Created-At": "2025-01-02T03:04:05Z",
		"Content-Type": "application/json", "X-Tenant": "acme", "Authorization": "Bearer configured",
		"Webhook-Id": "0b7e3f4e-0000-4000-8000-000000000001", "Webhook-Timestamp": "1700000000",
	}
	for k, v := range want {
		if got.Header.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, got.Header.Get(k), v)
		}
	}
	if sig := got.Header.Get("Webhook-Signature"); sig != "v1,"+Sign(key, want["Webhook-Id"], "1700000000", body) {
		t.Errorf("signature %s", sig)
	}
	if string(body) != `{"a":1}` {
		t.Errorf("body %s", body)
	}
}

// A destination in a rotation signs each delivery with both secrets. A
// receiver that verifies with the Standard Webhooks project's own Go
// library accepts it knowing either secret alone, refuses it knowing
// neither, and refuses it when the body was changed on the way.
func TestSigningWithTheSecretsOfARotation(t *testing.T) {
	const newSecret, oldSecret, otherSecret = "whsec_QkVTdC1rZXktb2YtdGhlLXJvdGF0aW9uIQ==", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_YW5vdGhlci1zZWNyZXQtZW50aXJlbHk="
	var got nethttp.Header
	var body []byte
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		got, body = r.Header.Clone(), must(io.ReadAll(r.Body))
		w.WriteHeader(204)
	}))
	defer srv.Close()
	s := sink(t, srv.URL+"/", func(c *Config) {
		c.SigningSecrets = [][]byte{must(DecodeSigningSecret(newSecret)), must(DecodeSigningSecret(oldSecret))}
	})
	if err := s.Publish(context.Background(), []sinks.Message{msg()})[0]; err != nil {
		t.Fatal(err)
	}
	if sigs := strings.Fields(got.Get("Webhook-Signature")); len(sigs) != 2 || !strings.HasPrefix(sigs[0], "v1,") || !strings.HasPrefix(sigs[1], "v1,") {
		t.Fatalf("webhook-signature %q; want two v1 signatures, space-separated", got.Get("Webhook-Signature"))
	}
	verify := func(secret string, b []byte) error {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		return wh.Verify(b, got)
	}
	for _, secret := range []string{newSecret, oldSecret} {
		if err := verify(secret, body); err != nil {
			t.Errorf("a receiver that knows %s...: %v", secret[:10], err)
		}
	}
	if err := verify(otherSecret, body); err == nil {
		t.Error("a receiver with another secret accepted the delivery")
	}
	if err := verify(newSecret, []byte(`{"a":2}`)); err == nil {
		t.Error("a changed body passed verification")
	}
}

func TestOutcomesOfStatuses(t *testing.T) {
	status := 503
	retryAfter := "7"
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, strings.Repeat("x", 1000))
	}))
	defer srv.Close()
	s := sink(t, srv.URL+"/", func(c *Config) { c.NonRetryableStatus = []int{410} })
	m := msg()
	m.Key = ""

	err := s.Publish(context.Background(), []sinks.Message{m})[0]
	if d, ok := sinks.RetryAfter(err); !ok || d != 7*time.Second || sinks.IsPermanent(err) {
		t.Errorf("503 with Retry-After 7: %v %v %v", err, d, ok)
	}
	if !strings.HasPrefix(err.Error(), "HTTP 503 Service Unavailable: xxx") || len(err.Error()) > 64+40 {
		t.Errorf("error text %q", err.Error())
	}
	status, retryAfter = 410, ""
	if err := s.Publish(context.Background(), []sinks.Message{m})[0]; !sinks.IsPermanent(err) {
		t.Errorf("410 is listed as non-retryable: %v", err)
	}
	status = 500
	if err := s.Publish(context.Background(), []sinks.Message{m})[0]; err == nil || sinks.IsPermanent(err) {
		t.Errorf("500 is retried: %v", err)
	}
}

func TestMissingTemplateValueIsPermanentAndStopsTheRun(t *testing.T) {
	calls := 0
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) { calls++ }))
	defer srv.Close()
	s := sink(t, srv.URL+"/{{ headers.X-Region }}", nil)
	errs := s.Publish(context.Background(), []sinks.Message{msg(), msg()})
	var me *routing.MissingError
	if !sinks.IsPermanent(errs[0]) || !errors.As(errs[0], &me) || errs[1] == nil || sinks.IsPermanent(errs[1]) || calls != 0 {
		t.Fatalf("errs %v, calls %d", errs, calls)
	}
}

func TestTransportErrorIsRetried(t *testing.T) {
	s := sink(t, "http://127.0.0.1:1/x", nil)
	err := s.Publish(context.Background(), []sinks.Message{msg()})[0]
	if err == nil || sinks.IsPermanent(err) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("%v", err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if d, ok := parseRetryAfter("Wed, 01 Jan 2025 00:00:30 GMT", now); !ok || d != 30*time.Second {
		t.Errorf("date: %v %v", d, ok)
	}
	if _, ok := parseRetryAfter("soon", now); ok {
		t.Error("garbage parsed")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A delivery cancelled by the engine (a drain timeout, a lost claim) must be
// recognisable as such through the transport error's wrapping, or the engine
// logs a false "destination failing".
func TestCancelledDeliveryWrapsContextCanceled(t *testing.T) {
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		arrived <- struct{}{}
		<-release
	}))
	defer srv.Close()
	defer close(release)
	s := sink(t, srv.URL+"/x", nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	err := s.Publish(ctx, []sinks.Message{msg()})[0]
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%v (%T) does not wrap context.Canceled", err, err)
	}
	if !strings.Contains(err.Error(), srv.URL) || strings.Contains(err.Error(), `"`+srv.URL) {
		t.Errorf("the text should name the URL without Go's quoting: %q", err.Error())
	}
}

// A value HTTP cannot carry in a header (a control character in the key,
// the topic or the headers column) fails its message for good, naming the
// header, instead of being retried as a transport error.
func TestHeaderValueHTTPCannotCarryIsPermanent(t *testing.T) {
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) { w.WriteHeader(204) }))
	defer srv.Close()
	tpl, _ := routing.ParseTemplate(srv.URL + "/x")
	s, err := New(Config{URL: tpl, Method: "POST", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, m := range []sinks.Message{
		{ID: "1", Topic: "t", Key: "k\x00ey", Body: []byte(`{}`)},
		{ID: "2", Topic: "t\x01", Body: []byte(`{}`)},
		{ID: "3", Topic: "t", Headers: map[string]string{"X-Tenant": "a\x7fb"}, Body: []byte(`{}`)},
		{ID: "5", Topic: "t", Headers: map[string]string{"X(Tenant)": "acme"}, Body: []byte(`{}`)},
		{ID: "6", Topic: "t", Headers: map[string]string{"X-Ténant": "acme"}, Body: []byte(`{}`)},
	} {
		errs := s.Publish(context.Background(), []sinks.Message{m})
		if errs[0] == nil || !sinks.IsPermanent(errs[0]) || !strings.Contains(errs[0].Error(), "cannot be sent over HTTP") {
			t.Errorf("message %s: %v, want a permanent error naming the header", m.ID, errs[0])
		}
	}
	ok := s.Publish(context.Background(), []sinks.Message{{ID: "4", Topic: "t", Key: "tab\tok", Body: []byte(`{}`)}})
	if ok[0] != nil {
		t.Errorf("a tab in a header is allowed: %v", ok[0])
	}
}
