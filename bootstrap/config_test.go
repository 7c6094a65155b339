package bootstrap

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/routing"
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
		time.Duration(c.Outbox.Retention.Dead) != 720*time.Hour || c.Database.Dialect != "postgresql" || c.Outbox.ProbeIntervalMs != 2 {
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
  probeIntervalMs: ${PROBE}
`
	l, err := Parse("q.yaml", []byte(cfg), env(map[string]string{"ORDERS_TOKEN": "x", "PROBE": "7"}))
	if err != nil {
		t.Fatal(err)
	}
	if l.Outbox.BatchSize != 250 || l.Outbox.ProbeIntervalMs != 7 {
		t.Errorf("substitution: batch %d probe %d", l.Outbox.BatchSize, l.Outbox.ProbeIntervalMs)
	}
	// Plain numbers and booleans from the environment are not secrets.
	if got := l.Secrets.Redact("7 250"); got != "7 250" {
		t.Errorf("redacted a boolean: %s", got)
	}
	l, err = Parse("q.yaml", []byte(minimal), env(map[string]string{"ORDERS_TOKEN": "x", "QUEUEBOX_DATABASE_URL": "postgres://other/db"}))
	if err != nil || l.Database.URL != "postgres://other/db" {
		t.Fatalf("QUEUEBOX_DATABASE_URL did not override: %v %v", err, l)
	}
	// The overridden value is not read: a variable it uses need not be set.
	withVar := strings.Replace(minimal, "pw-s3cret", "${DB_PASSWORD}", 1)
	l, err = Parse("q.yaml", []byte(withVar), env(map[string]string{"ORDERS_TOKEN": "x", "QUEUEBOX_DATABASE_URL": "postgres://other/db"}))
	if err != nil || l.Database.URL != "postgres://other/db" {
		t.Fatalf("an unset variable in an overridden database.url: %v", err)
	}
	if ps := problems(t, withVar); !hasProblem(ps, "database.url", "DB_PASSWORD is not set", 3) {
		t.Errorf("without the override: %v", ps)
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

// ${VAR:-default} takes the default when VAR is unset or empty, and VAR
// when it is set to something.
func TestEnvDefaultWhenUnsetOrEmpty(t *testing.T) {
	cfg := minimal + `
outbox:
  batchSize: ${BATCH:-250}
  maxInFlight: "${IN_FLIGHT:-700}"
log:
  level: ${LEVEL:-warn}
`
	for _, c := range []struct {
		name       string
		env        map[string]string
		batch, fly int
		level      string
	}{
		{"unset", map[string]string{}, 250, 700, "warn"},
		{"empty", map[string]string{"BATCH": "", "IN_FLIGHT": "", "LEVEL": ""}, 250, 700, "warn"},
		{"set", map[string]string{"BATCH": "42", "IN_FLIGHT": "900", "LEVEL": "debug"}, 42, 900, "debug"},
	} {
		c.env["ORDERS_TOKEN"] = "x"
		l, err := Parse("q.yaml", []byte(cfg), env(c.env))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if l.Outbox.BatchSize != c.batch || l.Outbox.MaxInFlight != c.fly || l.Log.Level != c.level {
			t.Errorf("%s: batchSize %d maxInFlight %d level %s", c.name, l.Outbox.BatchSize, l.Outbox.MaxInFlight, l.Log.Level)
		}
	}
	// ${VAR} without a default may be set to empty on purpose.
	l, err := Parse("q.yaml", []byte(minimal+"admin: { token: \"${TOKEN}\" }\n"), env(map[string]string{"ORDERS_TOKEN": "x", "TOKEN": ""}))
	if err != nil || l.Admin.Token != "" {
		t.Errorf("an empty ${TOKEN}: %v", err)
	}
	// A text key keeps substituted digits as text.
	l, err = Parse("q.yaml", []byte(minimal+"admin:\n  token: ${TOKEN}\n"), env(map[string]string{"ORDERS_TOKEN": "x", "TOKEN": "12345"}))
	if err != nil || l.Admin.Token != "12345" {
		t.Fatalf("digits into a text key: %v", err)
	}
	// A quoted value that is more than one substitution stays text.
	ps := problems(t, minimal+"outbox: { batchSize: \"${A:-1}${B:-2}\" }\n")
	if !hasProblem(ps, "outbox.batchSize", `expected a whole number, got the quoted text "12"`, 0) {
		t.Errorf("%v", ps)
	}
}

// An unset variable is one problem on one line: the key it leaves empty
// gets no second complaint.
func TestUnsetVariableIsOneProblem(t *testing.T) {
	ps := problems(t, minimal+"  - topicPattern: \"#\"\n    destination: ${DEST}\n")
	if len(ps) != 1 || !hasProblem(ps, "routes[1].destination", "DEST is not set", 0) {
		t.Errorf("%v", ps)
	}
	ps = problems(t, strings.Replace(minimal, "postgres://queuebox:pw-s3cret@localhost:5432/app?sslmode=disable", "${DB_URL}", 1))
	if len(ps) != 1 || !hasProblem(ps, "database.url", "DB_URL is not set", 3) {
		t.Errorf("%v", ps)
	}
	// A token that could not be read is not also "empty" to the checks
	// that need one: the admin listener beyond loopback, an HTTP source.
	ps = problems(t, minimal+"admin: { listen: \"0.0.0.0:8080\", token: \"${ADMIN_TOKEN}\" }\n"+
		"inbox: { sources: { shop: { type: http, topic: shop.order, token: \"${SHOP_TOKEN}\" } } }\n")
	if len(ps) != 2 || !hasProblem(ps, "admin.token", "ADMIN_TOKEN is not set", 0) || !hasProblem(ps, "inbox.sources.shop.token", "SHOP_TOKEN is not set", 0) {
		t.Errorf("%v", ps)
	}
}

func TestSigningSecretNeedsItsPrefix(t *testing.T) {
	base := strings.Replace(minimal, `    headers: { Authorization: "Bearer ${ORDERS_TOKEN}" }`+"\n", `    headers: { Authorization: "Bearer ${ORDERS_TOKEN}" }`+"\n    signingSecret: %s\n", 1)
	l, err := Parse("q.yaml", []byte(strings.Replace(base, "%s", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 1)), env(map[string]string{"ORDERS_TOKEN": "x"}))
	if err != nil || len(l.Compiled.Destinations["orders"].SigningKeys) != 1 || len(l.Compiled.Destinations["orders"].SigningKeys[0]) < 16 {
		t.Fatalf("a whsec_ secret: %v", err)
	}
	ps := problems(t, strings.Replace(base, "%s", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 1))
	if !hasProblem(ps, "destinations.orders.signingSecret", "does not start with whsec_", 9) {
		t.Errorf("%v", ps)
	}
}

func TestTLSEnabledIsForKafkaOnly(t *testing.T) {
	cfg := strings.Replace(minimal, "    url: https://hooks.example.com/{{ topic }}\n", "    url: https://hooks.example.com/{{ topic }}\n    tls: { enabled: true }\n", 1)
	ps := problems(t, cfg)
	if len(ps) != 1 || !hasProblem(ps, "destinations.orders.tls.enabled", "tls.enabled does not apply to http destinations: the https:// scheme turns TLS on; remove it", 0) {
		t.Errorf("%v", ps)
	}
	cfg = strings.Replace(minimal, "destinations:\n", "destinations:\n  k: { type: kafka, brokers: [\"127.0.0.1:9092\"], topic: t, tls: { enabled: true } }\n", 1)
	l, err := Parse("q.yaml", []byte(cfg), env(map[string]string{"ORDERS_TOKEN": "x"}))
	if err != nil || !l.Destinations["k"].TLS.Enabled {
		t.Errorf("tls.enabled on kafka: %v", err)
	}
}

// Validation compiles what the engine uses: the router matches as the
// routes say, with their transforms.
func TestValidationCompilesTheRouter(t *testing.T) {
	cfg := strings.Replace(minimal, "routes:\n", "routes:\n  - { topicPattern: \"order.paid\", destination: orders, transform: \"{id: $id}\" }\n", 1)
	l, err := Parse("q.yaml", []byte(cfg), env(map[string]string{"ORDERS_TOKEN": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	r := l.Compiled.Router.Match("order.paid")
	if r == nil || r.Transform == nil || r.Name != "order.paid" {
		t.Fatalf("order.paid: %+v", r)
	}
	if r = l.Compiled.Router.Match("order.created"); r == nil || r.Transform != nil || r.Name != "order.#" {
		t.Fatalf("order.created: %+v", r)
	}
	if l.Compiled.Router.Match("user.created") != nil {
		t.Fatal("user.created matched")
	}
	if u := l.Compiled.Destinations["orders"].URL; u == nil || u.String() != "https://hooks.example.com/{{ topic }}" {
		t.Fatalf("the URL template: %v", u)
	}
}

// A file written for an older release that sets outbox.notify loads, with
// a warning that names the key, its line and what to do; the key is not
// printed back.
func TestNotifyLoadsWithAWarning(t *testing.T) {
	cfg := minimal + `
outbox:
  notify: true
`
	l, err := Parse("q.yaml", []byte(cfg), env(map[string]string{"ORDERS_TOKEN": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Warnings) != 1 || l.Warnings[0].Key != "outbox.notify" || l.Warnings[0].Line == 0 ||
		!strings.Contains(l.Warnings[0].Reason, "remove the key") {
		t.Fatalf("warnings %+v", l.Warnings)
	}
	out, err := l.Effective()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "notify") {
		t.Errorf("config check prints the unused key:\n%s", out)
	}
}

const fanOut = `
database:
  url: postgres://queuebox@localhost:5432/app
destinations:
  hook: { type: http, url: "https://hooks.example.com/{{ topic }}" }
  queue: { type: rabbitmq, url: "amqp://localhost:5672/", exchange: events }
  audit: { type: "null" }
routes:
  - name: big-orders
    topicPattern: "order.#"
    filter: .amount > 100
    destinations: [hook, queue, audit]
  - { topicPattern: "order.#", destinations: [queue] }
  - { topicPattern: "#", destination: audit, filter: '$headers["X-Tenant"] == "acme"' }
`

const fanOutOwn = `
destinations:
  hook: { type: http, url: "https://hooks.example.com/{{ topic }}" }
  queue: { type: rabbitmq, url: "amqp://localhost:5672/", exchange: events }
  audit: { type: "null" }
outboxes:
  orders:
    database: { url: postgres://queuebox@localhost:5432/app }
    routes:
      - { topicPattern: "order.#", filter: .amount > 100, destinations: [hook, queue, audit] }
      - { topicPattern: "order.#", destinations: [queue] }
      - { topicPattern: "#", destination: audit }
routes: [{ topicPattern: "#", destination: audit }]
`

// A fan-out route and a filter load, at the top level and in an outbox's
// own routes, and compile into the router the engine uses: a list of one
// is a route to one destination, a filter is compiled once.
func TestFanOutRoutesAndFilters(t *testing.T) {
	l, err := Parse("q.yaml", []byte(fanOut), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	routes := l.Compiled.Router.Routes()
	big, queue, acme := &routes[0], &routes[1], &routes[2]
	if big.Name != "big-orders" || !big.FanOut() || strings.Join(big.Targets(), ",") != "hook,queue,audit" || big.Destination != "hook" || big.Filter == nil || big.Filter.String() != ".amount > 100" {
		t.Errorf("the fan-out route: %+v", big)
	}
	if queue.FanOut() || queue.Destinations != nil || queue.Destination != "queue" || queue.Filter != nil {
		t.Errorf("a list of one: %+v", queue)
	}
	if acme.FanOut() || acme.Destination != "audit" || acme.Filter == nil {
		t.Errorf("a filtered route to one: %+v", acme)
	}
	if !l.Compiled.Router.FanOut() || !l.Compiled.Router.Filters() {
		t.Error("the router knows of no fan-out or no filter")
	}
	for _, c := range []struct{ payload, want string }{{`{"amount": 150}`, "big-orders"}, {`{"amount": 50}`, "order.#"}} {
		if r, err := l.Compiled.Router.MatchRow([]byte(c.payload), routing.Vars{Topic: "order.created"}); err != nil || r == nil || r.Name != c.want {
			t.Errorf("%s: %+v, %v; want %s", c.payload, r, err, c.want)
		}
	}
	// The admin views name every destination of the route a topic takes.
	if route, dest := RouteOf(l)("order.created"); route != "big-orders" || dest != "hook, queue, audit" {
		t.Errorf("RouteOf: %q, %q", route, dest)
	}
	// The commands that select by destination: where filters decide, the
	// topic names every route a row may take and each row tells its own.
	sel := TargetsOf(l)
	for topic, want := range map[string]string{"order.created": "[[hook queue audit] [queue]] by row", "user.created": "[[audit]] by row"} {
		sets, byRow := sel.Targets(topic)
		if got := fmt.Sprint(sets) + map[bool]string{true: " by row", false: " by topic"}[byRow]; got != want {
			t.Errorf("Targets(%s) = %s, want %s", topic, got, want)
		}
	}
	for _, c := range []struct{ topic, payload, headers, want string }{
		{"order.created", `{"amount": 150}`, `{}`, "[hook queue audit]"},
		{"order.created", `{"amount": 50}`, `{}`, "[queue]"},
		{"order.created", `[1]`, `{}`, "[]"}, // the filter fails: the row goes nowhere
		{"user.created", `{}`, `{"X-Tenant": "acme"}`, "[audit]"},
		{"user.created", `{}`, `{"X-Tenant": "other"}`, "[]"},
	} {
		got := sel.RowTargets(dialects.Row{Topic: c.topic, Payload: []byte(c.payload), Headers: []byte(c.headers)})
		if fmt.Sprint(got) != c.want {
			t.Errorf("RowTargets(%s %s %s) = %v, want %s", c.topic, c.payload, c.headers, got, c.want)
		}
	}

	// The same routes as an outbox's own.
	l, err = Parse("q.yaml", []byte(fanOutOwn), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	v, err := l.ForOutbox("orders")
	if err != nil {
		t.Fatal(err)
	}
	if r := v.Compiled.Router.Routes(); len(r) != 3 || !r[0].FanOut() || r[0].Filter == nil || !v.Compiled.Router.FanOut() {
		t.Errorf("the outbox's own routes: %+v", r)
	}
	if l.Compiled.Router.FanOut() {
		t.Error("the top-level routes fan out")
	}
}
