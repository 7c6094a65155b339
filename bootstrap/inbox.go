package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/inbox"
	inboxkafka "github.com/queuebox/queuebox/inbox/kafka"
	inboxnats "github.com/queuebox/queuebox/inbox/nats"
	inboxrabbit "github.com/queuebox/queuebox/inbox/rabbitmq"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
)

// SourceTypes are the inbox source kinds.
var SourceTypes = []string{"http", "rabbitmq", "kafka", "nats"}

// sourceNameRE: a source's name is a path segment of POST /inbox/{name}
// and the value of the inbox's source column.
var sourceNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// applyInboxDefaults fills the defaults of HTTP sources.
func (c *Config) applyInboxDefaults() {
	for _, s := range c.Inbox.Sources {
		if s == nil || s.Type != "http" {
			continue
		}
		if s.MaxBodyBytes == 0 {
			s.MaxBodyBytes = inbox.DefaultMaxBodyBytes
		}
		if s.SignatureTolerance == 0 {
			s.SignatureTolerance = Duration(inbox.DefaultTolerance)
		}
	}
}

func (v *validator) inbox(c *Config) {
	names := make([]string, 0, len(c.Inbox.Sources))
	for n := range c.Inbox.Sources {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		s := c.Inbox.Sources[name]
		key := "inbox.sources." + name
		if !sourceNameRE.MatchString(name) || len(name) > inbox.MaxColumn {
			v.add(key, "%q is not a usable source name: it is part of the URL /inbox/%s and is stored with every message; use letters, digits, '.', '_' and '-' (at most %d)", name, name, inbox.MaxColumn)
		}
		if s == nil {
			v.add(key, "is empty; give it a type (%s)", strings.Join(SourceTypes, ", "))
			continue
		}
		if s.Type == "" {
			v.add(key+".type", "is required; use one of %s", strings.Join(SourceTypes, ", "))
			continue
		}
		if !oneOf(s.Type, SourceTypes...) {
			v.add(key+".type", "%q is not a source type; use one of %s", s.Type, strings.Join(SourceTypes, ", "))
			continue
		}
		v.foreignKeys(key, s.Type, "source", reflect.TypeOf(*s))
		cs := &CompiledSource{}
		v.out.Sources[name] = cs
		v.required(key+".topic", s.Topic)
		cs.Topic = v.inboxTemplate(key+".topic", s.Topic)
		cs.AggregateType = v.inboxTemplate(key+".aggregateType", s.AggregateType)
		cs.AggregateID = v.inboxTemplate(key+".aggregateId", s.AggregateID)
		switch s.Type {
		case "http":
			cs.SigningKeys = v.signingKeys(key, s.SigningSecret, s.SigningSecrets)
			unread := v.d.bad[key+".token"] || v.d.bad[key+".signingSecret"] || v.d.bad[key+".signingSecrets"] // has its own problem
			for i := range s.SigningSecrets {
				unread = unread || v.d.bad[fmt.Sprintf("%s.signingSecrets[%d]", key, i)]
			}
			if s.Token == "" && s.SigningSecret == "" && len(s.SigningSecrets) == 0 && !unread && !loopbackListen(c.Admin.Listen) {
				v.add(key, "accepts messages from anyone: admin.listen %q is reachable from other machines, and the source has neither token nor signing secrets; set token, or signingSecrets", c.Admin.Listen)
			}
		case "rabbitmq":
			v.required(key+".url", s.URL)
			v.brokerURL(key+".url", s.URL, "amqp://user:password@host:5672/vhost (amqps:// for TLS)", "amqp", "amqps")
			v.required(key+".queue", s.Queue)
		case "kafka":
			if len(s.Brokers) == 0 {
				v.add(key+".brokers", "is required: a list of host:port")
			}
			for i, b := range s.Brokers {
				if h, p, err := net.SplitHostPort(b); err != nil || h == "" || p == "" {
					v.add(fmt.Sprintf("%s.brokers[%d]", key, i), "%q is not host:port (for example kafka-1:9092)", b)
				}
			}
			v.required(key+".kafkaTopic", s.KafkaTopic)
			v.required(key+".groupId", s.GroupID)
			v.kafkaSecurity(key, s.SASL, s.TLS)
		case "nats":
			v.required(key+".url", s.URL)
			for _, u := range strings.Split(s.URL, ",") {
				v.brokerURL(key+".url", strings.TrimSpace(u), "nats://host:4222 (tls:// for TLS; a comma-separated list for a cluster)", "nats", "tls", "ws", "wss")
			}
			v.required(key+".stream", s.Stream)
			v.required(key+".durable", s.Durable)
		}
	}
}

// inboxTemplate compiles an inbox template: {{ headers.NAME }} only.
func (v *validator) inboxTemplate(key, s string) *routing.Template {
	if s == "" {
		return nil
	}
	t, err := inbox.ParseTemplate(s)
	if err != nil {
		v.add(key, "%v", err)
	}
	return t
}

func loopbackListen(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// InboxRelayOptions maps inbox.relay onto the engine of an outbox: on for
// the inbox's outbox only; max_attempts of the rows it creates is
// inbox.relay.maxAttempts, or else outbox.maxAttempts.
func InboxRelayOptions(l *Loaded) actors.InboxRelay {
	// The inbox relay runs on the inbox's outbox only (InboxOutbox).
	on := l.OutboxName == "" || l.OutboxName == l.InboxOutbox()
	r := actors.InboxRelay{Enabled: l.Inbox.Relay.Enabled && on, MaxAttempts: l.Outbox.MaxAttempts}
	if l.Inbox.Relay.MaxAttempts > 0 {
		r.MaxAttempts = l.Inbox.Relay.MaxAttempts
	}
	return r
}

// sourceMapping builds a source's mapping from its compiled templates.
func sourceMapping(l *Loaded, name string) (*inbox.Mapping, error) {
	cs := l.Compiled.Sources[name]
	m, err := inbox.NewMapping(name, cs.Topic, cs.AggregateType, cs.AggregateID)
	if m != nil {
		// Each receipt is a span, and the row keeps its trace context.
		m.Tracer, m.Type = l.Tracer, l.Inbox.Sources[name].Type
	}
	return m, err
}

// InboxHTTP builds the handler of the HTTP sources (with none, it answers
// 404 to every path). The admin listener serves it at inbox.Prefix.
func InboxHTTP(l *Loaded, store dialects.Inbox, obs inbox.Observer, log *slog.Logger) *inbox.HTTP {
	sources := map[string]*inbox.HTTPSource{}
	for name, s := range l.Inbox.Sources {
		if s.Type != "http" {
			continue
		}
		cs := l.Compiled.Sources[name]
		// Validation compiled the templates; NewMapping checks nothing
		// that it did not.
		m, _ := sourceMapping(l, name)
		sources[name] = &inbox.HTTPSource{Mapping: m, Token: s.Token, SigningSecrets: cs.SigningKeys,
			Tolerance: time.Duration(s.SignatureTolerance), MaxBodyBytes: int64(s.MaxBodyBytes)}
	}
	return inbox.NewHTTP(inbox.HTTPOptions{Sources: sources, Store: store, Observer: obs, Log: log})
}

// InboxConsumers builds a consumer per broker source.
func InboxConsumers(l *Loaded, store dialects.Inbox, obs inbox.Observer, log *slog.Logger) ([]inbox.Consumer, error) {
	names := make([]string, 0, len(l.Inbox.Sources))
	for n := range l.Inbox.Sources {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []inbox.Consumer
	for _, name := range names {
		s := l.Inbox.Sources[name]
		if s.Type == "http" {
			continue
		}
		m, err := sourceMapping(l, name)
		if err != nil {
			return nil, sourceError(l, name, err)
		}
		storer := inbox.NewStorer(name, store, obs, log)
		b := inbox.Broker{Mapping: m, Storer: storer, Log: log}
		var c inbox.Consumer
		switch s.Type {
		case "rabbitmq":
			c, err = inboxrabbit.New(inboxrabbit.Config{Broker: b, URL: s.URL, Queue: s.Queue})
		case "kafka":
			c, err = inboxkafka.New(inboxkafka.Config{Broker: b, Brokers: s.Brokers, Topic: s.KafkaTopic, GroupID: s.GroupID,
				SASL: kafkaSASL(s.SASL), TLS: kafkaTLS(s.TLS)})
		case "nats":
			c, err = inboxnats.New(inboxnats.Config{Broker: b, URL: s.URL, Stream: s.Stream, Durable: s.Durable})
		default:
			err = fmt.Errorf("%q is not a broker source type", s.Type)
		}
		if err != nil {
			return nil, sourceError(l, name, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// sourceError reports a source's refusal of its settings under its key (and
// the setting's, for the Kafka source's sasl and tls).
func sourceError(l *Loaded, name string, err error) error {
	key, reason := "inbox.sources."+name, err.Error()
	var ce *sinks.ConfigError
	if errors.As(err, &ce) {
		key, reason = key+"."+ce.Key, ce.Err.Error()
	}
	return &Error{File: l.File, Problems: []Problem{{Key: key, Reason: reason}}}
}

// startConsumers starts every broker source; they connect in the
// background.
func startConsumers(cs []inbox.Consumer, log *slog.Logger) error {
	for i, c := range cs {
		if err := c.Start(); err != nil {
			stopConsumers(context.Background(), cs[:i], log)
			return fmt.Errorf("inbox source %s: %w", c.Source(), err)
		}
		log.Info("inbox source consuming", "source", c.Source())
	}
	return nil
}

// stopConsumers drains every broker source at once: each stops taking
// messages, stores and acknowledges what it holds, and closes. What is
// still unacknowledged when ctx ends is delivered again by its broker.
func stopConsumers(ctx context.Context, cs []inbox.Consumer, log *slog.Logger) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
				log.Warn("inbox source stopped before its last batch was acknowledged; the broker delivers it again", "source", c.Source(), "error", err)
			}
		}()
	}
	wg.Wait()
}
