package bootstrap

import (
	"context"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"go.yaml.in/yaml/v3"

	"github.com/queuebox/queuebox/internal/testdest"
	"github.com/queuebox/queuebox/sinks"
)

// What every destination type sends with cloudEvents set in the
// configuration, read with the CloudEvents SDK, in both modes: the key
// reaches the sinks through validation, compilation and SinkFactories, and
// the SDK reads the same subject and partitionkey in both modes, a key
// with a non-ASCII letter, spaces and a percent sign included.
func TestEveryDestinationSendsCloudEventsFromTheConfiguration(t *testing.T) {
	for _, typ := range testdest.Types {
		for _, mode := range []string{"binary", "structured"} {
			t.Run(typ+"/"+mode, func(t *testing.T) {
				t.Parallel()
				dest := testdest.Open(t, typ, testdest.Options{})
				settings := map[string]any{}
				for k, v := range dest.Settings {
					settings[k] = v
				}
				settings["cloudEvents"] = map[string]string{"mode": mode, "source": "https://shop.example.com/{{ aggregateType }}", "type": "com.example.{{ topic }}"}
				file, err := yaml.Marshal(map[string]any{
					"database":     map[string]string{"url": "postgres://localhost/app"},
					"destinations": map[string]any{"out": settings},
					"routes":       []map[string]string{{"topicPattern": "#", "destination": "out"}},
				})
				if err != nil {
					t.Fatal(err)
				}
				l, err := Parse("q.yaml", file, env(nil))
				if err != nil {
					t.Fatalf("%v\n%s", err, file)
				}
				fs, err := SinkFactories(l)
				if err != nil {
					t.Fatal(err)
				}
				s, err := fs["out"]()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				agg := "order"
				m := sinks.Message{ID: "0190a6a4-0000-7000-8000-0000000000c1", Topic: "order.created", Key: "Zoë 42, 100% sure", AggregateType: &agg,
					CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC), Headers: map[string]string{"X-Custom": "yes"}, Body: []byte(`{"n":1}`)}
				testdest.PublishThrough(t, s, m)
				got := dest.Wait(t, 1)[0]
				msg := got.EventMessage(typ)
				want := binding.EncodingBinary
				if mode == "structured" {
					want = binding.EncodingStructured
				}
				if enc := msg.ReadEncoding(); enc != want {
					t.Fatalf("the SDK reads %v, want %v; headers %v, content type %q", enc, want, got.Headers, got.ContentType)
				}
				e, err := binding.ToEvent(context.Background(), msg)
				if err != nil {
					t.Fatalf("the SDK cannot read the event: %v", err)
				}
				if err := e.Validate(); err != nil {
					t.Errorf("not a valid CloudEvent: %v", err)
				}
				if e.ID() != m.ID || e.Source() != "https://shop.example.com/order" || e.Type() != "com.example.order.created" ||
					e.Subject() != m.Key || !e.Time().Equal(m.CreatedAt) || e.DataContentType() != "application/json" || string(e.Data()) != `{"n":1}` {
					t.Errorf("event %s", e)
				}
				if e.Subject() != m.Key {
					t.Errorf("subject %q, want the key %q", e.Subject(), m.Key)
				}
				if pk := e.Extensions()["partitionkey"]; pk != m.Key {
					t.Errorf("partitionkey %v, want the key %q", pk, m.Key)
				}
				if typ == "kafka" {
					// The binding's header name, exactly: Kafka's names are
					// case-sensitive, and some readers look it up so.
					wantCT, exact := "application/json", ""
					if mode == "structured" {
						wantCT = "application/cloudevents+json"
					}
					for _, h := range got.Headers {
						if h.Name == "content-type" {
							exact = h.Value
						}
					}
					if exact != wantCT {
						t.Errorf("the record header content-type is %q, want %q", exact, wantCT)
					}
				}
				if v, _ := got.Get("X-Custom"); v != "yes" {
					t.Errorf("the row's header X-Custom = %q, want it sent", v)
				}
			})
		}
	}
}
