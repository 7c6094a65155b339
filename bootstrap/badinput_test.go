package bootstrap

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The catalogue of bad configuration: each kind of mistake a user can make
// in the file, one test each. Every mistake must come back as a problem
// that names the key (and its line when the file has one), the reason, and
// what to write instead; never a panic, never a stack trace, never a file
// that loads and fails later.

// badBase is a valid file the cases change.
const badBase = `database:
  url: postgres://queuebox@localhost:5432/app
destinations:
  hook: { type: http, url: "https://hooks.example.com/{{ topic }}" }
routes:
  - { topicPattern: "#", destination: hook }
`

type badCase struct {
	name string
	// yaml is the whole file; when it starts with "+", it is appended to
	// badBase (but "+database: {...}" joins badBase's database mapping); "@" adds it to badBase's destinations; "~old~new~" replaces
	// old by new in badBase.
	yaml string
	env  map[string]string
	// key and reason are what one problem must say; line, when not 0, is
	// where.
	key, reason string
	line        int
	// not, when set, is text that no problem may say.
	not string
}

func (c badCase) file() string {
	switch {
	case strings.HasPrefix(c.yaml, "+database: {"):
		// The database mapping is given once (a key given twice is a
		// mistake of its own): the case's keys join badBase's url.
		return strings.Replace(badBase, "database:\n  url: postgres://queuebox@localhost:5432/app\n",
			"database: { url: postgres://queuebox@localhost:5432/app, "+strings.TrimPrefix(c.yaml, "+database: {"), 1)
	case strings.HasPrefix(c.yaml, "+"):
		return badBase + c.yaml[1:]
	case strings.HasPrefix(c.yaml, "@"):
		return strings.Replace(badBase, "destinations:\n", "destinations:\n"+c.yaml[1:], 1)
	case strings.HasPrefix(c.yaml, "~"):
		parts := strings.SplitN(c.yaml[1:], "~", 3)
		if !strings.Contains(badBase, parts[0]) {
			panic("the case " + c.name + " replaces text the base does not hold: " + parts[0])
		}
		return strings.Replace(badBase, parts[0], parts[1], 1)
	}
	return c.yaml
}

func runBad(t *testing.T, cases []badCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("q.yaml", []byte(c.file()), env(c.env))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("the file loaded (%v); want a problem %s: %s\nfile:\n%s", err, c.key, c.reason, c.file())
			}
			ps := ce.Problems
			if !hasProblem(ps, c.key, c.reason, c.line) {
				t.Fatalf("no problem %s (line %d) saying %q; got:\n%v\nfile:\n%s", c.key, c.line, c.reason, ps, c.file())
			}
			for _, p := range ps {
				if c.not != "" && strings.Contains(p.String(), c.not) {
					t.Errorf("a problem that says %q: %v", c.not, p)
				}
				if strings.Contains(p.Reason, "goroutine ") || strings.Contains(p.Reason, "panic") || strings.Contains(p.Reason, "reflect.") {
					t.Errorf("a problem that shows the program's insides: %v", p)
				}
			}
		})
	}
}

func TestBadFile(t *testing.T) {
	runBad(t, []badCase{
		{name: "not YAML", yaml: "database: [url: x\n", key: "(file)", reason: "did not find expected"},
		{name: "a tab for indentation", yaml: "database:\n\turl: x\n", key: "(file)", reason: "tab"},
		{name: "a tab indenting a list item", yaml: "+routes2:\n  - a\n\t- b\n", key: "(file)", reason: "line 9 is indented with a tab; YAML indents with spaces only", line: 9},
		{name: "a tab indenting a line of a block of text", yaml: "+notes: |\n  first\n\tsecond\n", key: "(file)", reason: "line 9 is indented with a tab", line: 9},
		// A tab after a block's indentation is text, and one on a quoted
		// string's next line is allowed: the parser's own complaint is
		// the problem, not the tab.
		{name: "a tab inside a block of text, then an unclosed list", yaml: "+notes: |\n  first\n  \tsecond\nmore: [1, 2\n", key: "(file)", reason: "did not find expected", not: "tab"},
		{name: "a tab inside a quoted string, then an unclosed list", yaml: "+notes: \"first\n\tsecond\"\nmore: [1, 2\n", key: "(file)", reason: "did not find expected", not: "tab"},
		{name: "a character that cannot start a value, after a tab in a list", yaml: "+more: [1,\n\t@2]\n", key: "(file)", reason: "found character that cannot start any token", not: "indented with a tab"},
		{name: "a list at the top", yaml: "- a\n- b\n", key: "(top level)", reason: "expected a mapping of keys, got a list"},
		{name: "a scalar at the top", yaml: "hello\n", key: "(top level)", reason: "expected a mapping of keys"},
		{name: "an empty file", yaml: "", key: "database.url", reason: "is required"},
		{name: "an unknown top-level key with a suggestion", yaml: "+destination: {}\n", key: "destination", reason: "unknown key (did you mean destinations?)"},
		{name: "a misspelt nested key", yaml: "+outbox: { claimTimeOutMs: 5000 }\n", key: "outbox.claimTimeOutMs", reason: "did you mean claimTimeoutMs?"},
		{name: "a key written in snake_case", yaml: "+outbox: { batch_size: 10 }\n", key: "outbox.batch_size", reason: "unknown key"},
		{name: "a mapping where a value belongs", yaml: "+log: { level: { name: debug } }\n", key: "log.level", reason: "expected a single value, got a mapping"},
		{name: "a list where a mapping belongs", yaml: "+outbox: [1, 2]\n", key: "outbox", reason: "expected a mapping of keys, got a list"},
		{name: "a value where a list belongs", yaml: "~routes:\n  - { topicPattern: \"#\", destination: hook }~routes: hook~", key: "routes", reason: "expected a list"},
		{name: "a key given twice", yaml: "+outbox:\n  batchSize: 10\n  maxInFlight: 20\n  batchSize: 500\n", key: "outbox.batchSize", reason: "twice"},
	})
}

func TestBadValues(t *testing.T) {
	runBad(t, []badCase{
		{name: "text for a number", yaml: "+outbox: { batchSize: lots }\n", key: "outbox.batchSize", reason: `expected a whole number, got "lots"`, line: 7},
		{name: "a fraction for a whole number", yaml: "+outbox: { batchSize: 2.5 }\n", key: "outbox.batchSize", reason: "expected a whole number"},
		{name: "a fraction says what to write", yaml: "+outbox: { batchSize: 2.5 }\n", key: "outbox.batchSize", reason: `expected a whole number, got "2.5", which has a fraction; write 2 or 3`},
		{name: "a fraction with an exponent", yaml: "+outbox: { batchSize: 1.5e-1 }\n", key: "outbox.batchSize", reason: "which has a fraction; write 0 or 1"},
		{name: "a duration for a key in milliseconds", yaml: "+outbox: { claimTimeoutMs: 30s }\n", key: "outbox.claimTimeoutMs", reason: `expected a whole number, got "30s"; the key counts milliseconds: write 30000`},
		{name: "a fraction too small for a float64", yaml: "+outbox: { batchSize: 500.0000000000000001 }\n", key: "outbox.batchSize", reason: "which has a fraction; write 500 or 501"},
		{name: "a negative fraction", yaml: "+outbox: { batchSize: -2.5 }\n", key: "outbox.batchSize", reason: "which has a fraction; write -3 or -2"},
		{name: "an exponent beyond the key's range", yaml: "+outbox: { batchSize: 1e5 }\n", key: "outbox.batchSize", reason: "100000 is out of range; use a value from 1 to 10000"},
		{name: "an exponent beyond any integer", yaml: "+outbox: { batchSize: 1e30 }\n", key: "outbox.batchSize", reason: `expected a whole number, got "1e30", which is too large`},
		{name: "infinity for a whole number", yaml: "+outbox: { batchSize: .inf }\n", key: "outbox.batchSize", reason: `expected a whole number, got ".inf"`},
		{name: "a fraction for a duration", yaml: "+outbox: { retention: { delivered: 7.5 } }\n", key: "outbox.retention.delivered", reason: "is not a duration"},
		{name: "a number below its range", yaml: "+outbox: { claimTimeoutMs: 10 }\n", key: "outbox.claimTimeoutMs", reason: "out of range; use a value from 1000"},
		{name: "a number above its range", yaml: "+outbox: { maxAttempts: 5000 }\n", key: "outbox.maxAttempts", reason: "out of range"},
		{name: "a negative size", yaml: "+database: { maxConnections: -1 }\n", key: "database.maxConnections", reason: "out of range"},
		{name: "text for a boolean", yaml: "+inbox: { relay: { enabled: maybe } }\n", key: "inbox.relay.enabled", reason: "expected true or false"},
		{name: "a number too large for any integer", yaml: "+outbox: { batchSize: 99999999999999999999999 }\n", key: "outbox.batchSize", reason: "expected a whole number"},
		{name: "a duration without a unit", yaml: "+outbox: { retention: { delivered: 7 } }\n", key: "outbox.retention.delivered", reason: "is not a duration"},
		{name: "a negative duration", yaml: "+outbox: { retention: { dead: -5h } }\n", key: "outbox.retention.dead", reason: "is negative"},
		{name: "a backoff whose maximum is below its start", yaml: "+outbox: { backoff: { initialMs: 5000, maxMs: 100 } }\n", key: "outbox.backoff.maxMs", reason: "below outbox.backoff.initialMs"},
		{name: "a backoff multiplier below one", yaml: "+outbox: { backoff: { multiplier: 0.5 } }\n", key: "outbox.backoff.multiplier", reason: "out of range"},
		{name: "a jitter above one", yaml: "+outbox: { backoff: { jitter: 2 } }\n", key: "outbox.backoff.jitter", reason: "out of range"},
		{name: "an unknown log level", yaml: "+log: { level: verbose }\n", key: "log.level", reason: "use debug, info, warn or error"},
		{name: "an unknown log format", yaml: "+log: { format: xml }\n", key: "log.format", reason: "use json or text"},
		{name: "an unknown dialect", yaml: "+database: { dialect: mysql }\n", key: "database.dialect", reason: "use postgresql or sqlserver"},
		{name: "an unknown kind of wake-up", yaml: "+database: { wakeups: notify }\n", key: "database.wakeups", reason: `"notify" is not a kind of wake-up; use auto, logical or probe`},
		{name: "logical wake-ups on SQL Server", yaml: "~  url: postgres://queuebox@localhost:5432/app\n~  dialect: sqlserver\n  url: sqlserver://queuebox@localhost:1433?database=app\n  wakeups: logical\n~", key: "database.wakeups", reason: "SQL Server does not have; use auto or probe"},
		{name: "an unset environment variable", yaml: "+admin: { token: \"${ADMIN_TOKEN}\" }\n", key: "admin.token", reason: "ADMIN_TOKEN is not set; set it, or give a default as ${ADMIN_TOKEN:-value}"},
		{name: "an environment variable that does not fit a number", yaml: "+outbox: { batchSize: \"${BATCH}\" }\n", env: map[string]string{"BATCH": "many"}, key: "outbox.batchSize", reason: `expected a whole number, got "many"`},
	})
}

// A whole number written with an exponent or a decimal point is that
// number: 1e3 is 1000, as JSON Schema's integer also takes it.
func TestWholeNumberInAnotherForm(t *testing.T) {
	for _, c := range []struct {
		yaml string
		env  map[string]string
		want int
	}{
		{yaml: "1e3", want: 1000},
		{yaml: "1.5e3", want: 1500},
		{yaml: "1000.0", want: 1000},
		{yaml: "+2E2", want: 200},
		{yaml: "\"${BATCH}\"", env: map[string]string{"BATCH": "2e3"}, want: 2000},
	} {
		l, err := Parse("q.yaml", []byte(badBase+"outbox: { batchSize: "+c.yaml+" }\n"), env(c.env))
		if err != nil {
			t.Errorf("batchSize: %s: %v", c.yaml, err)
			continue
		}
		if l.Outbox.BatchSize != c.want {
			t.Errorf("batchSize: %s is %d, want %d", c.yaml, l.Outbox.BatchSize, c.want)
		}
	}
}

func TestBadDatabase(t *testing.T) {
	runBad(t, []badCase{
		{name: "no URL", yaml: "~  url: postgres://queuebox@localhost:5432/app\n~~", key: "database.url", reason: "is required: the URL of the database"},
		{name: "a URL without a scheme", yaml: "~postgres://queuebox@localhost:5432/app~localhost:5432/app~", key: "database.url", reason: "(expected postgres://)"},
		{name: "a URL that is not a URL", yaml: "~postgres://queuebox@localhost:5432/app~\"postgres://%zz\"~", key: "database.url", reason: "is not a URL; write it like postgres://user:password@host:5432/app"},
		{name: "a URL of another database", yaml: "~postgres://queuebox@localhost:5432/app~mysql://queuebox@localhost/app~", key: "database.url", reason: "does not fit database.dialect postgresql"},
		{name: "a SQL Server URL with the PostgreSQL dialect", yaml: "~postgres://queuebox@localhost:5432/app~sqlserver://sa@localhost:1433?database=app~", key: "database.url", reason: "expected postgres://"},
		{name: "a table name that is not an identifier", yaml: "+database: { outboxTableName: \"my outbox\" }\n", key: "database.outboxTableName", reason: "not a valid identifier"},
		{name: "a table name too long for its indexes", yaml: "+database: { outboxTableName: " + strings.Repeat("t", 50) + " }\n", key: "database.outboxTableName", reason: "the limit is"},
		{name: "the same name for both tables", yaml: "+database: { outboxTableName: events, inboxTableName: EVENTS }\n", key: "database.inboxTableName", reason: "also the outbox table's name"},
		{name: "an empty table name", yaml: "+database: { outboxTableName: \"\" }\n", key: "database.outboxTableName", reason: "must not be empty"},
		{name: "a mapping of a column that does not exist", yaml: "+database: { columnMapping: { outbox: { body: data } } }\n", key: "database.columnMapping.outbox.body", reason: "is not a column of the table; the columns are id, topic"},
		{name: "two columns mapped to one name", yaml: "+database: { columnMapping: { outbox: { key: topic } } }\n", key: "database.columnMapping.outbox", reason: "all map to \"topic\""},
		{name: "an inbox column mapped to nothing", yaml: "+database: { columnMapping: { inbox: { source: \"\" } } }\n", key: "database.columnMapping.inbox.source", reason: "must not be empty"},
		{name: "a schema that is not an identifier", yaml: "+database: { schema: \"app-data\" }\n", key: "database.schema", reason: "not a valid identifier"},
	})
}

func TestBadDestinations(t *testing.T) {
	runBad(t, []badCase{
		{name: "no type", yaml: "~{ type: http, url~{ url~", key: "destinations.hook.type", reason: "is required; use one of http, rabbitmq, kafka, nats, null", not: `""`},
		{name: "an unknown type", yaml: "~type: http~type: webhook~", key: "destinations.hook.type", reason: `"webhook" is not a destination type`},
		{name: "an empty destination", yaml: "@  other:\n", key: "destinations.other", reason: "is empty; give it a type"},
		{name: "an HTTP destination without a URL", yaml: "~, url: \"https://hooks.example.com/{{ topic }}\"~~", key: "destinations.hook.url", reason: "is required"},
		{name: "an HTTP URL that is not http", yaml: "~https://hooks.example.com/{{ topic }}~ftp://h/x~", key: "destinations.hook.url", reason: "is not an http:// or https:// URL with a host"},
		{name: "an HTTP URL without a host", yaml: "~https://hooks.example.com/{{ topic }}~https:///x~", key: "destinations.hook.url", reason: "with a host"},
		{name: "an unknown placeholder", yaml: "~{{ topic }}~{{ subject }}~", key: "destinations.hook.url", reason: "unknown placeholder {{ subject }}; the names are topic, key, aggregateType, id and headers.NAME"},
		{name: "an unclosed placeholder", yaml: "~{{ topic }}~{{ topic~", key: "destinations.hook.url", reason: "unclosed placeholder"},
		{name: "a method HTTP destinations do not use", yaml: "~type: http,~type: http, method: GET,~", key: "destinations.hook.method", reason: "use POST, PUT or PATCH"},
		{name: "a success status as non-retryable", yaml: "~type: http,~type: http, nonRetryableStatus: [200],~", key: "destinations.hook.nonRetryableStatus[0]", reason: "is a success status"},
		{name: "a status that is not HTTP", yaml: "~type: http,~type: http, nonRetryableStatus: [999],~", key: "destinations.hook.nonRetryableStatus[0]", reason: "is not an HTTP status"},
		{name: "a signing secret without its prefix", yaml: "~type: http,~type: http, signingSecret: c2VjcmV0c2VjcmV0c2VjcmV0,~", key: "destinations.hook.signingSecret", reason: "does not start with whsec_"},
		{name: "a signing secret too short", yaml: "~type: http,~type: http, signingSecret: whsec_c2hvcnQ=,~", key: "destinations.hook.signingSecret", reason: "16"},
		{name: "a key of another type", yaml: "~type: http,~type: http, exchange: events,~", key: "destinations.hook.exchange", reason: "is not a key of a http destination (it belongs to rabbitmq)"},
		{name: "tls.enabled on HTTP", yaml: "~type: http,~type: http, tls: { enabled: true },~", key: "destinations.hook.tls.enabled", reason: "the https:// scheme turns TLS on"},
		{name: "a header name with a space", yaml: "~type: http,~type: http, headers: { \"X Token\": a },~", key: "destinations.hook.headers", reason: "not a valid header name"},
		{name: "a header name HTTP cannot send", yaml: "~type: http,~type: http, headers: { \"X-Token(1)\": a },~", key: "destinations.hook.headers", reason: "X-Token(1)"},
		{name: "two header names that differ in case", yaml: "~type: http,~type: http, headers: { X-Key: a, x-key: b },~", key: "destinations.hook.headers.x-key", reason: `"X-Key" and "x-key" name one header`},
		{name: "two header names that differ in case say what to do", yaml: "~type: http,~type: http, headers: { X-KEY: a, x-key: b },~", key: "destinations.hook.headers.x-key", reason: "keep one"},
		{name: "a header name in three spellings", yaml: "~type: http,~type: http, headers: { x-key: a, X-Key: b, X-KEY: c },~", key: "destinations.hook.headers.x-key", reason: `"X-KEY", "X-Key" and "x-key" name one header`},
		{name: "a header name again in another case, lines apart", yaml: "@  h2:\n    type: http\n    url: https://h/x\n    headers:\n      X-Key: a\n      x-key: b\n", key: "destinations.h2.headers.x-key", reason: `"X-Key" and "x-key" name one header`, line: 9},
		{name: "a header name again in another case, in the other order", yaml: "@  h2:\n    type: http\n    url: https://h/x\n    headers:\n      x-key: a\n      X-Key: b\n", key: "destinations.h2.headers.X-Key", reason: `"x-key" and "X-Key" name one header`, line: 9},
		{name: "a header value with a control character", yaml: "~type: http,~type: http, headers: { X-Token: \"a\\u0001b\" },~", key: "destinations.hook.headers", reason: "X-Token"},
		{name: "RabbitMQ without an exchange", yaml: "@  mq: { type: rabbitmq, url: \"amqp://guest:guest@localhost:5672/\" }\n", key: "destinations.mq", reason: "needs exchange (a template) or exchangeFrom: aggregate_type"},
		{name: "RabbitMQ with both exchange keys", yaml: "@  mq: { type: rabbitmq, url: \"amqp://h/\", exchange: x, exchangeFrom: aggregate_type }\n", key: "destinations.mq.exchangeFrom", reason: "cannot be combined with exchange"},
		{name: "RabbitMQ with an unsupported exchangeFrom", yaml: "@  mq: { type: rabbitmq, url: \"amqp://h/\", exchangeFrom: topic }\n", key: "destinations.mq.exchangeFrom", reason: "the only value is aggregate_type"},
		{name: "RabbitMQ with an HTTP URL", yaml: "@  mq: { type: rabbitmq, url: \"http://h/\", exchange: x }\n", key: "destinations.mq.url", reason: "amqp://user:password@host:5672/vhost"},
		{name: "a broker URL's password is not shown", yaml: "@  mq: { type: rabbitmq, url: \"http://u:hunter22@h/\", exchange: x }\n", key: "destinations.mq.url", reason: "xxxxx"},
		{name: "Kafka without brokers", yaml: "@  k: { type: kafka, topic: t }\n", key: "destinations.k.brokers", reason: "is required: a list of host:port"},
		{name: "a Kafka broker without a port", yaml: "@  k: { type: kafka, brokers: [kafka-1], topic: t }\n", key: "destinations.k.brokers[0]", reason: "is not host:port"},
		{name: "Kafka without a topic", yaml: "@  k: { type: kafka, brokers: [\"k:9092\"] }\n", key: "destinations.k.topic", reason: "is required"},
		{name: "Kafka with unknown acks", yaml: "@  k: { type: kafka, brokers: [\"k:9092\"], topic: t, acks: some }\n", key: "destinations.k.acks", reason: "use all or one"},
		{name: "Kafka with an unknown compression", yaml: "@  k: { type: kafka, brokers: [\"k:9092\"], topic: t, compression: brotli }\n", key: "destinations.k.compression", reason: "use none, gzip, snappy, lz4 or zstd"},
		{name: "Kafka with an unknown partitioner", yaml: "@  k: { type: kafka, brokers: [\"k:9092\"], topic: t, partitioner: random }\n", key: "destinations.k.partitioner", reason: "use murmur2 or fnv1a"},
		{name: "Kafka with an unknown SASL mechanism", yaml: "@  k: { type: kafka, brokers: [\"k:9092\"], topic: t, sasl: { mechanism: GSSAPI } }\n", key: "destinations.k.sasl.mechanism", reason: "use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"},
		{name: "Kafka with SASL and no username", yaml: "@  k: { type: kafka, brokers: [\"k:9092\"], topic: t, sasl: { mechanism: PLAIN, password: p } }\n", key: "destinations.k.sasl.username", reason: "is required with sasl.mechanism PLAIN"},
		{name: "Kafka with SASL and no password", yaml: "@  k: { type: kafka, brokers: [\"k:9092\"], topic: t, sasl: { mechanism: SCRAM-SHA-256, username: u } }\n", key: "destinations.k.sasl.password", reason: "is required with sasl.mechanism SCRAM-SHA-256"},
		{name: "Kafka with a CA but no TLS", yaml: "@  k: { type: kafka, brokers: [\"k:9092\"], topic: t, tls: { caFile: ca.pem } }\n", key: "destinations.k.tls.caFile", reason: "set tls.enabled: true"},
		{name: "Kafka skipping verification without TLS", yaml: "@  k: { type: kafka, brokers: [\"k:9092\"], topic: t, tls: { insecureSkipVerify: true } }\n", key: "destinations.k.tls.insecureSkipVerify", reason: "set tls.enabled: true to use TLS, or remove it"},
		{name: "NATS without a subject", yaml: "@  n: { type: nats, url: \"nats://h:4222\" }\n", key: "destinations.n.subject", reason: "is required"},
		{name: "NATS with a URL of another kind", yaml: "@  n: { type: nats, url: \"amqp://h:4222\", subject: s }\n", key: "destinations.n.url", reason: "nats://host:4222"},
		{name: "NATS with a bad placeholder in the subject", yaml: "@  n: { type: nats, url: \"nats://h:4222\", subject: \"a.{{ nope }}\" }\n", key: "destinations.n.subject", reason: "unknown placeholder"},
	})
}

func TestBadRoutes(t *testing.T) {
	runBad(t, []badCase{
		{name: "no routes", yaml: "~routes:\n  - { topicPattern: \"#\", destination: hook }\n~~", key: "routes", reason: "no route is configured"},
		{name: "a route without a pattern", yaml: "~topicPattern: \"#\", ~~", key: "routes[0].topicPattern", reason: "is required (# matches every topic)"},
		{name: "a route without a destination", yaml: "~, destination: hook~~", key: "routes[0].destination", reason: "is required: the name of a destination"},
		{name: "a route to a destination that does not exist", yaml: "~destination: hook }~destination: hooks }~", key: "routes[0].destination", reason: `"hooks" is not a defined destination; the defined ones are hook`},
		{name: "a wildcard mixed with text", yaml: "~\"#\"~\"order.cre*\"~", key: "routes[0].topicPattern", reason: "mixes a wildcard with text"},
		{name: "an empty segment", yaml: "~\"#\"~\"order..created\"~", key: "routes[0].topicPattern", reason: "has an empty segment"},
		{name: "a transform that does not parse", yaml: "~destination: hook }~destination: hook, transform: \"{a: \" }~", key: "routes[0].transform", reason: "does not parse"},
		{name: "a transform with an unknown variable", yaml: "~destination: hook }~destination: hook, transform: \"{a: $row}\" }~", key: "routes[0].transform", reason: "the variables are $attempt"},
		{name: "a route that is not a mapping", yaml: "~- { topicPattern: \"#\", destination: hook }~- hook~", key: "routes[0]", reason: "expected a mapping of keys"},
	})
}

// A fan-out route names its destinations in a list, in place of
// destination; a filter is a jq test. Each mistake is one problem under
// the route's key.
func TestBadFanOutAndFilters(t *testing.T) {
	runBad(t, []badCase{
		{name: "destination and destinations", yaml: "~destination: hook }~destination: hook, destinations: [hook] }~", key: "routes[0].destinations", line: 6,
			reason: "cannot be combined with destination; keep one of the two: destination: NAME sends each row to one destination, destinations: [NAME, OTHER] to each of several"},
		{name: "destinations empty", yaml: "~destination: hook }~destinations: [] }~", key: "routes[0].destinations",
			reason: "is empty; list the destinations each row goes to (destinations: [NAME, OTHER]), or write destination: NAME for one", not: "is required"},
		{name: "destinations null", yaml: "~destination: hook }~destinations: null }~", key: "routes[0].destinations", reason: "is empty; list the destinations"},
		{name: "destinations not a list", yaml: "~destination: hook }~destinations: hook }~", key: "routes[0].destinations", reason: `expected a list, got "hook"`, not: "is empty"},
		{name: "a destination listed twice", yaml: "~destination: hook }~destinations: [hook, hook] }~", key: "routes[0].destinations[1]",
			reason: `"hook" is listed twice (first as destinations[0]); a route sends each row to a destination once: list it once`},
		{name: "an undefined destination in the list", yaml: "~destination: hook }~destinations: [hook, crm] }~", key: "routes[0].destinations[1]",
			reason: `"crm" is not a defined destination; the defined ones are hook`},
		{name: "an empty name in the list", yaml: "~destination: hook }~destinations: [hook, \"\"] }~", key: "routes[0].destinations[1]",
			reason: "is empty; give the name of a destination, or remove the entry"},
		{name: "a mapping in the list", yaml: "~destination: hook }~destinations: [hook, { name: crm }] }~", key: "routes[0].destinations[1]",
			reason: "expected a single value, got a mapping", not: "not a defined destination"},
		{name: "a route with neither", yaml: "~, destination: hook~~", key: "routes[0].destination",
			reason: "is required: the name of a destination (or destinations: [NAME, OTHER] to send each row to several)"},
		{name: "a filter that does not parse", yaml: "~destination: hook }~destination: hook, filter: \".amount >\" }~", key: "routes[0].filter", line: 6,
			reason: `the jq filter ".amount >" does not parse`},
		{name: "a filter with an unknown variable", yaml: "~destination: hook }~destination: hook, filter: \"$row.amount > 1\" }~", key: "routes[0].filter",
			reason: "does not compile: variable not defined: $row; a filter is a jq test of the payload, such as .amount > 100, and the variables are $attempt, $id, $topic, $key"},
		{name: "the second route's list", yaml: "+  - { topicPattern: \"order.#\", destinations: [hook, hooks] }\n", key: "routes[1].destinations[1]", line: 7,
			reason: `"hooks" is not a defined destination; the defined ones are hook`},
		{name: "an outbox's own route", yaml: `destinations:
  hook: { type: http, url: "https://hooks.example.com/{{ topic }}" }
outboxes:
  orders:
    database: { url: postgres://queuebox@localhost:5432/app }
    routes:
      - { topicPattern: "#", destinations: [hook, hook], filter: "{" }
`, key: "outboxes.orders.routes[0].destinations[1]", reason: `"hook" is listed twice`, line: 7},
		{name: "an outbox's own route's filter", yaml: `destinations:
  hook: { type: http, url: "https://hooks.example.com/{{ topic }}" }
outboxes:
  orders:
    database: { url: postgres://queuebox@localhost:5432/app }
    routes:
      - { topicPattern: "#", destinations: [hook, hook], filter: "{" }
`, key: "outboxes.orders.routes[0].filter", reason: `the jq filter "{" does not parse`, line: 7},
	})
}

func TestBadAdminAndInbox(t *testing.T) {
	runBad(t, []badCase{
		{name: "a listen address without a port", yaml: "+admin: { listen: localhost }\n", key: "admin.listen", reason: "is not host:port"},
		{name: "listening beyond loopback without a token", yaml: "+admin: { listen: \"0.0.0.0:8080\" }\n", key: "admin.listen", reason: "admin.token is empty; set admin.token"},
		{name: "an inbox source of an unknown type", yaml: "+inbox: { sources: { s: { type: smtp, topic: t } } }\n", key: "inbox.sources.s.type", reason: `"smtp" is not a source type; use one of http, rabbitmq, kafka, nats`},
		{name: "an inbox source name unfit for a URL", yaml: "+inbox: { sources: { \"pay ments/1\": { type: http, topic: t } } }\n", key: "inbox.sources.pay ments/1", reason: "is not a usable source name"},
		{name: "an empty inbox source", yaml: "+inbox: { sources: { s: } }\n", key: "inbox.sources.s", reason: "is empty; give it a type"},
		{name: "an inbox template reading a column", yaml: "+inbox: { sources: { s: { type: http, topic: \"in.{{ topic }}\" } } }\n", key: "inbox.sources.s.topic", reason: "its templates read the message's headers only"},
		{name: "an open inbox source beyond loopback", yaml: "+admin: { listen: \"0.0.0.0:8080\", token: admin-token-1 }\ninbox: { sources: { s: { type: http, topic: t } } }\n", key: "inbox.sources.s", reason: "accepts messages from anyone"},
		{name: "an inbox signing secret without its prefix", yaml: "+inbox: { sources: { s: { type: http, topic: t, signingSecret: c2VjcmV0c2VjcmV0c2VjcmV0 } } }\n", key: "inbox.sources.s.signingSecret", reason: "whsec_"},
		{name: "a RabbitMQ inbox source without a queue", yaml: "+inbox: { sources: { s: { type: rabbitmq, topic: t, url: \"amqp://h/\" } } }\n", key: "inbox.sources.s.queue", reason: "is required"},
		{name: "a Kafka inbox source without a group", yaml: "+inbox: { sources: { s: { type: kafka, topic: t, brokers: [\"k:9092\"], kafkaTopic: in } } }\n", key: "inbox.sources.s.groupId", reason: "is required"},
		{name: "a NATS inbox source without a durable", yaml: "+inbox: { sources: { s: { type: nats, topic: t, url: \"nats://h:4222\", stream: S } } }\n", key: "inbox.sources.s.durable", reason: "is required"},
		{name: "an inbox source without a topic", yaml: "+inbox: { sources: { s: { type: http } } }\n", key: "inbox.sources.s.topic", reason: "is required"},
		{name: "an inbox key of another source type", yaml: "+inbox: { sources: { s: { type: http, topic: t, queue: q } } }\n", key: "inbox.sources.s.queue", reason: "is not a key of a http source"},
		{name: "an inbox source with a bad template", yaml: "+inbox: { sources: { s: { type: http, topic: \"in.{{ what }}\" } } }\n", key: "inbox.sources.s.topic", reason: "unknown placeholder"},
		{name: "a Kafka inbox source with an unknown SASL mechanism", yaml: "+inbox: { sources: { s: { type: kafka, topic: t, brokers: [\"k:9092\"], kafkaTopic: in, groupId: g, sasl: { mechanism: GSSAPI, username: u, password: p } } } }\n", key: "inbox.sources.s.sasl.mechanism", reason: "use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"},
		{name: "a Kafka inbox source with a lower-case SASL mechanism", yaml: "+inbox: { sources: { s: { type: kafka, topic: t, brokers: [\"k:9092\"], kafkaTopic: in, groupId: g, sasl: { mechanism: plain, username: u, password: p } } } }\n", key: "inbox.sources.s.sasl.mechanism", reason: `"plain": use PLAIN`},
		{name: "a Kafka inbox source with SASL and no username", yaml: "+inbox: { sources: { s: { type: kafka, topic: t, brokers: [\"k:9092\"], kafkaTopic: in, groupId: g, sasl: { mechanism: PLAIN, password: p } } } }\n", key: "inbox.sources.s.sasl.username", reason: "is required with sasl.mechanism PLAIN"},
		{name: "a Kafka inbox source with SASL and no password", yaml: "+inbox: { sources: { s: { type: kafka, topic: t, brokers: [\"k:9092\"], kafkaTopic: in, groupId: g, sasl: { mechanism: SCRAM-SHA-512, username: u } } } }\n", key: "inbox.sources.s.sasl.password", reason: "is required with sasl.mechanism SCRAM-SHA-512"},
		{name: "a Kafka inbox source with credentials and no mechanism", yaml: "+inbox: { sources: { s: { type: kafka, topic: t, brokers: [\"k:9092\"], kafkaTopic: in, groupId: g, sasl: { username: u, password: p } } } }\n", key: "inbox.sources.s.sasl.mechanism", reason: "is required with sasl.username and sasl.password"},
		{name: "a Kafka inbox source with a CA but no TLS", yaml: "+inbox: { sources: { s: { type: kafka, topic: t, brokers: [\"k:9092\"], kafkaTopic: in, groupId: g, tls: { caFile: ca.pem } } } }\n", key: "inbox.sources.s.tls.caFile", reason: "set tls.enabled: true"},
		{name: "an unknown key under a Kafka inbox source's sasl", yaml: "+inbox: { sources: { s: { type: kafka, topic: t, brokers: [\"k:9092\"], kafkaTopic: in, groupId: g, sasl: { mechanism: PLAIN, user: u, password: p } } } }\n", key: "inbox.sources.s.sasl.user", reason: "unknown key; the keys here are mechanism, password, username"},
		{name: "tls on a RabbitMQ inbox source", yaml: "+inbox: { sources: { s: { type: rabbitmq, topic: t, url: \"amqp://h/\", queue: q, tls: { enabled: true } } } }\n", key: "inbox.sources.s.tls", reason: "is not a key of a rabbitmq source (it belongs to kafka)"},
		{name: "tls on an HTTP inbox source", yaml: "+inbox: { sources: { s: { type: http, topic: t, tls: { caFile: ca.pem } } } }\n", key: "inbox.sources.s.tls", reason: "is not a key of a http source (it belongs to kafka)"},
		{name: "sasl on a NATS inbox source", yaml: "+inbox: { sources: { s: { type: nats, topic: t, url: \"nats://h:4222\", stream: S, durable: d, sasl: { mechanism: PLAIN } } } }\n", key: "inbox.sources.s.sasl", reason: "is not a key of a nats source (it belongs to kafka)"},
	})
}

// A password written in database.url itself is redacted by `config check`;
// the printed file must load back and print the same, as it does for a
// password from the environment.
func TestConfigCheckOutputWithALiteralPasswordLoadsBack(t *testing.T) {
	cfg := strings.Replace(badBase, "postgres://queuebox@", "postgres://queuebox:pw-literal-1@", 1)
	l, err := Parse("q.yaml", []byte(cfg), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	out, err := l.Effective()
	if err != nil {
		t.Fatal(err)
	}
	for gen := 2; gen <= 3; gen++ {
		l, err = Parse("printed.yaml", out, env(nil))
		if err != nil {
			t.Fatalf("generation %d of config check's output does not load: %v\n%s", gen, err, out)
		}
		again, err := l.Effective()
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(out) {
			t.Fatalf("generation %d prints differently:\n%s\n---\n%s", gen, out, again)
		}
		out = again
	}
}

// QUEUEBOX_DATABASE_URL replaces database.url whole: a bad value is the
// variable's fault, not the file's line, and the problem says so.
func TestBadDatabaseURLFromTheEnvironment(t *testing.T) {
	runBad(t, []badCase{
		{name: "a variable that is not a URL", yaml: badBase, env: map[string]string{"QUEUEBOX_DATABASE_URL": "garbage"},
			key: "database.url (from QUEUEBOX_DATABASE_URL)", reason: "is not a URL; set QUEUEBOX_DATABASE_URL to one like postgres://user:password@host:5432/app or sqlserver://user:password@host:1433?database=app, or unset it to use database.url from the file (line 2)", not: "database.url (line"},
		{name: "a variable with the URL of another database", yaml: badBase, env: map[string]string{"QUEUEBOX_DATABASE_URL": "mysql://app@db/app"},
			key: "database.url (from QUEUEBOX_DATABASE_URL)", reason: "starts with mysql://, which does not fit database.dialect postgresql (expected postgres://); fix QUEUEBOX_DATABASE_URL, or unset it to use database.url from the file (line 2)", not: "database.url (line"},
		{name: "a variable of blanks", yaml: badBase, env: map[string]string{"QUEUEBOX_DATABASE_URL": "  "},
			key: "database.url (from QUEUEBOX_DATABASE_URL)", reason: "holds only blanks; set QUEUEBOX_DATABASE_URL to the URL of the database, or unset it to use database.url from the file (line 2)"},
		{name: "a bad variable and no database.url in the file", yaml: "~  url: postgres://queuebox@localhost:5432/app\n~~", env: map[string]string{"QUEUEBOX_DATABASE_URL": "garbage"},
			key: "database.url (from QUEUEBOX_DATABASE_URL)", reason: "or unset it and set database.url in the file"},
	})
	// The problem has no line: the file's line is not where the value came from.
	_, err := Parse("q.yaml", []byte(badBase), env(map[string]string{"QUEUEBOX_DATABASE_URL": "garbage"}))
	var ce *Error
	if !errors.As(err, &ce) || len(ce.Problems) != 1 || ce.Problems[0].Line != 0 {
		t.Fatalf("want one problem without a line: %v", err)
	}
	// Without the variable, the file's value is blamed on its line, as before.
	runBad(t, []badCase{
		{name: "a file value that is not a URL", yaml: "~postgres://queuebox@localhost:5432/app~garbage~", key: "database.url", reason: "is not a URL; write it like postgres://", line: 2, not: "QUEUEBOX_DATABASE_URL"},
	})
}

// A number or a boolean in quotes is text, and refused: the problem says
// that the quotes are why, and to drop them.
func TestBadQuotedScalars(t *testing.T) {
	runBad(t, []badCase{
		{name: "a quoted whole number", yaml: "+outbox: { batchSize: \"10\" }\n", key: "outbox.batchSize", reason: `expected a whole number, got the quoted text "10"; write it without quotes`, line: 7},
		{name: "a single-quoted whole number", yaml: "+outbox: { batchSize: '10' }\n", key: "outbox.batchSize", reason: `expected a whole number, got the quoted text "10"; write it without quotes`},
		{name: "a quoted whole number with an exponent", yaml: "+outbox: { batchSize: \"1e3\" }\n", key: "outbox.batchSize", reason: `got the quoted text "1e3"; write it without quotes`},
		{name: "a quoted boolean", yaml: "+inbox: { relay: { enabled: \"false\" } }\n", key: "inbox.relay.enabled", reason: `expected true or false, got the quoted text "false"; write it without quotes`},
		{name: "a quoted optional boolean", yaml: "@  mq: { type: rabbitmq, url: \"amqp://h/\", exchange: x, mandatory: \"true\" }\n", key: "destinations.mq.mandatory", reason: `expected true or false, got the quoted text "true"; write it without quotes`},
		{name: "a quoted number", yaml: "+outbox: { backoff: { multiplier: \"1.5\" } }\n", key: "outbox.backoff.multiplier", reason: `expected a number, got the quoted text "1.5"; write it without quotes`},
		{name: "a quoted number in a list", yaml: "~type: http,~type: http, nonRetryableStatus: [\"400\"],~", key: "destinations.hook.nonRetryableStatus[0]", reason: `expected a whole number, got the quoted text "400"; write it without quotes`},
		{name: "a number tagged as text", yaml: "+outbox: { batchSize: !!str 10 }\n", key: "outbox.batchSize", reason: `expected a whole number, got "10", which the !!str tag makes text; remove the tag`},
		{name: "quoted substitutions that make a number", yaml: "+outbox: { batchSize: \"${A:-1}${B:-2}\" }\n", key: "outbox.batchSize", reason: `expected a whole number, got the quoted text "12" (from "${A:-1}${B:-2}"); write it without quotes`},
		// Quotes or not, text is not a number: no advice about quotes.
		{name: "quoted text for a number", yaml: "+outbox: { batchSize: \"lots\" }\n", key: "outbox.batchSize", reason: `expected a whole number, got "lots"`, not: "quote"},
		{name: "a quoted fraction for a whole number", yaml: "+outbox: { batchSize: \"2.5\" }\n", key: "outbox.batchSize", reason: `expected a whole number, got "2.5"`, not: "quote"},
		{name: "quoted text for a boolean", yaml: "+inbox: { relay: { enabled: \"maybe\" } }\n", key: "inbox.relay.enabled", reason: `expected true or false, got "maybe"`, not: "quote"},
	})
	// A quoted duration is text, which is what a duration is: it loads.
	l, err := Parse("q.yaml", []byte(badBase+"outbox: { retention: { delivered: \"24h\", dead: '0' } }\n"), env(nil))
	if err != nil || l.Outbox.Retention.Delivered != Duration(24*time.Hour) || l.Outbox.Retention.Dead != 0 {
		t.Fatalf("quoted durations: %v", err)
	}
	// A quoted single substitution is re-typed and loads, as documented.
	l, err = Parse("q.yaml", []byte(badBase+"outbox: { batchSize: \"${BATCH}\" }\ninbox: { relay: { enabled: \"${RELAY}\" } }\n"), env(map[string]string{"BATCH": "10", "RELAY": "false"}))
	if err != nil || l.Outbox.BatchSize != 10 || l.Inbox.Relay.Enabled {
		t.Fatalf("quoted substitutions: %v", err)
	}
}

// A destination or source without its type says that the type is
// required and lists the types, with no "" in the message; unknown keys
// list the keys of the destination's type only, and never a retired key.
func TestBadTypeAndKeyLists(t *testing.T) {
	runBad(t, []badCase{
		{name: "a misspelt type key", yaml: "~{ type: http, url~{ typ: http, url~", key: "destinations.hook.typ", reason: "unknown key (did you mean type?)", line: 4},
		{name: "a misspelt type key, the type", yaml: "~{ type: http, url~{ typ: http, url~", key: "destinations.hook.type", reason: "is required; use one of http, rabbitmq, kafka, nats, null", line: 4, not: `""`},
		{name: "an empty type", yaml: "~type: http~type: \"\"~", key: "destinations.hook.type", reason: "is required; use one of http, rabbitmq, kafka, nats, null", not: `""`},
		{name: "type null without quotes", yaml: "~{ type: http, url: \"https://hooks.example.com/{{ topic }}\" }~{ type: null }~", key: "destinations.hook.type", reason: `is empty: null without quotes is YAML's empty value; for the null destination write type: "null"`},
		{name: "a source without a type", yaml: "+inbox: { sources: { s: { topic: t } } }\n", key: "inbox.sources.s.type", reason: "is required; use one of http, rabbitmq, kafka, nats", not: `""`},
		{name: "an unknown key of an HTTP destination", yaml: "~type: http,~type: http, timeout: 5,~", key: "destinations.hook.timeout",
			reason: "unknown key (did you mean timeoutMs?); the keys here are circuitBreaker, cloudEvents, headers, maxConcurrency, maxConnections, method, nonRetryableStatus, rateLimit, signingSecret, signingSecrets, timeoutMs, tls, type, url"},
		{name: "an unknown key of a Kafka destination", yaml: "@  k: { type: kafka, brokers: [\"k:9092\"], topic: t, compresion: gzip }\n", key: "destinations.k.compresion",
			reason: "unknown key (did you mean compression?); the keys here are acks, brokers, circuitBreaker, cloudEvents, compression, maxConcurrency, partitioner, rateLimit, sasl, tls, topic, type"},
		{name: "an unknown key under an HTTP destination's tls", yaml: "~type: http,~type: http, tls: { ca: x },~", key: "destinations.hook.tls.ca",
			reason: "unknown key; the keys here are caFile, insecureSkipVerify"},
		{name: "an unknown key of a null destination", yaml: "@  nothing: { type: \"null\", tpye: y }\n", key: "destinations.nothing.tpye", reason: "the keys here are circuitBreaker, maxConcurrency, rateLimit, type"},
		{name: "an unknown key of a destination without a type lists them all", yaml: "~{ type: http, url~{ typ: http, url~", key: "destinations.hook.typ", reason: "the keys here are acks, brokers, circuitBreaker, cloudEvents, compression"},
		{name: "an unknown key of an HTTP source", yaml: "+inbox: { sources: { s: { type: http, topic: t, tokn: x } } }\n", key: "inbox.sources.s.tokn",
			reason: "unknown key (did you mean token?); the keys here are aggregateId, aggregateType, maxBodyBytes, signatureTolerance, signingSecret, signingSecrets, token, topic, type"},
		{name: "an unknown outbox key leaves the retired notify out", yaml: "+outbox: { notfy: true }\n", key: "outbox.notfy",
			reason: "unknown key; the keys here are backoff, batchSize, claimTimeoutMs, history, maxAttempts, maxInFlight, pollIntervalMs, probeIntervalMs, retention", not: "notify"},
	})
}

// --config naming a folder is a mistake in the command line, reported as
// a configuration problem (exit code 2), like a file that does not exist.
func TestConfigIsAFolder(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(dir)
	var ce *Error
	if !errors.As(err, &ce) || len(ce.Problems) != 1 {
		t.Fatalf("want one configuration problem, got %v", err)
	}
	want := "--config: " + dir + " is a folder, not a file; pass --config FILE, the configuration file itself (docs/configuration.md shows one)"
	if got := ce.Problems[0].String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// A folder that holds queuebox.yaml: the problem names that file.
	file := filepath.Join(dir, "queuebox.yaml")
	if err := os.WriteFile(file, []byte(badBase), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(dir)
	if !errors.As(err, &ce) || len(ce.Problems) != 1 || ce.Problems[0].Key != "--config" ||
		!strings.Contains(ce.Problems[0].Reason, "is a folder, not a file; pass --config "+file) {
		t.Errorf("a folder with queuebox.yaml in it: %v", err)
	}
	if _, err := Load(file); err != nil {
		t.Errorf("the file itself: %v", err)
	}
}

// A file that is not YAML is one problem that names the line where it
// stops being YAML (not the line where the parser's enclosing value
// starts), the column, and what to check, in words.
func TestYAMLSyntaxErrorsSayWhereAndWhat(t *testing.T) {
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"a key indented too deep", "database:\n  url: postgres://localhost/app\noutbox:\n  batchSize: 5\n   pollIntervalMs: 3\n",
			"(file) (line 5, column 4): this key is indented deeper than the keys above it; check the indentation on line 5"},
		{"a key indented too little", "database:\n  url: postgres://localhost/app\noutbox:\n  batchSize: 5\n pollIntervalMs: 3\n",
			"(file) (line 5, column 2): this line does not line up with the keys or list items around it; check the indentation on line 5"},
		{"a key among list items", "database:\n  url: postgres://localhost/app\nroutes:\n  - { topicPattern: \"#\", destination: n }\n  destination: x\n",
			"(file) (line 5, column 3): a key stands among the items of a list; check the indentation on line 5"},
		{"a value holding a colon", "database:\n  url: postgres://localhost/app\nadmin:\n  token: abc: def\n",
			`(file) (line 4, column 13): the value holds ": ", which YAML reads as the start of another key; put the value in quotes`},
		{"a brace never closed", "database: { url: postgres://localhost/app\nroutes: []\n",
			"(file) (line 1, column 11): the { here is not closed where YAML expects it"},
		{"a quote never closed", "database:\n  url: \"postgres://localhost/app\nroutes: []\n",
			"(file) (line 2, column 8): a quoted value that starts here has no closing quote"},
		{"a line without a colon", "database:\n  url: postgres://localhost/app\nroutes\n",
			"(file) (line 3, column 1): this line is neither \"key: value\" nor a list item"},
		{"a reserved character", "database:\n  url: @localhost\n",
			`(file) (line 2, column 8): "@" cannot start a value in YAML; put the value in quotes`},
	} {
		_, err := Parse("q.yaml", []byte(c.yaml), env(nil))
		var ce *Error
		if !errors.As(err, &ce) || len(ce.Problems) != 1 {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := ce.Problems[0].String(); !strings.Contains(got, c.want) || strings.Contains(got, "yaml:") {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}
