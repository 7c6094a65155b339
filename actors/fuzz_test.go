package actors

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/queuebox/queuebox/actors/internal/destctl"
	"github.com/queuebox/queuebox/internal/clock"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
	httpsink "github.com/queuebox/queuebox/sinks/http"
)

// Fuzzing a row on its way to an HTTP destination: any payload, headers
// column, topic and key. The promise for a row is that it is delivered, or
// goes dead with a reason, or (for a transform that fails on it) is
// retried; a row that a healthy destination can never accept must not be
// retried as if the destination had failed.
//
// The seed corpus runs with `go test`; `make fuzz` runs each fuzz test for a
// while, and `go test ./actors -run '^$' -fuzz FuzzRowOverHTTP -fuzztime 10m`
// for longer. Crashers land in testdata/fuzz and stay there as regression
// tests.

// fuzzDeliverer routes order.# to an HTTP receiver that accepts
// everything, closed when the fuzz test ends.
func fuzzDeliverer(t testing.TB, transform string) (*deliverer, *httpsink.Sink) {
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(recv.Close)
	pat, err := routing.CompilePattern("order.#")
	if err != nil {
		t.Fatal(err)
	}
	route := routing.Route{Name: "orders", Pattern: pat, Destination: "hook"}
	if transform != "" {
		if route.Transform, err = routing.CompileTransform(transform); err != nil {
			t.Fatal(err)
		}
	}
	router := routing.NewRouter([]routing.Route{route})
	tpl, err := routing.ParseTemplate(recv.URL + "/{{ topic }}?key={{ key }}")
	if err != nil {
		t.Fatal(err)
	}
	sink, err := httpsink.New(httpsink.Config{URL: tpl, Method: "POST", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Close() })
	h := destctl.NewHandle("hook", destctl.Policy{}, 100, clock.Wall{})
	h.Set(sink)
	return &deliverer{router: router, sinks: map[string]*destctl.Handle{"hook": h}, routes: newRouteObservers(router, NopObserver{}), clock: clock.Wall{}}, sink
}

func FuzzRowOverHTTP(f *testing.F) {
	seeds := []struct {
		payload, headers, topic, key string
		typed                        bool
	}{
		{`{"orderId":7}`, `{}`, "order.created", "cust-7", true},
		{`[1,2,3]`, `{"X-Tenant":"acme"}`, "order.paid", "", false},
		{`"{\"a\":1}"`, ``, "order.created", "k", false},
		{`42`, ``, "order.created", "k", true},
		{`null`, `null`, "order.created", "k", true},
		{``, ``, "order.created", "k", false},
		{`{"a":`, ``, "order.created", "k", false},
		{` {"a":1} `, `{"X-A":3}`, "order.created", "k", false},
		{`{"a":1}`, `["x"]`, "order.created", "k", false},
		{`{"a":1}`, `{"bad name":"x"}`, "order.created", "k", false},
		{`{"a":1}`, `{}`, "user.created", "k", false}, // no route
		{`{"a":1}`, `{}`, "order.created", "cust 42/a?b", false},
		{"\xef\xbb\xbf{\"a\":1}", `{}`, "order.created", "k", false}, // a byte order mark, as SQL Server text may hold
		{`{"a":"\u0000"}`, `{"X-Trace":"00-abc-01"}`, "order.created", "k", false},
	}
	for _, s := range seeds {
		f.Add([]byte(s.payload), []byte(s.headers), s.topic, s.key, s.typed)
	}
	d, sink := fuzzDeliverer(f, "")
	f.Fuzz(func(t *testing.T, payload, headers []byte, topic, key string, typed bool) {
		if typed && !json.Valid(payload) {
			typed = false // a jsonb column holds valid JSON; text columns (SQL Server) hold anything
		}
		r := dialects.Row{Claim: dialects.Claim{ID: uuid.New(), Token: uuid.New()}, Topic: topic, Key: key, Payload: payload,
			Headers: headers, TypedJSON: typed, Sequence: 1, CreatedAt: time.Now(), MaxAttempts: 5}
		p := d.prepare(r)
		if p.dead != nil {
			if strings.TrimSpace(p.dead.Error()) == "" {
				t.Fatal("dead without a reason")
			}
			return
		}
		if p.retry != nil {
			t.Fatalf("retried without a transform: %v", p.retry)
		}
		// What passed the checks is a JSON object or array, and headers
		// that are strings.
		body := bytes.TrimSpace(p.msg.Body)
		if !json.Valid(body) || (body[0] != '{' && body[0] != '[') {
			t.Fatalf("prepared a payload that is not a JSON object or array: %q", payload)
		}
		if !strings.HasPrefix(topic, "order") {
			t.Fatalf("topic %q matched order.#", topic)
		}
		errs := sink.Publish(context.Background(), []sinks.Message{p.msg})
		if errs[0] != nil && !sinks.IsPermanent(errs[0]) {
			t.Fatalf("a healthy destination refused the row, and the error retries it (the row would hold back its key until max_attempts, then go dead): %v\nkey %q, topic %q, headers %q",
				errs[0], key, topic, headers)
		}
	})
}

// FuzzCheckPayload: the payload check never panics, and what it accepts
// is exactly a JSON object or array (for a text column, after trimming
// white space).
func FuzzCheckPayload(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `"{}"`, `""`, `1e999`, `-0`, `{"a":[1,{"b":null}]}`, "\t{\"a\":1}\n", `{"a":1}x`, `nul`, "\x00"} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, b []byte, typed bool) {
		if typed && !json.Valid(b) {
			return
		}
		err := checkPayload(b, typed)
		tr := bytes.TrimSpace(b)
		want := json.Valid(tr) && len(tr) > 0 && (tr[0] == '{' || tr[0] == '[')
		if (err == nil) != want {
			t.Fatalf("checkPayload(%q, typed %v) = %v; want accepted %v", b, typed, err, want)
		}
		if err != nil && err.Error() == "" {
			t.Fatal("an error without words")
		}
	})
}

// FuzzParseHeaders: the headers column either parses into string values,
// every one of them there, or fails with a reason.
func FuzzParseHeaders(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":"b"}`, `{"a":1}`, `[]`, `null`, `"x"`, `{"a":"b","a":"c"}`, `{"":"x"}`, `{"a":"\n"}`, ` `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHeaders(b)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without words")
			}
			return
		}
		// Like the payload check, the column is read after trimming white
		// space (Unicode's, which is a little more than JSON's).
		var m map[string]any
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			return
		}
		if json.Unmarshal(b, &m) != nil {
			t.Fatalf("parseHeaders accepted %q, which is not a JSON object", b)
		}
		for k, v := range m {
			if s, ok := v.(string); !ok || h[k] != s {
				t.Fatalf("header %q: got %q from %q", k, h[k], b)
			}
		}
	})
}
