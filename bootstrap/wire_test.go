package bootstrap

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/sinks"
)

const brokers = `
database:
  url: postgres://localhost/app
destinations:
  rabbit:
    type: rabbitmq
    url: amqp://guest:guest@127.0.0.1:5672/
    exchangeFrom: aggregate_type
  kafka:
    type: kafka
    brokers: ["127.0.0.1:9092"]
    topic: "events.{{ aggregateType }}"
    compression: zstd
  nats:
    type: nats
    url: nats://127.0.0.1:4222
    subject: "events.{{ topic }}"
routes:
  - { topicPattern: "a.#", destination: rabbit }
  - { topicPattern: "b.#", destination: kafka }
  - { topicPattern: "#", destination: nats }
`

// Every broker type gets its sink; exchangeFrom: aggregate_type becomes the
// exchange template {{ aggregateType }}.
func TestBrokerDestinationsAreWired(t *testing.T) {
	l, err := Parse("q.yaml", []byte(brokers), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if ex := l.Compiled.Destinations["rabbit"].Exchange; ex == nil || ex.String() != "{{ aggregateType }}" {
		t.Fatalf("exchangeFrom compiled to %v", ex)
	}
	fs, err := SinkFactories(l)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"rabbit": "*rabbitmq.Sink", "kafka": "*kafka.Sink", "nats": "*nats.Sink"} {
		s, err := fs[name]()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := fmt.Sprintf("%T", s); got != want {
			t.Errorf("%s: a %s, want a %s", name, got, want)
		}
		if _, ok := s.(sinks.OrderedBatcher); !ok {
			t.Errorf("%s does not take runs of one key", name)
		}
		_ = s.Close()
	}
}

func TestBrokerSettingsAreChecked(t *testing.T) {
	cfg := strings.NewReplacer(
		"amqp://guest:guest@127.0.0.1:5672/", "http://user:pw-s3cret@rabbit/",
		`["127.0.0.1:9092"]`, `["kafka-1"]`,
		"nats://127.0.0.1:4222", "127.0.0.1:4222",
	).Replace(brokers)
	ps := problems(t, cfg)
	for _, w := range []struct{ key, reason string }{
		{"destinations.rabbit.url", `"http://user:xxxxx@rabbit/" is not a URL of the form amqp://`},
		{"destinations.kafka.brokers[0]", `"kafka-1" is not host:port`},
		{"destinations.nats.url", `"127.0.0.1:4222" is not a URL of the form nats://host:4222`},
	} {
		if !hasProblem(ps, w.key, w.reason, 0) {
			t.Errorf("no problem %s: %s\ngot:\n%v", w.key, w.reason, ps)
		}
	}
	for _, p := range ps {
		if strings.Contains(p.Reason, "pw-s3cret") {
			t.Errorf("a password in a problem: %v", p)
		}
	}
}

// What only a sink can check (a CA file it must read, a credentials file)
// is reported under the destination's key, before anything runs.
func TestSinkRefusalsNameTheKey(t *testing.T) {
	cfg := strings.Replace(brokers, "    compression: zstd\n", "    compression: zstd\n    tls: { enabled: true, caFile: /nonexistent/ca.pem }\n", 1)
	cfg = strings.Replace(cfg, "    subject: \"events.{{ topic }}\"\n", "    subject: \"events.{{ topic }}\"\n    credentialsFile: /nonexistent/x.creds\n", 1)
	l, err := Parse("q.yaml", []byte(cfg), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	_, err = SinkFactories(l)
	var e *Error
	if !errors.As(err, &e) || len(e.Problems) != 1 {
		t.Fatalf("%v", err)
	}
	if k := e.Problems[0].Key; k != "destinations.kafka.tls.caFile" && k != "destinations.nats.credentialsFile" {
		t.Errorf("problem under %s: %v", k, e.Problems[0].Reason)
	}
}

// Durations in the JSON log read as in the text log ("30s"), not as
// nanoseconds.
func TestJSONLogWritesDurationsAsText(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		cfg := Defaults()
		cfg.Database.URL = "postgres://localhost/app"
		cfg.Destinations = map[string]*DestinationConfig{"n": {Type: "null"}}
		cfg.Routes = []RouteConfig{{TopicPattern: "#", Destination: "n"}}
		cfg.Log.Format = format
		l, err := FromConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		NewLogger(l, &buf).Info("engine started", "lease", 30*time.Second)
		if !strings.Contains(buf.String(), "30s") || strings.Contains(buf.String(), "30000000000") {
			t.Errorf("%s log: %s", format, buf.String())
		}
	}
}
