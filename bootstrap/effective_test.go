package bootstrap

import (
	"errors"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const everyKind = `
database:
  url: postgres://app:${DB_PASSWORD}@db.internal:5432/app?sslmode=disable
  columnMapping:
    outbox: { key: message_key }
outbox:
  batchSize: ${BATCH:-250}
  retention: { delivered: 24h, dead: 720h, intervalMs: 90000 }
destinations:
  orders:
    type: http
    url: https://hooks.example.com/{{ topic }}?k={{ key }}
    headers: { Authorization: "Bearer ${ORDERS_TOKEN}", X-Team: "${TEAM}" }
    signingSecret: ${WEBHOOK_SECRET}
    nonRetryableStatus: [400, 410]
    tls: { caFile: /etc/ssl/ca.pem }
  rabbit:
    type: rabbitmq
    url: amqp://guest:${RABBIT_PASSWORD}@127.0.0.1:5672/
    exchangeFrom: aggregate_type
  events:
    type: kafka
    brokers: ["127.0.0.1:9092"]
    topic: "events.{{ topic }}"
    tls: { enabled: true }
    sasl: { mechanism: PLAIN, username: relay, password: "${KAFKA_PASSWORD}" }
  subjects:
    type: nats
    url: nats://127.0.0.1:4222
    subject: "{{ topic }}"
  discard: { type: "null" }
routes:
  - topicPattern: "order.#"
    destination: orders
    transform: "{id: $id}"
  - { topicPattern: "user.*", destination: rabbit, name: users }
  - { topicPattern: "#", destination: discard }
inbox:
  sources:
    stripe: { type: http, token: "${STRIPE_TOKEN}", topic: "stripe.{{ headers.X-Kind }}" }
admin:
  listen: 0.0.0.0:8080
  token: ${ADMIN_TOKEN}
`

var everyKindEnv = map[string]string{
	"DB_PASSWORD": "db-pw-s3cret", "ORDERS_TOKEN": "orders-tok-123", "WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	"RABBIT_PASSWORD": "rabbit-pw-456", "KAFKA_PASSWORD": "kafka-pw-789", "STRIPE_TOKEN": "stripe-tok-abc", "ADMIN_TOKEN": "admin-tok-def", "TEAM": "billing",
}

// What config check prints loads back to the same configuration, lists
// only the keys of each destination's type, and shows no secret.
func TestEffectiveConfigurationLoadsBack(t *testing.T) {
	l, err := Parse("q.yaml", []byte(everyKind), env(everyKindEnv))
	if err != nil {
		t.Fatal(err)
	}
	out, err := l.Effective()
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	for _, secret := range everyKindEnv {
		if strings.Contains(text, secret) {
			t.Errorf("the output shows the secret %s:\n%s", secret, text)
		}
	}
	for _, want := range []string{
		"url: postgres://app:${DB_PASSWORD}@db.internal:5432/app?sslmode=disable",
		"Authorization: Bearer ${ORDERS_TOKEN}", "X-Team: ${TEAM}", "signingSecret: ${WEBHOOK_SECRET}",
		"batchSize: 250", "delivered: 24h", "dead: 720h", "multiplier: 2.0", "method: POST", "mandatory: true", "enabled: true",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the output lacks %q:\n%s", want, text)
		}
	}
	back, err := Parse("printed.yaml", out, env(everyKindEnv))
	if err != nil {
		t.Fatalf("the printed configuration does not load back: %v\n%s", err, text)
	}
	// Compared as YAML, where an absent map and an empty one are the same.
	before, _ := yaml.Marshal(l.Config)
	after, _ := yaml.Marshal(back.Config)
	if string(before) != string(after) {
		t.Errorf("the configuration changed on the way back:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if again, _ := back.Effective(); string(again) != text {
		t.Errorf("printing the printed configuration changed it:\n%s", again)
	}
	// The http destination lists no key of another type; kafka keeps its
	// tls.enabled, http has none (circuitBreaker.enabled is every type's).
	orders := text[strings.Index(text, "  orders:"):strings.Index(text, "  rabbit:")]
	for _, foreign := range []string{"brokers", "exchange", "subject", "jetstream", "acks", "tls:\n      enabled"} {
		if strings.Contains(orders, foreign) {
			t.Errorf("the http destination lists %s:\n%s", foreign, orders)
		}
	}
}

// Secrets written into the file itself are printed redacted, and the output
// still loads: a URL keeps the shape of a URL.
func TestEffectiveConfigurationRedactsLiteralSecrets(t *testing.T) {
	cfg := `
database: { url: "postgres://app:literal-pw-1@db:5432/app" }
destinations:
  hook: { type: http, url: "https://h/x", headers: { Authorization: "Bearer literal-tok-2" } }
routes: [ { topicPattern: "#", destination: hook } ]
admin: { token: literal-admin-3 }
`
	l, err := Parse("q.yaml", []byte(cfg), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := l.Effective()
	text := string(out)
	for _, s := range []string{"literal-pw-1", "literal-tok-2", "literal-admin-3"} {
		if strings.Contains(text, s) {
			t.Errorf("shows %s:\n%s", s, text)
		}
	}
	if !strings.Contains(text, "postgres://app:%5BREDACTED%5D@db:5432/app") || !strings.Contains(text, "Authorization: '[REDACTED]'") {
		t.Errorf("redaction:\n%s", text)
	}
	if _, err := Parse("printed.yaml", out, env(nil)); err != nil {
		t.Errorf("does not load back: %v\n%s", err, text)
	}
}

// A Kafka source's SASL password is a secret: config check prints the
// ${VAR} it came from, or [REDACTED] when it is written in the file, and
// the output loads back.
func TestEffectiveConfigurationRedactsKafkaSourcePassword(t *testing.T) {
	cfg := `
database: { url: "postgres://app@db:5432/app" }
destinations: { d: { type: "null" } }
routes: [ { topicPattern: "#", destination: d } ]
inbox:
  sources:
    from-env:
      type: kafka
      brokers: ["k:9092"]
      kafkaTopic: orders
      groupId: g
      topic: "orders.in"
      sasl: { mechanism: SCRAM-SHA-512, username: relay, password: "${KAFKA_IN_PASSWORD}" }
      tls: { enabled: true, insecureSkipVerify: true }
    literal:
      type: kafka
      brokers: ["k:9092"]
      kafkaTopic: orders
      groupId: g
      topic: "orders.in"
      sasl: { mechanism: PLAIN, username: relay, password: literal-kafka-pw-1 }
`
	vars := map[string]string{"KAFKA_IN_PASSWORD": "env-kafka-pw-2"}
	l, err := Parse("q.yaml", []byte(cfg), env(vars))
	if err != nil {
		t.Fatal(err)
	}
	if s := l.Inbox.Sources["from-env"]; s.SASL.Password != "env-kafka-pw-2" || !s.TLS.Enabled {
		t.Fatalf("the source's sasl and tls: %+v %+v", s.SASL, s.TLS)
	}
	out, err := l.Effective()
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	for _, secret := range []string{"literal-kafka-pw-1", "env-kafka-pw-2"} {
		if strings.Contains(text, secret) {
			t.Errorf("the output shows %s:\n%s", secret, text)
		}
		if strings.Contains(l.Secrets.Redact("login "+secret+" refused"), secret) {
			t.Errorf("%s is not redacted from logs", secret)
		}
	}
	for _, want := range []string{"password: ${KAFKA_IN_PASSWORD}", "password: '[REDACTED]'", "mechanism: SCRAM-SHA-512", "username: relay", "insecureSkipVerify: true"} {
		if !strings.Contains(text, want) {
			t.Errorf("the output lacks %q:\n%s", want, text)
		}
	}
	back, err := Parse("printed.yaml", out, env(vars))
	if err != nil {
		t.Fatalf("does not load back: %v\n%s", err, text)
	}
	if s := back.Inbox.Sources["from-env"]; s.SASL.Password != "env-kafka-pw-2" {
		t.Errorf("loaded back, the password is %q", s.SASL.Password)
	}
}

// database.url taken from QUEUEBOX_DATABASE_URL is printed as that
// variable's reference: the printout loads back to the same URL when the
// variable is set, and without it says so instead of carrying a
// [REDACTED] password.
func TestEffectiveDatabaseURLFromTheEnvironment(t *testing.T) {
	vars := map[string]string{"QUEUEBOX_DATABASE_URL": "postgres://app:env-db-pw-1@db:5432/app"}
	for _, file := range []string{
		`database: { url: "postgres://other@file-host:5432/other" }`,
		`database: { url: "postgres://app:${DB_PASSWORD}@db:5432/app" }`, // not read, so DB_PASSWORD need not be set
		`database: { maxConnections: 5 }`,
	} {
		cfg := file + "\ndestinations: { d: { type: \"null\" } }\nroutes: [ { topicPattern: \"#\", destination: d } ]\n"
		l, err := Parse("q.yaml", []byte(cfg), env(vars))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		out, err := l.Effective()
		if err != nil {
			t.Fatal(err)
		}
		text := string(out)
		if !strings.Contains(text, "url: ${QUEUEBOX_DATABASE_URL}\n") || strings.Contains(text, "REDACTED") || strings.Contains(text, "env-db-pw-1") || strings.Contains(text, "file-host") {
			t.Errorf("%s: the printout:\n%s", file, text)
		}
		back, err := Parse("printed.yaml", out, env(vars))
		if err != nil {
			t.Fatalf("%s: does not load back: %v\n%s", file, err, text)
		}
		if back.Database.URL != vars["QUEUEBOX_DATABASE_URL"] {
			t.Errorf("%s: loaded back, database.url is %q", file, back.Database.URL)
		}
		if again, _ := back.Effective(); string(again) != text {
			t.Errorf("%s: printing the printout changed it:\n%s", file, again)
		}
		// Without the variable, the printout does not load with a made-up
		// password: it names the variable to set.
		_, err = Parse("printed.yaml", out, env(nil))
		var ce *Error
		if !errors.As(err, &ce) || !hasProblem(ce.Problems, "database.url", "QUEUEBOX_DATABASE_URL is not set", 0) {
			t.Errorf("%s: loaded back without the variable: %v", file, err)
		}
		// The whole value is a secret, as every value from the environment.
		if red := l.Secrets.Redact("dial " + vars["QUEUEBOX_DATABASE_URL"]); strings.Contains(red, "env-db-pw-1") || strings.Contains(red, "db:5432") {
			t.Errorf("%s: not redacted: %s", file, red)
		}
	}
}

// config check prints a fan-out route's destinations and a route's filter
// as written, without an empty destination beside them, at the top level
// and in an outbox's own routes; the printout loads back and prints the
// same.
func TestEffectiveFanOutAndFilters(t *testing.T) {
	for name, file := range map[string]string{"top level": fanOut, "an outbox's own": fanOutOwn} {
		l, err := Parse("q.yaml", []byte(file), env(nil))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out, err := l.Effective()
		if err != nil {
			t.Fatal(err)
		}
		text := string(out)
		for _, want := range []string{"destinations: [hook, queue, audit]", "filter: .amount > 100", "destinations: [queue]", "destination: audit"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: the output lacks %q:\n%s", name, want, text)
			}
		}
		if strings.Contains(text, `destination: ""`) {
			t.Errorf("%s: an empty destination beside destinations:\n%s", name, text)
		}
		back, err := Parse("printed.yaml", out, env(nil))
		if err != nil {
			t.Fatalf("%s: the printed configuration does not load back: %v\n%s", name, err, text)
		}
		if again, _ := back.Effective(); string(again) != text {
			t.Errorf("%s: printing the printed configuration changed it:\n%s", name, again)
		}
	}
	l, _ := Parse("q.yaml", []byte(fanOut), env(nil))
	out, _ := l.Effective()
	if !strings.Contains(string(out), `filter: $headers["X-Tenant"] == "acme"`) {
		t.Errorf("the filter with a header:\n%s", out)
	}
}
