package bootstrap

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// Config is the whole configuration file. Every key of the product exists
// here, including those whose behaviour lands in later releases, so that a
// file written for the full product validates now. docs/configuration.md
// lists them for users.
type Config struct {
	Database DatabaseConfig `yaml:"database"`
	// Outboxes are the outboxes of a relay that serves several, by name
	// (outboxes.go); a file with a top-level database has none here and
	// is one outbox, DefaultOutbox.
	Outboxes     map[string]*OutboxEntryConfig `yaml:"outboxes,omitempty"`
	Outbox       OutboxConfig                  `yaml:"outbox"`
	Inbox        InboxConfig                   `yaml:"inbox"`
	HTTP         HTTPConfig                    `yaml:"http"`
	Engine       EngineConfig                  `yaml:"engine"`
	Shutdown     ShutdownConfig                `yaml:"shutdown"`
	Destinations map[string]*DestinationConfig `yaml:"destinations"`
	Routes       []RouteConfig                 `yaml:"routes"`
	Admin        AdminConfig                   `yaml:"admin"`
	Log          LogConfig                     `yaml:"log"`
}

// OutboxEntryConfig is one outbox of outboxes: its own database block, and
// optionally its own outbox settings and routes (nil: the top level's).
// Its outbox block is read over the top level's, so it names only the keys
// that differ.
type OutboxEntryConfig struct {
	Database DatabaseConfig `yaml:"database"`
	Outbox   *OutboxConfig  `yaml:"outbox,omitempty"`
	Routes   []RouteConfig  `yaml:"routes,omitempty"`
}

type DatabaseConfig struct {
	Dialect         string        `yaml:"dialect"`
	URL             string        `yaml:"url"`
	Schema          string        `yaml:"schema"`
	MaxConnections  int           `yaml:"maxConnections" min:"1" max:"1000"`
	OutboxTableName string        `yaml:"outboxTableName"`
	InboxTableName  string        `yaml:"inboxTableName"`
	ColumnMapping   ColumnMapping `yaml:"columnMapping"`
	// Wakeups is how the relay learns that rows arrived: auto, logical or
	// probe (dialects.WakeupMode; docs/operations.md, "Wake-ups").
	Wakeups string `yaml:"wakeups"`
	// LongTransactionWarningMs is how long a transaction may hold the
	// database's horizon back before the relay logs a warning; 0 never
	// (docs/operations.md, "Long transactions").
	LongTransactionWarningMs int `yaml:"longTransactionWarningMs" min:"0" max:"86400000"`
}

type ColumnMapping struct {
	Outbox map[string]string `yaml:"outbox"`
	Inbox  map[string]string `yaml:"inbox"`
}

type OutboxConfig struct {
	MaxAttempts     int `yaml:"maxAttempts" min:"0" max:"1000"`
	ClaimTimeoutMs  int `yaml:"claimTimeoutMs" min:"1000" max:"86400000"`
	BatchSize       int `yaml:"batchSize" min:"1" max:"10000"`
	MaxInFlight     int `yaml:"maxInFlight" min:"1" max:"1000000"`
	PollIntervalMs  int `yaml:"pollIntervalMs" min:"1" max:"3600000"`
	ProbeIntervalMs int `yaml:"probeIntervalMs" min:"1" max:"60000"`
	// Notify is no longer used (wake-ups probe instead); a file that sets
	// it loads with a warning. Retired: not offered for an unknown key.
	Notify    *bool           `yaml:"notify,omitempty" retired:"true"`
	Backoff   BackoffConfig   `yaml:"backoff"`
	Retention RetentionConfig `yaml:"retention"`
	// History is the attempt history (docs/configuration.md, "The attempt
	// history").
	History HistoryConfig `yaml:"history"`
}

// HistoryConfig switches the attempt history on or off, says whether it
// records every delivery (a first try that succeeds is otherwise told by
// the row alone), and how long its attempts are kept (0: for ever).
type HistoryConfig struct {
	Enabled       bool     `yaml:"enabled"`
	AllDeliveries bool     `yaml:"allDeliveries"`
	Retention     Duration `yaml:"retention"`
}

type BackoffConfig struct {
	InitialMs  int     `yaml:"initialMs" min:"0" max:"86400000"`
	Multiplier float64 `yaml:"multiplier" min:"1" max:"100"`
	MaxMs      int     `yaml:"maxMs" min:"0" max:"604800000"`
	Jitter     float64 `yaml:"jitter" min:"0" max:"1"`
}

type RetentionConfig struct {
	Delivered  Duration `yaml:"delivered"`
	Dead       Duration `yaml:"dead"`
	IntervalMs int      `yaml:"intervalMs" min:"1000" max:"86400000"`
	BatchSize  int      `yaml:"batchSize" min:"1" max:"100000"`
}

type InboxConfig struct {
	// Outbox names the outbox whose database holds the inbox table that
	// the sources store into and whose engine runs the inbox relay; empty
	// with one outbox: that one.
	Outbox  string                        `yaml:"outbox,omitempty"`
	Relay   InboxRelayConfig              `yaml:"relay"`
	Sources map[string]*InboxSourceConfig `yaml:"sources"`
}

type InboxRelayConfig struct {
	Enabled     bool `yaml:"enabled"`
	MaxAttempts int  `yaml:"maxAttempts" min:"0" max:"1000"`
}

// InboxSourceConfig is one inbox source: where messages from outside come
// in. Which keys apply depends on Type; the kinds tag lists the types a key
// belongs to.
type InboxSourceConfig struct {
	Type          string `yaml:"type"`
	Token         string `yaml:"token" kinds:"http" secret:"true"`
	SigningSecret string `yaml:"signingSecret" kinds:"http" secret:"true"`
	// SigningSecrets are the Standard Webhooks secrets accepted, for a
	// rotation: a message signed with any of them passes. It replaces
	// SigningSecret (validate.go, signingKeys).
	SigningSecrets []string `yaml:"signingSecrets" kinds:"http" secret:"true"`
	// SignatureTolerance bounds a Standard Webhooks timestamp's distance
	// from the clock (default 5m); MaxBodyBytes the body (default 1 MiB).
	SignatureTolerance Duration `yaml:"signatureTolerance" kinds:"http" zero:"would refuse every signed message; give how far a signature's timestamp may be from the clock, or leave signatureTolerance out for 5m"`
	MaxBodyBytes       int      `yaml:"maxBodyBytes" kinds:"http" min:"1" max:"67108864"`
	Topic              string   `yaml:"topic"`
	AggregateType      string   `yaml:"aggregateType"`
	AggregateID        string   `yaml:"aggregateId"`
	URL                string   `yaml:"url" kinds:"rabbitmq,nats"`
	Queue              string   `yaml:"queue" kinds:"rabbitmq"`
	Brokers            []string `yaml:"brokers" kinds:"kafka"`
	KafkaTopic         string   `yaml:"kafkaTopic" kinds:"kafka"`
	GroupID            string   `yaml:"groupId" kinds:"kafka"`
	Stream             string   `yaml:"stream" kinds:"nats"`
	Durable            string   `yaml:"durable" kinds:"nats"`

	// SASL and TLS of a Kafka source are a Kafka destination's keys,
	// checked and built the same way.
	SASL SASLConfig `yaml:"sasl" kinds:"kafka"`
	TLS  TLSConfig  `yaml:"tls" kinds:"kafka"`
}

type HTTPConfig struct {
	MaxErrorBodyBytes int `yaml:"maxErrorBodyBytes" min:"64" max:"1048576"`
	TimeoutMs         int `yaml:"timeoutMs" min:"1" max:"3600000"`
}

type EngineConfig struct {
	// MaxConnections caps the database connections of every outbox's pool
	// together (0: no cap beyond each outbox's database.maxConnections);
	// an outbox that does not set its own gets a share (outboxes.go).
	MaxConnections       int           `yaml:"maxConnections" min:"0" max:"100000"`
	Mailbox              MailboxConfig `yaml:"mailbox"`
	KeyIdleMs            int           `yaml:"keyIdleMs" min:"1" max:"3600000"`
	UnorderedConcurrency int           `yaml:"unorderedConcurrency" min:"1" max:"100000"`
}

// MailboxConfig sizes the bounded mailboxes per actor kind; 0 is unbounded.
type MailboxConfig struct {
	Claimer   int `yaml:"claimer" min:"0" max:"1048576"`
	Key       int `yaml:"key" min:"0" max:"1048576"`
	Sink      int `yaml:"sink" min:"0" max:"1048576"`
	Completer int `yaml:"completer" min:"0" max:"1048576"`
}

type ShutdownConfig struct {
	DrainTimeoutMs int `yaml:"drainTimeoutMs" min:"0" max:"3600000"`
}

// DestinationConfig is one destination. Keys apply by type (the kinds
// tag); a key of another type is a validation error, and config check
// prints only the keys of the destination's type.
type DestinationConfig struct {
	Type string `yaml:"type"`

	// http
	URL                string            `yaml:"url" kinds:"http,rabbitmq,nats"`
	Method             string            `yaml:"method" kinds:"http" zero:"write POST, PUT or PATCH, or leave method out for POST"`
	Headers            map[string]string `yaml:"headers" kinds:"http"`
	TimeoutMs          int               `yaml:"timeoutMs" kinds:"http" min:"1" max:"3600000" zero:"would give a request no time at all; give the milliseconds a request may take (1 to 3600000), or leave timeoutMs out for http.timeoutMs"`
	NonRetryableStatus []int             `yaml:"nonRetryableStatus" kinds:"http"`
	MaxConnections     int               `yaml:"maxConnections" kinds:"http" min:"1" max:"100000" zero:"would leave no connection to send with; give the size of the connection pool (1 to 100000), or leave maxConnections out for 64"`
	SigningSecret      string            `yaml:"signingSecret" kinds:"http" secret:"true"`
	// SigningSecrets sign every delivery with each secret, in this order
	// (the new one first during a rotation). It replaces SigningSecret
	// (validate.go, signingKeys).
	SigningSecrets []string  `yaml:"signingSecrets" kinds:"http" secret:"true"`
	TLS            TLSConfig `yaml:"tls" kinds:"http,kafka"`

	// rabbitmq
	Exchange        string `yaml:"exchange" kinds:"rabbitmq"`
	ExchangeFrom    string `yaml:"exchangeFrom" kinds:"rabbitmq"`
	RoutingKey      string `yaml:"routingKey" kinds:"rabbitmq" zero:"give a template, or leave routingKey out for {{ topic }} (a fanout exchange ignores it)"`
	Mandatory       *bool  `yaml:"mandatory" kinds:"rabbitmq"`
	DeclareExchange bool   `yaml:"declareExchange" kinds:"rabbitmq"`

	// kafka
	Brokers     []string   `yaml:"brokers" kinds:"kafka"`
	Topic       string     `yaml:"topic" kinds:"kafka"`
	Acks        string     `yaml:"acks" kinds:"kafka" zero:"write all or one, or leave acks out for all"`
	Compression string     `yaml:"compression" kinds:"kafka" zero:"write none, gzip, snappy, lz4 or zstd, or leave compression out for none"`
	Partitioner string     `yaml:"partitioner" kinds:"kafka" zero:"write murmur2 or fnv1a, or leave partitioner out for murmur2"`
	SASL        SASLConfig `yaml:"sasl" kinds:"kafka"`

	// nats
	Subject         string `yaml:"subject" kinds:"nats"`
	JetStream       *bool  `yaml:"jetstream" kinds:"nats"`
	CredentialsFile string `yaml:"credentialsFile" kinds:"nats"`

	// every type: flow control and the circuit breaker (per replica)
	RateLimit      RateLimitConfig      `yaml:"rateLimit"`
	MaxConcurrency int                  `yaml:"maxConcurrency" min:"0" max:"100000"`
	CircuitBreaker CircuitBreakerConfig `yaml:"circuitBreaker"`

	// every type that sends: messages as CloudEvents (telemetry.go)
	CloudEvents *CloudEventsConfig `yaml:"cloudEvents" kinds:"http,rabbitmq,kafka,nats"`
}

// RateLimitConfig bounds the rows a replica sends a destination per second
// (a token bucket of burst rows). Without the key there is no bound.
type RateLimitConfig struct {
	PerSecond float64 `yaml:"perSecond" above:"0" max:"1000000" zero:"would let no row through; give the rows per second one replica may send (above 0, such as 50, or 0.5 for a row every 2 s), or remove rateLimit for no limit"`
	Burst     int     `yaml:"burst" min:"1" max:"1000000" zero:"would let no row through; give the most rows sent at once after a quiet spell (1 to 1000000), or leave burst out for a second's worth (perSecond rounded up)"`
}

// CircuitBreakerConfig is a destination's circuit breaker: it opens when
// every attempt failed for window, with at least minAttempts of them, and
// then sends one probe per probeInterval until one succeeds.
type CircuitBreakerConfig struct {
	Enabled       *bool    `yaml:"enabled"`
	Window        Duration `yaml:"window" zero:"is too short; use at least 100ms, or leave window out for 5s (circuitBreaker: {enabled: false} turns the breaker off)"`
	MinAttempts   int      `yaml:"minAttempts" min:"1" max:"1000000"`
	ProbeInterval Duration `yaml:"probeInterval" zero:"is too short; use at least 100ms, or leave probeInterval out for 5s (circuitBreaker: {enabled: false} turns the breaker off)"`
}

// The circuit breaker's defaults: short enough that it opens before the
// default backoff (attempts at about 0, 1, 3, 7 and 15 s) has spent a row's
// five attempts.
const (
	defaultBreakerWindow        = 5 * time.Second
	defaultBreakerMinAttempts   = 5
	defaultBreakerProbeInterval = 5 * time.Second
)

// TLSConfig is the TLS of a connection (an HTTP or Kafka destination, a
// Kafka inbox source). enabled is for Kafka only: for HTTP the https://
// scheme turns TLS on.
type TLSConfig struct {
	Enabled            bool   `yaml:"enabled" kinds:"kafka"`
	CAFile             string `yaml:"caFile"`
	InsecureSkipVerify bool   `yaml:"insecureSkipVerify"`
}

type SASLConfig struct {
	Mechanism string `yaml:"mechanism"`
	Username  string `yaml:"username"`
	Password  string `yaml:"password" secret:"true"`
}

// RouteConfig is one route: the rows whose topic matches TopicPattern (and
// that Filter accepts, when it is set) go to Destination, or with
// Destinations to each of several (a fan-out). A route names one of the
// two (validate.go, routeDestinations).
type RouteConfig struct {
	Name         string   `yaml:"name" zero:"give the route a name, or leave name out to name it after its topicPattern"`
	TopicPattern string   `yaml:"topicPattern"`
	Destination  string   `yaml:"destination"`
	Destinations []string `yaml:"destinations"`
	Filter       string   `yaml:"filter"`
	Transform    string   `yaml:"transform"`
}

type AdminConfig struct {
	Listen string `yaml:"listen"`
	Token  string `yaml:"token" secret:"true"`
	// Ready is when /readyz answers 200 for a relay of several outboxes:
	// any (one outbox ready is enough) or all.
	Ready string `yaml:"ready"`
}

type LogConfig struct {
	Format string `yaml:"format"`
	Level  string `yaml:"level"`
}

// Duration is a Go duration in the file ("168h"); a bare 0 is zero.
type Duration time.Duration

func (d *Duration) UnmarshalText(b []byte) error {
	s := string(b)
	if s == "0" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration: write it like 168h, 30m or 0", s)
	}
	if v < 0 {
		return fmt.Errorf("%q is negative", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the duration as people write it: 168h, not 168h0m0s.
func (d Duration) MarshalText() ([]byte, error) {
	if d == 0 {
		return []byte("0"), nil
	}
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return []byte(s), nil
}

// Defaults returns the configuration with every default filled in; the
// defaults block of docs/configuration.md shows the same values.
func Defaults() *Config {
	return &Config{
		Database: DatabaseConfig{
			Dialect:         "postgresql",
			MaxConnections:  10,
			OutboxTableName: "outbox",
			InboxTableName:  "inbox",
			Wakeups:         string(dialects.WakeupsAuto),
			// Five minutes: a nightly dump or a report may run that long
			// now and then; longer is worth a look.
			LongTransactionWarningMs: 300000,
		},
		Outbox: OutboxConfig{
			MaxAttempts:     5,
			ClaimTimeoutMs:  30000,
			BatchSize:       500,
			MaxInFlight:     10000,
			PollIntervalMs:  500,
			ProbeIntervalMs: 2,
			Backoff:         BackoffConfig{InitialMs: 1000, Multiplier: 2.0, MaxMs: 600000, Jitter: 0.2},
			Retention: RetentionConfig{
				Delivered:  Duration(168 * time.Hour),
				Dead:       Duration(720 * time.Hour),
				IntervalMs: 60000,
				BatchSize:  5000,
			},
			History: HistoryConfig{Enabled: true, Retention: Duration(168 * time.Hour)},
		},
		Inbox:    InboxConfig{Relay: InboxRelayConfig{Enabled: true}},
		HTTP:     HTTPConfig{MaxErrorBodyBytes: 2048, TimeoutMs: 10000},
		Engine:   EngineConfig{Mailbox: MailboxConfig{Claimer: 256, Key: 64, Sink: 1024, Completer: 8192}, KeyIdleMs: 10000, UnorderedConcurrency: 256},
		Shutdown: ShutdownConfig{DrainTimeoutMs: 15000},
		Admin:    AdminConfig{Listen: "127.0.0.1:8080", Ready: "any"},
		Log:      LogConfig{Format: "json", Level: "info"},
	}
}

// applyDestinationDefaults fills the defaults that depend on a destination's
// type, and names unnamed routes after their pattern.
func (c *Config) applyDestinationDefaults() {
	for _, d := range c.Destinations {
		if d == nil {
			continue
		}
		d.applyFlowDefaults()
		d.applyCloudEventsDefaults()
		switch d.Type {
		case "http":
			if d.Method == "" {
				d.Method = "POST"
			}
			if d.TimeoutMs == 0 {
				d.TimeoutMs = c.HTTP.TimeoutMs
			}
			if d.MaxConnections == 0 {
				d.MaxConnections = 64
			}
		case "rabbitmq":
			if d.RoutingKey == "" {
				d.RoutingKey = "{{ topic }}"
			}
			if d.Mandatory == nil {
				t := true
				d.Mandatory = &t
			}
		case "kafka":
			if d.Acks == "" {
				d.Acks = "all"
			}
			if d.Compression == "" {
				d.Compression = "none"
			}
			if d.Partitioner == "" {
				d.Partitioner = "murmur2"
			}
		case "nats":
			if d.JetStream == nil {
				t := true
				d.JetStream = &t
			}
		}
	}
	nameRoutes(c.Routes)
	for _, o := range c.Outboxes {
		if o != nil {
			nameRoutes(o.Routes)
		}
	}
	c.applyInboxDefaults()
}

// nameRoutes names each unnamed route after its pattern.
func nameRoutes(routes []RouteConfig) {
	for i := range routes {
		if routes[i].Name == "" {
			routes[i].Name = routes[i].TopicPattern
		}
	}
}

// applyFlowDefaults fills the defaults of the keys every destination has:
// the burst of a rate limit (a second's worth), and the circuit breaker
// (on, with the default window, attempts and probe interval).
func (d *DestinationConfig) applyFlowDefaults() {
	if d.RateLimit.PerSecond > 0 && d.RateLimit.Burst == 0 {
		d.RateLimit.Burst = max(1, int(math.Ceil(d.RateLimit.PerSecond)))
	}
	cb := &d.CircuitBreaker
	if cb.Enabled == nil {
		on := true
		cb.Enabled = &on
	}
	if !*cb.Enabled {
		return
	}
	if cb.Window == 0 {
		cb.Window = Duration(defaultBreakerWindow)
	}
	if cb.MinAttempts == 0 {
		cb.MinAttempts = defaultBreakerMinAttempts
	}
	if cb.ProbeInterval == 0 {
		cb.ProbeInterval = Duration(defaultBreakerProbeInterval)
	}
}
