package cloudevents

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/google/uuid"

	"github.com/queuebox/queuebox/internal/testdest"
	"github.com/queuebox/queuebox/internal/testrabbit"
	"github.com/queuebox/queuebox/sinks"
	httpsink "github.com/queuebox/queuebox/sinks/http"
)

func TestMain(m *testing.M) { testrabbit.Main(m) }

func compile(t *testing.T, typ string, s Settings) Config {
	t.Helper()
	c, err := Compile(typ, s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var created = time.Date(2026, 3, 14, 9, 26, 53, 589793238, time.UTC)

// rows are a keyed message, with headers that must and must not pass, and
// an unkeyed one.
func rows() []sinks.Message {
	agg := "order"
	return []sinks.Message{
		{ID: uuid.NewString(), Topic: "order.created", Key: "cust-42", AggregateType: &agg, Sequence: 7, CreatedAt: created,
			Headers: map[string]string{"X-Custom": "yes", "Ce-Type": "stale.type", "cloudEvents_id": "stale-id"},
			Body:    []byte(`{"amount":1250,"currency":"EUR"}`)},
		{ID: uuid.NewString(), Topic: "order.deleted", AggregateType: &agg, Sequence: 8, CreatedAt: created.Add(time.Second),
			Body: []byte(`[{"line":1},{"line":2}]`)},
	}
}

const source = "https://shop.example.com/{{ aggregateType }}"

// checkEvent compares a received event with the one QueueBox promises for
// m (see the package doc).
func checkEvent(t *testing.T, e event.Event, m sinks.Message) {
	t.Helper()
	if err := e.Validate(); err != nil {
		t.Errorf("not a valid CloudEvent: %v", err)
	}
	want := map[string]string{
		"specversion": "1.0", "id": m.ID, "source": "https://shop.example.com/order", "type": m.Topic,
		"subject": m.Key, "datacontenttype": "application/json",
	}
	got := map[string]string{
		"specversion": e.SpecVersion(), "id": e.ID(), "source": e.Source(), "type": e.Type(),
		"subject": e.Subject(), "datacontenttype": e.DataContentType(),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("attributes\n got %v\nwant %v", got, want)
	}
	if !e.Time().Equal(m.CreatedAt) {
		t.Errorf("time = %s, want created_at %s", e.Time().Format(time.RFC3339Nano), m.CreatedAt.Format(time.RFC3339Nano))
	}
	pk, hasPK := e.Extensions()["partitionkey"]
	switch {
	case m.Key == "" && hasPK:
		t.Errorf("an unkeyed row has partitionkey %v", pk)
	case m.Key != "":
		if s, _ := types.ToString(pk); s != m.Key {
			t.Errorf("partitionkey = %v, want the key %q", pk, m.Key)
		}
	}
	var gotData, wantData any
	if err := json.Unmarshal(e.Data(), &gotData); err != nil {
		t.Fatalf("data %q is not JSON: %v", e.Data(), err)
	}
	_ = json.Unmarshal(m.Body, &wantData)
	if !reflect.DeepEqual(gotData, wantData) {
		t.Errorf("data = %s, want the payload %s", e.Data(), m.Body)
	}
}

// TestBindings sends through every real sink in both modes and reads what
// arrived with the CloudEvents SDK.
func TestBindings(t *testing.T) {
	for _, typ := range testdest.Types {
		for _, mode := range []string{"binary", "structured"} {
			t.Run(typ+"/"+mode, func(t *testing.T) {
				t.Parallel()
				d := testdest.Open(t, typ, testdest.Options{})
				cfg := compile(t, typ, Settings{Mode: mode, Source: source})
				msgs := rows()
				testdest.PublishThrough(t, Wrap(d.Sink, cfg), msgs...)
				got := d.Wait(t, len(msgs))
				for i, r := range got {
					m := msgs[i]
					if v, _ := r.Get("X-Custom"); m.Headers["X-Custom"] != v {
						t.Errorf("message %d: the row's header X-Custom = %q, want %q", i, v, m.Headers["X-Custom"])
					}
					if v, ok := r.Get("Ce-Type"); ok && v == "stale.type" {
						t.Errorf("message %d: the row's own Ce-Type header was sent", i)
					}
					if v, ok := r.Get("cloudEvents_id"); ok && v == "stale-id" {
						t.Errorf("message %d: the row's own cloudEvents_id header was sent", i)
					}
					if typ == "kafka" && string(r.Key) != m.Key {
						t.Errorf("message %d: the record key is %q, want the row's key %q", i, r.Key, m.Key)
					}
					msg := bindingMessage(typ, r)
					wantEnc := binding.EncodingBinary
					if mode == "structured" {
						wantEnc = binding.EncodingStructured
					}
					if enc := msg.ReadEncoding(); enc != wantEnc {
						t.Fatalf("message %d: the SDK reads %s mode, want %s; headers %v, content type %q", i, enc, wantEnc, r.Headers, r.ContentType)
					}
					e, err := binding.ToEvent(context.Background(), msg)
					if err != nil {
						t.Fatalf("message %d: the SDK cannot read the event: %v", i, err)
					}
					checkEvent(t, *e, m)
				}
			})
		}
	}
}

// Standard Webhooks sign what is sent: in structured mode, the event.
func TestSignatureSignsTheEvent(t *testing.T) {
	secret := []byte("0123456789abcdef0123")
	d := testdest.Open(t, "http", testdest.Options{SigningSecret: secret})
	m := rows()[0]
	testdest.PublishThrough(t, Wrap(d.Sink, compile(t, "http", Settings{Mode: "structured", Source: source})), m)
	r := d.Wait(t, 1)[0]
	if string(r.Body) == string(m.Body) {
		t.Fatal("the body is the payload, not the event")
	}
	ts, _ := r.Get("webhook-timestamp")
	sig, _ := r.Get("webhook-signature")
	if want := "v1," + httpsink.Sign(secret, m.ID, ts, r.Body); sig != want {
		t.Errorf("webhook-signature = %q, want %q (over the body as sent)", sig, want)
	}
}

// Header values are percent-encoded for NATS, with the binding's own
// example; for HTTP only when HTTP cannot carry them as they are (the SDKs
// do not decode them), and then whole; left alone elsewhere.
func TestPercentEncoding(t *testing.T) {
	if got, want := percentEncode("Euro € 😀"), "Euro%20%E2%82%AC%20%F0%9F%98%80"; got != want {
		t.Errorf("percentEncode = %q, want %q", got, want)
	}
	for _, s := range []string{`a"b`, "50%", "tab\there", "plain-value_1.2:3/4"} {
		enc := percentEncode(s)
		if strings.ContainsAny(enc, " \"\t") || (strings.Contains(s, "%") && !strings.Contains(enc, "%25")) {
			t.Errorf("percentEncode(%q) = %q", s, enc)
		}
	}
	m := rows()[0]
	m.Key = "Zoë 42"
	for _, b := range []struct {
		typ, header, want string
	}{
		{"http", "ce-subject", "Zoë 42"},
		{"nats", "ce-partitionkey", "Zo%C3%AB%2042"},
		{"kafka", "ce_subject", "Zoë 42"},
		{"rabbitmq", "cloudEvents_subject", "Zoë 42"},
	} {
		c := compile(t, b.typ, Settings{Source: "/shop"})
		out, err := c.Message(&m)
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Headers[b.header]; got != b.want {
			t.Errorf("%s: %s = %q, want %q", b.typ, b.header, got, b.want)
		}
	}
}

func TestHTTPHeaderValues(t *testing.T) {
	for in, want := range map[string]string{
		"Zoë 42, 100% sure": "Zoë 42, 100% sure",
		`say "hi"`:          `say "hi"`,
		" padded":           "%20padded",
		"line\nbreak 50%":   "line%0Abreak%2050%25",
		"tab\t":             "tab%09",
	} {
		if got := httpValue(in); got != want {
			t.Errorf("httpValue(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCompileRefuses(t *testing.T) {
	for _, c := range []struct {
		typ  string
		s    Settings
		key  string
		says string
	}{
		{"http", Settings{Mode: "batch", Source: "/x"}, "cloudEvents.mode", "use binary"},
		{"http", Settings{Mode: "binary"}, "cloudEvents.source", "is required"},
		{"kafka", Settings{Source: "/shop orders"}, "cloudEvents.source", "not a URI reference"},
		{"nats", Settings{Source: "/x/{{ nope }}"}, "cloudEvents.source", "unknown placeholder"},
		{"rabbitmq", Settings{Source: "/x", Type: "{{ topic"}, "cloudEvents.type", "unclosed placeholder"},
		{"null", Settings{Source: "/x"}, "cloudEvents", "no CloudEvents binding"},
	} {
		_, err := Compile(c.typ, c.s)
		var ce *sinks.ConfigError
		if !errors.As(err, &ce) || ce.Key != c.key || !strings.Contains(ce.Err.Error(), c.says) {
			t.Errorf("Compile(%s, %+v) = %v, want a ConfigError at %s saying %q", c.typ, c.s, err, c.key, c.says)
		}
	}
	// Every problem at once, each under its key, in the order of the keys.
	var keys []string
	_, err := Compile("http", Settings{Mode: "batch", Source: "/shop orders", Type: "{{ nope }}"})
	for _, p := range Problems(err) {
		var ce *sinks.ConfigError
		if errors.As(p, &ce) {
			keys = append(keys, ce.Key)
		}
	}
	if strings.Join(keys, " ") != "cloudEvents.mode cloudEvents.source cloudEvents.type" {
		t.Errorf("the problems of a block with three: %v (%v)", keys, err)
	}
	c := compile(t, "http", Settings{Source: "/x/{{ key }}"})
	if c.Mode != Binary || c.Type.String() != DefaultType {
		t.Errorf("defaults: mode %q, type %q; want binary and %s", c.Mode, c.Type.String(), DefaultType)
	}
}

// A row that cannot make an event (the source template needs the key of
// an unkeyed row) fails permanently, and the messages after it in the call
// are not sent.
func TestUnrenderableSourceIsPermanent(t *testing.T) {
	d := testdest.Open(t, "http", testdest.Options{})
	s := Wrap(d.Sink, compile(t, "http", Settings{Source: "/shop/{{ key }}"}))
	msgs := rows()
	msgs[0], msgs[1] = msgs[1], msgs[0] // the unkeyed row first
	errs := s.Publish(context.Background(), msgs)
	if !sinks.IsPermanent(errs[0]) || !strings.Contains(errs[0].Error(), "cloudEvents.source") {
		t.Errorf("the unkeyed row: %v, want a permanent error naming cloudEvents.source", errs[0])
	}
	if errs[1] == nil || sinks.IsPermanent(errs[1]) {
		t.Errorf("the row after it: %v, want not delivered (retried)", errs[1])
	}
}

func TestFromHTTP(t *testing.T) {
	data := `{"amount":1250}`
	binary := http.Header{}
	for k, v := range map[string]string{
		"Ce-Specversion": "1.0", "Ce-Id": "evt-1", "Ce-Source": "/payments", "Ce-Type": "payment.captured",
		"Ce-Subject": "pay%2077", "Ce-Time": "2026-03-14T09:26:53.5Z", "Content-Type": "application/json", "X-Other": "kept",
	} {
		binary.Set(k, v)
	}
	e := event.New()
	e.SetID("evt-2")
	e.SetSource("/payments")
	e.SetType("payment.refunded")
	e.SetExtension("partitionkey", "pay-78")
	if err := e.SetData("application/json", json.RawMessage(data)); err != nil {
		t.Fatal(err)
	}
	structured, err := format.JSON.Marshal(&e)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name          string
		header        http.Header
		body          string
		id, agg, typ  string
		wantCT        string
		notCloudEvent bool
		refusal       string
	}{
		{name: "binary", header: binary, body: data, id: "evt-1", agg: "pay 77", typ: "payment.captured", wantCT: "application/json"},
		{name: "structured", header: http.Header{"Content-Type": {"application/cloudevents+json; charset=utf-8"}}, body: string(structured), id: "evt-2", agg: "pay-78", typ: "payment.refunded", wantCT: "application/json"},
		{name: "plain", header: http.Header{"Content-Type": {"application/json"}}, body: data, notCloudEvent: true},
		{name: "batch", header: http.Header{"Content-Type": {"application/cloudevents-batch+json"}}, body: "[" + string(structured) + "]", refusal: "batch"},
		{name: "xml", header: http.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"x"}, "Ce-Source": {"/s"}, "Ce-Type": {"t"}, "Content-Type": {"application/xml"}}, body: "<a/>", refusal: "datacontenttype"},
		{name: "no id", header: http.Header{"Ce-Specversion": {"1.0"}, "Ce-Source": {"/s"}, "Ce-Type": {"t"}}, body: data, refusal: "not valid"},
	} {
		in, ok, err := FromHTTP(c.header, []byte(c.body))
		switch {
		case c.notCloudEvent:
			if ok || err != nil {
				t.Errorf("%s: ok %v, err %v; want not a CloudEvent", c.name, ok, err)
			}
		case c.refusal != "":
			if !ok || err == nil || !strings.Contains(err.Error(), c.refusal) {
				t.Errorf("%s: ok %v, err %v; want a refusal about %s", c.name, ok, err, c.refusal)
			}
		default:
			if !ok || err != nil {
				t.Fatalf("%s: ok %v, err %v", c.name, ok, err)
			}
			if in.ID != c.id || in.AggregateID != c.agg || in.Headers["Ce-Type"] != c.typ || in.Headers["Content-Type"] != c.wantCT {
				t.Errorf("%s: id %q, aggregate %q, Ce-Type %q, Content-Type %q; want %q, %q, %q, %q",
					c.name, in.ID, in.AggregateID, in.Headers["Ce-Type"], in.Headers["Content-Type"], c.id, c.agg, c.typ, c.wantCT)
			}
			if strings.TrimSpace(string(in.Data)) != data {
				t.Errorf("%s: data %q, want %q", c.name, in.Data, data)
			}
		}
	}
}

// The inbox reads what the SDK's HTTP binding writes, in both modes, and
// what a QueueBox HTTP destination with cloudEvents sends, so that one
// QueueBox can feed another.
func TestFromHTTPReadsWhatSendersWrite(t *testing.T) {
	e := event.New()
	e.SetID("evt-9")
	e.SetSource("/payments")
	e.SetType("payment.captured")
	e.SetSubject("pay-9")
	e.SetTime(created)
	if err := e.SetData("application/json", map[string]int{"amount": 9}); err != nil {
		t.Fatal(err)
	}
	for _, structured := range []bool{false, true} {
		req, _ := http.NewRequest(http.MethodPost, "http://inbox.invalid/inbox/payments", nil)
		ctx := context.Background()
		if structured {
			ctx = binding.WithForceStructured(ctx)
		} else {
			ctx = binding.WithForceBinary(ctx)
		}
		if err := cehttp.WriteRequest(ctx, binding.ToMessage(&e), req); err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(req.Body)
		in, ok, err := FromHTTP(req.Header, body)
		if !ok || err != nil || in.ID != "evt-9" || in.AggregateID != "pay-9" || in.Headers["Ce-Type"] != "payment.captured" || strings.TrimSpace(string(in.Data)) != `{"amount":9}` {
			t.Errorf("structured %v: %+v, ok %v, err %v", structured, in, ok, err)
		}
	}
	for _, mode := range []string{"binary", "structured"} {
		d := testdest.Open(t, "http", testdest.Options{})
		m := rows()[0]
		m.Key = "Zoë 42, 100% sure"
		testdest.PublishThrough(t, Wrap(d.Sink, compile(t, "http", Settings{Mode: mode, Source: source})), m)
		r := d.Wait(t, 1)[0]
		h := http.Header{}
		for _, x := range r.Headers {
			h.Add(x.Name, x.Value)
		}
		in, ok, err := FromHTTP(h, r.Body)
		if !ok || err != nil || in.ID != m.ID || in.AggregateID != m.Key || in.Headers["Ce-Type"] != m.Topic || string(in.Data) != string(m.Body) {
			t.Errorf("%s: read back %+v (data %s), ok %v, err %v", mode, in, in.Data, ok, err)
		}
	}
}
