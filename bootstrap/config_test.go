package bootstrap

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

const minimal = `
database:
  url: postgres://queuebox:pw-s3cret@localhost:5432/app?sslmode=disable
destinations:
  orders:
    type: http
    url: https://hooks.example.com/{{ topic }}
    headers: { Authorization: "Bearer ${ORDERS_TOKEN}" }
routes:
  - topicPattern: "order.#"
    destination: orders
`

func TestMinimalConfigTakesDefaults(t *testing.T) {
	l, err := Parse("q.yaml", []byte(minimal), env(map[string]string{"ORDERS_TOKEN": "tok-abcdef"}))
	if err != nil {
		t.Fatal(err)
	}
	c := l.Config
	if c.Outbox.BatchSize != 500 || c.Outbox.ClaimTimeoutMs != 30000 || c.Engine.Mailbox.Completer != 8192 ||
		time.Duration(c.Outbox.Retention.Dead) != 720*time.Hour || c.Database.Dialect != "postgresql" || !c.Outbox.Notify {
		t.Errorf("defaults not applied: %+v", c)
	}
	d := c.Destinations["orders"]
	if d.Method != "POST" || d.TimeoutMs != 10000 || d.Headers["Authorization"] != "Bearer tok-abcdef" {
		t.Errorf("destination defaults: %+v", d)
	}
	if c.Routes[0].Name != "order.#" {
		t.Errorf("route name defaults to its pattern: %q", c.Routes[0].Name)
	}
	red := l.Secrets.Redact("got Bearer tok-abcdef from postgres://queuebox:pw-s3cret@x and tok-abcdef")
	if strings.Contains(red, "tok-abcdef") || strings.Contains(red, "pw-s3cret") {
		t.Errorf("not redacted: %s", red)
	}
}

func TestEnvSubstitution(t *testing.T) {
	cfg := minimal + `
outbox:
  batchSize: ${BATCH:-250}
  notify: ${NOTIFY}
`
	l, err := Parse("q.yaml", []byte(cfg), env(map[string]string{"ORDERS_TOKEN": "x", "NOTIFY": "false"}))
	if err != nil {
		t.Fatal(err)
	}
	if l.Outbox.BatchSize != 250 || l.Outbox.Notify {
		t.Errorf("substitution: batch %d notify %v", l.Outbox.BatchSize, l.Outbox.Notify)
	}
	// Plain numbers and booleans from the environment are not secrets.
	if got := l.Secrets.Redact("false 250"); got != "false 250" {
		t.Errorf("redacted a boolean: %s", got)
	}
	t.Setenv("QUEUEBOX_DATABASE_URL", "")
	l, err = Parse("q.yaml", []byte(minimal), env(map[string]string{"ORDERS_TOKEN": "x", "QUEUEBOX_DATABASE_URL": "postgres://other/db"}))
	if err != nil || l.Database.URL != "postgres://other/db" {
		t.Fatalf("QUEUEBOX_DATABASE_URL did not override: %v %v", err, l)
	}
}

func problems(t *testing.T, cfg string) []Problem {
	t.Helper()
	_, err := Parse("q.yaml", []byte(cfg), env(map[string]string{"ORDERS_TOKEN": "x"}))
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("expected a configuration error, got %v", err)
	}
	return ce.Problems
}

func hasProblem(ps []Problem, key, reason string, line int) bool {
	for _, p := range ps {
		if p.Key == key && strings.Contains(p.Reason, reason) && (line == 0 || p.Line == line) {
			return true
		}
	}
	return false
}

func TestBadConfigurationNamesKeyAndReason(t *testing.T) {
	cfg := `database:
  url: postgres://localhost/app
  columnMapping:
    outbox:
      key: "message key"
      payload: topic
      nonsense: x
outbox:
  batchSize: 0
  claimTimeoutMs: lots
  bachSize: 3
destinations:
  orders:
    type: http
    url: https://h/{{ nope }}
    exchange: events
  broken:
    type: carrier-pigeon
routes:
  - topicPattern: "order.*x"
    destination: missing
  - topicPattern: "#"
    destination: orders
    transform: "{a: $nope}"
admin:
  listen: 0.0.0.0:8080
`
	ps := problems(t, cfg)
	want := []struct {
		key, reason string
		line        int
	}{
		{"database.columnMapping.outbox.key", "not a valid identifier", 0},
		{"database.columnMapping.outbox.nonsense", "not a column", 0},
		{"database.columnMapping.outbox", "columns topic and payload all map to", 0},
		{"outbox.batchSize", "out of range", 9},
		{"outbox.claimTimeoutMs", "expected a whole number", 10},
		{"outbox.bachSize", "unknown key (did you mean batchSize?)", 11},
		{"destinations.orders.url", "unknown placeholder {{ nope }}", 15},
		{"destinations.orders.exchange", "not a key of a http destination", 16},
		{"destinations.broken.type", "not a destination type", 18},
		{"routes[0].topicPattern", "mixes a wildcard", 20},
		{"routes[0].destination", `"missing" is not a defined destination`, 21},
		{"routes[1].transform", "does not compile", 24},
		{"admin.listen", "admin.token is empty", 26},
	}
	for _, w := range want {
		if !hasProblem(ps, w.key, w.reason, w.line) {
			t.Errorf("no problem %s (line %d): %s\ngot:\n%v", w.key, w.line, w.reason, ps)
		}
	}
	msg := (&Error{File: "q.yaml", Problems: ps}).Error()
	if !strings.HasPrefix(msg, "the configuration q.yaml has ") || !strings.Contains(msg, "\n  - outbox.batchSize (line 9): 0 is out of range; use a value from 1 to 10000") {
		t.Errorf("message:\n%s", msg)
	}
}

func TestMissingEnvAndNoRoutes(t *testing.T) {
	ps := problems(t, "database:\n  url: ${DB_URL}\n")
	if !hasProblem(ps, "database.url", "DB_URL is not set", 2) || !hasProblem(ps, "routes", "no route is configured", 0) {
		t.Errorf("%v", ps)
	}
}

func TestSigningSecret(t *testing.T) {
	if _, err := DecodeSigningSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"); err != nil {
		t.Error(err)
	}
	if _, err := DecodeSigningSecret("hunter2"); err == nil {
		t.Error("a non-base64 secret was accepted")
	}
}
