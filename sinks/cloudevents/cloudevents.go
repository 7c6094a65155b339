// Package cloudevents sends QueueBox's messages as CloudEvents 1.0 and reads
// the CloudEvents that an HTTP inbox source receives.
//
// A destination with cloudEvents set wraps its sink (Wrap): every message
// becomes an event, and is rewritten before the sink sends it as the
// protocol binding of the destination's type requires, in binary mode (the
// attributes in headers, the payload as the body) or structured mode (the
// event as one JSON document, application/cloudevents+json). The event of a
// row:
//
//	specversion      1.0
//	id               the row's id (the same on every retry and replay)
//	source           the destination's source template, rendered
//	type             the destination's type template ({{ topic }} by default)
//	time             created_at
//	subject          the key (unset for an unkeyed row)
//	partitionkey     the key, the Partitioning extension (unset when unkeyed)
//	datacontenttype  application/json
//	data             the payload after the route's transform
//
// The bindings:
//
//   - HTTP: binary puts each attribute in a ce-NAME header, datacontenttype
//     in Content-Type; structured sends the event with Content-Type
//     application/cloudevents+json. Header values go as UTF-8 text, as they
//     are: the binding asks senders to percent-encode space, '"', '%' and
//     anything outside printable ASCII, but the official Go and Java SDKs
//     read ce- headers without decoding them, so a consumer built on them
//     would read subject "Zo%C3%AB%2042" in binary mode where structured
//     mode gives "Zoë 42". HTTP carries such text in a header as it is;
//     only a value it cannot carry (a control character, a space at
//     either end, which receivers trim) is percent-encoded, whole, as the
//     binding says (httpValue).
//   - Kafka: binary puts each attribute in a ce_NAME record header (UTF-8,
//     not encoded), datacontenttype in the content-type header; structured
//     sends the event with content-type application/cloudevents+json. The
//     record key stays the row's key, which is also partitionkey.
//   - NATS: binary puts every attribute, datacontenttype too, in a
//     ce-NAME message header, percent-encoded as the NATS binding says
//     (space, '"', '%' and anything outside printable ASCII: no SDK reads
//     NATS binary mode, so consumers decode it themselves, as the binding
//     tells them); structured sends the event with Content-Type
//     application/cloudevents+json.
//   - RabbitMQ: the AMQP binding is written for AMQP 1.0, and RabbitMQ
//     speaks AMQP 0-9-1. The binding's application-properties become the
//     0-9-1 headers table, and its content-type property the 0-9-1
//     content_type property: binary puts each attribute in a
//     cloudEvents_NAME header (a string, the attribute's canonical form;
//     the binding prefers '_' to ':' for JMS clients), datacontenttype in
//     content_type; structured sends the event with content_type
//     application/cloudevents+json. This is the mapping that RabbitMQ's
//     AMQP 1.0 support applies between application-properties and headers.
//
// Headers of the row whose names start with a CloudEvents prefix (ce-, ce_,
// cloudEvents_ or cloudEvents:, in any case) are not sent: they would be read
// as attributes of the event QueueBox sends (a row relayed from an inbox that
// received a CloudEvent holds the attributes of that event; a type or source
// template can read them).
package cloudevents

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"

	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
	"github.com/queuebox/queuebox/sinks/middleware"
)

// Mode is how an event travels: its attributes in headers (binary) or the
// whole event in the body (structured).
type Mode string

// The content modes.
const (
	Binary     Mode = "binary"
	Structured Mode = "structured"
)

// Media types.
const (
	// DataContentType is the media type of QueueBox's payloads.
	DataContentType = "application/json"
	// StructuredContentType is the media type of an event in structured
	// mode (the JSON event format).
	StructuredContentType = "application/cloudevents+json"
)

// DefaultType is the type template of a destination that sets none.
const DefaultType = "{{ topic }}"

// Binding is a CloudEvents protocol binding.
type Binding int

// The bindings QueueBox speaks, one per destination type.
const (
	HTTP Binding = iota + 1
	Kafka
	NATS
	AMQP
)

// BindingOf returns the binding of a destination type (http, kafka, nats,
// rabbitmq); false for a type that has none.
func BindingOf(destinationType string) (Binding, bool) {
	switch destinationType {
	case "http":
		return HTTP, true
	case "kafka":
		return Kafka, true
	case "nats":
		return NATS, true
	case "rabbitmq":
		return AMQP, true
	}
	return 0, false
}

// Settings are a destination's cloudEvents keys as written.
type Settings struct {
	// Mode is binary or structured; "" is binary.
	Mode string
	// Source is the source template; required.
	Source string
	// Type is the type template; "" is DefaultType.
	Type string
}

// Config is a destination's compiled cloudEvents settings.
type Config struct {
	Mode    Mode
	Binding Binding
	Source  *routing.Template
	Type    *routing.Template
}

// Compile checks the cloudEvents settings s of a destination of type
// destinationType. A refusal names every problem of the settings at once:
// each is a *sinks.ConfigError whose Key is the setting under the
// destination (cloudEvents.source), joined with errors.Join (Problems
// splits them again).
func Compile(destinationType string, s Settings) (Config, error) {
	var c Config
	var ok bool
	if c.Binding, ok = BindingOf(destinationType); !ok {
		return c, sinks.Configf("cloudEvents", "a %s destination sends no messages, so it has no CloudEvents binding; remove cloudEvents", destinationType)
	}
	var problems []error
	switch Mode(s.Mode) {
	case "", Binary:
		c.Mode = Binary
	case Structured:
		c.Mode = Structured
	default:
		problems = append(problems, sinks.Configf("cloudEvents.mode", "%q: use binary (the attributes in headers, the payload as the body) or structured (the whole event as the body)", s.Mode))
	}
	var err error
	switch {
	case strings.TrimSpace(s.Source) == "":
		problems = append(problems, sinks.Configf("cloudEvents.source", "is required: the event's source, a URI reference that names who produced it, such as /shop/orders or https://shop.example.com/{{ aggregateType }}"))
	default:
		if c.Source, err = routing.ParseTemplate(s.Source); err != nil {
			problems = append(problems, sinks.Configf("cloudEvents.source", "%v", err))
		} else if err := checkURIReference(placeholders.ReplaceAllString(s.Source, "x")); err != nil {
			// Values are path-escaped (sourceValue), so only the literal
			// text can make a source that is not a URI reference.
			problems = append(problems, sinks.Configf("cloudEvents.source", "%q is not a URI reference: %v; write a path such as /shop/orders or a URL", s.Source, err))
		}
	}
	typ := s.Type
	if strings.TrimSpace(typ) == "" {
		typ = DefaultType
	}
	if c.Type, err = routing.ParseTemplate(typ); err != nil {
		problems = append(problems, sinks.Configf("cloudEvents.type", "%v", err))
	}
	return c, errors.Join(problems...)
}

// Problems splits an error of Compile into its problems, in the order of
// the settings.
func Problems(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// placeholders matches the {{ name }} of a template.
var placeholders = regexp.MustCompile(`\{\{[^{}]*\}\}`)

// checkURIReference checks s against RFC 3986: only its characters, and
// % only as the start of an escape.
func checkURIReference(s string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~:/?#[]@!$&'()*+,;=", c) >= 0:
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
		case c == ' ':
			return fmt.Errorf("it has a space at byte %d (write %%20)", i)
		default:
			return fmt.Errorf("it has %q at byte %d, which a URI cannot hold unescaped", c, i)
		}
	}
	if _, err := url.Parse(s); err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return err
	}
	return nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Wrap returns inner, sending every message as a CloudEvent as c says.
func Wrap(inner sinks.Sink, c Config) sinks.Sink {
	return middleware.Wrap(inner, func(ctx context.Context, msgs []sinks.Message, next sinks.Sink) []error {
		errs := make([]error, len(msgs))
		out := sinks.Prepare(msgs, errs, func(m *sinks.Message) (sinks.Message, error) { return c.Message(m) })
		if len(out) == 0 {
			return errs
		}
		sent := next.Publish(ctx, out)
		copy(errs, sent)
		return errs
	})
}

// Event returns the CloudEvent of m. An error is permanent: the row can
// never make a valid event (a template's value is missing on it).
func (c *Config) Event(m *sinks.Message) (event.Event, error) {
	f := m.Fields()
	source, err := c.Source.Render(f, sourceValue)
	if err != nil {
		return event.Event{}, sinks.Permanent(fmt.Errorf("cloudEvents.source: %w", err))
	}
	typ, err := c.Type.Render(f, nil)
	if err != nil {
		return event.Event{}, sinks.Permanent(fmt.Errorf("cloudEvents.type: %w", err))
	}
	if typ == "" {
		return event.Event{}, sinks.Permanent(fmt.Errorf("cloudEvents.type: the template %q made an empty type", c.Type.String()))
	}
	e := event.New(event.CloudEventsVersionV1)
	e.SetID(m.ID)
	e.SetSource(source)
	e.SetType(typ)
	e.SetTime(m.CreatedAt)
	if m.Key != "" {
		e.SetSubject(m.Key)
		e.SetExtension("partitionkey", m.Key)
	}
	e.SetDataContentType(DataContentType)
	e.DataEncoded = m.Body
	if err := e.Validate(); err != nil {
		return event.Event{}, sinks.Permanent(fmt.Errorf("the CloudEvent of this row is not valid: %v", err))
	}
	return e, nil
}

// sourceValue escapes a value for the source, a URI reference.
func sourceValue(_ int, v string) (string, error) { return url.PathEscape(v), nil }

// Message returns m as the binding sends it: a new message (m is left as it
// is) with the binding's headers in place of the row's CloudEvents headers,
// in structured mode the event as the body, and the body's media type in
// ContentType, which each sink sends where its binding reads it (the
// Content-Type header of HTTP and NATS, Kafka's content-type record header,
// AMQP's content_type property).
func (c *Config) Message(m *sinks.Message) (sinks.Message, error) {
	e, err := c.Event(m)
	if err != nil {
		return sinks.Message{}, err
	}
	out := *m
	out.Headers = make(map[string]string, len(m.Headers)+8)
	for k, v := range m.Headers {
		if !isEventHeader(k) {
			out.Headers[k] = v
		}
	}
	if c.Mode == Structured {
		body, err := format.JSON.Marshal(&e)
		if err != nil {
			return sinks.Message{}, sinks.Permanent(fmt.Errorf("the CloudEvent of this row cannot be written as JSON: %v", err))
		}
		out.Body = body
		c.setContentType(&out, StructuredContentType)
		return out, nil
	}
	c.Binding.writeAttributes(&e, out.Headers)
	c.setContentType(&out, DataContentType)
	return out, nil
}

// setContentType gives m the media type of its body, which every sink
// sends as its protocol keeps one (sinks.Message.ContentType). The Kafka
// binding names its header content-type, in lower case, and Kafka's header
// names are case-sensitive: readers that look the name up exactly (the
// Java SDK does) find it there too, beside the sink's Content-Type.
func (c *Config) setContentType(m *sinks.Message, contentType string) {
	m.ContentType = contentType
	if c.Binding == Kafka {
		m.Headers["content-type"] = contentType
	}
}

// isEventHeader reports whether a row's header name carries a CloudEvents
// attribute in one of the bindings.
func isEventHeader(name string) bool {
	for _, p := range []string{"ce-", "ce_", "cloudevents_", "cloudevents:"} {
		if len(name) > len(p) && strings.EqualFold(name[:len(p)], p) {
			return true
		}
	}
	return strings.EqualFold(name, "content-type")
}

// prefix is the header prefix of the binding's attributes.
func (b Binding) prefix() string {
	switch b {
	case Kafka:
		return "ce_"
	case AMQP:
		return "cloudEvents_"
	default:
		return "ce-"
	}
}

// writeAttributes sets the event's attributes, but datacontenttype where
// the binding has a place of its own for it, as headers in h.
func (b Binding) writeAttributes(e *event.Event, h map[string]string) {
	p := b.prefix()
	set := func(name, value string) {
		switch b {
		case HTTP:
			value = httpValue(value)
		case NATS:
			value = percentEncode(value)
		}
		h[p+name] = value
	}
	set("specversion", e.SpecVersion())
	set("id", e.ID())
	set("source", e.Source())
	set("type", e.Type())
	set("time", types.Timestamp{Time: e.Time()}.String())
	if s := e.Subject(); s != "" {
		set("subject", s)
	}
	if b == NATS {
		// NATS has no content type of its own: every attribute is a
		// ce- header.
		set("datacontenttype", e.DataContentType())
	}
	for name, v := range e.Extensions() {
		s, err := types.Format(v)
		if err == nil {
			set(name, s)
		}
	}
}

// httpValue is an attribute's value as the HTTP binding sends it: as it
// is, which the SDKs that do not decode header values read right, unless
// HTTP cannot carry it so (a control character, or a space or tab at
// either end, which every receiver trims); then percent-encoded, whole, so
// that a receiver that decodes, as the binding says, reads it right.
func httpValue(s string) string {
	if s != strings.Trim(s, " \t") || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return percentEncode(s)
	}
	return s
}

// percentEncode encodes a header value as the HTTP and NATS bindings
// require: space, '"', '%' and every byte outside printable ASCII become
// %XY (upper-case hex of each UTF-8 byte). Values that need none are
// returned as they are.
func percentEncode(s string) string {
	i := 0
	for i < len(s) && !mustEncode(s[i]) {
		i++
	}
	if i == len(s) {
		return s
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for ; i < len(s); i++ {
		c := s[i]
		if mustEncode(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func mustEncode(c byte) bool { return c <= ' ' || c == '"' || c == '%' || c >= 0x7f }
