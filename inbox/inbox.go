package inbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks/tracing"
)

// Outcome is what became of one message a source received.
type Outcome uint8

// The outcomes of a received message.
const (
	// Stored: a new inbox row.
	Stored Outcome = iota + 1
	// Duplicate: a row of the same source and message id existed; nothing
	// was stored.
	Duplicate
	// Rejected: the message was refused (bad input, a failed
	// authentication) and nothing was stored.
	Rejected
)

func (o Outcome) String() string {
	switch o {
	case Stored:
		return "stored"
	case Duplicate:
		return "duplicate"
	case Rejected:
		return "rejected"
	}
	return "unknown"
}

// Outcomes lists every outcome, for metrics that start each series at zero.
var Outcomes = []Outcome{Stored, Duplicate, Rejected}

// Observer hears every message a source handles, for metrics
// (queuebox_inbox_received_total{source, outcome}). Sources call it from
// their own goroutines, concurrently: an implementation must be safe for
// concurrent use and must not block. A message that could not be stored
// because the database failed is not counted: its sender or broker tries
// again.
type Observer interface {
	InboxReceived(source string, outcome Outcome)
}

// ObserverFunc is an Observer as a function.
type ObserverFunc func(source string, outcome Outcome)

// InboxReceived calls f.
func (f ObserverFunc) InboxReceived(source string, outcome Outcome) { f(source, outcome) }

// NopObserver hears nothing.
type NopObserver struct{}

// InboxReceived does nothing.
func (NopObserver) InboxReceived(string, Outcome) {}

// Rejection is a message that can never be stored, with the reason, in
// words a sender can act on.
type Rejection struct{ Reason string }

func (r *Rejection) Error() string { return r.Reason }

func reject(format string, args ...any) *Rejection {
	return &Rejection{Reason: fmt.Sprintf(format, args...)}
}

// IsRejection reports whether err is a *Rejection.
func IsRejection(err error) bool {
	var r *Rejection
	return errors.As(err, &r)
}

// MaxColumn is the length, in characters, of the inbox's text columns
// (message_id, topic, aggregate_type, aggregate_id, source).
const MaxColumn = 255

// Mapping turns a received message into an inbox row for one source: its
// name and the templates of its topic, aggregate type and aggregate id.
// The templates read the message's headers only ({{ headers.NAME }}).
type Mapping struct {
	Source string
	// Topic is required; AggregateType and AggregateID may be nil (the
	// column is then null: an unkeyed row).
	Topic, AggregateType, AggregateID *routing.Template
	// Tracer makes a span of each receipt (Receive); nil is tracing off.
	Tracer *tracing.Tracer
	// Type is the source's type (http, rabbitmq, kafka, nats), for the
	// spans.
	Type string
	// names are the header names the templates read.
	names []string
}

// NewMapping checks the templates (see ParseTemplate) and returns the
// mapping of source.
func NewMapping(source string, topic, aggregateType, aggregateID *routing.Template) (*Mapping, error) {
	if topic == nil {
		return nil, errors.New("the topic template is required")
	}
	m := &Mapping{Source: source, Topic: topic, AggregateType: aggregateType, AggregateID: aggregateID}
	seen := map[string]bool{}
	for _, t := range []*routing.Template{topic, aggregateType, aggregateID} {
		if t == nil {
			continue
		}
		if err := CheckTemplate(t); err != nil {
			return nil, err
		}
		for _, n := range headerNames(t) {
			if !seen[n] {
				seen[n] = true
				m.names = append(m.names, n)
			}
		}
	}
	return m, nil
}

var placeholderRE = regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}`)

// headerNames lists the header names a template reads.
func headerNames(t *routing.Template) []string {
	var out []string
	for _, m := range placeholderRE.FindAllStringSubmatch(t.String(), -1) {
		if name, ok := strings.CutPrefix(m[1], "headers."); ok {
			out = append(out, name)
		}
	}
	return out
}

// CheckTemplate refuses placeholders other than {{ headers.NAME }}: an
// inbox message has no topic, key, aggregate type or id yet; the templates
// make them.
func CheckTemplate(t *routing.Template) error {
	for _, m := range placeholderRE.FindAllStringSubmatch(t.String(), -1) {
		if !strings.HasPrefix(m[1], "headers.") {
			return fmt.Errorf("%q: {{ %s }} is not available to an inbox source; its templates read the message's headers only: {{ headers.NAME }}", t.String(), m[1])
		}
	}
	return nil
}

// ParseTemplate parses an inbox template: literal text with
// {{ headers.NAME }} placeholders.
func ParseTemplate(s string) (*routing.Template, error) {
	t, err := routing.ParseTemplate(s)
	if err != nil {
		return nil, err
	}
	if err := CheckTemplate(t); err != nil {
		return nil, err
	}
	return t, nil
}

// Received is a message as a source got it.
type Received struct {
	// MessageID is the sender's id; required.
	MessageID string
	// Body must be JSON.
	Body []byte
	// Headers are stored with the row (and become the outbox row's
	// headers); nil stores {}.
	Headers map[string]string
	// Lookup finds a header for the templates by name (sources look names
	// up the way their protocol compares them); nil looks in Headers.
	Lookup func(name string) (string, bool)
	// AggregateID is the aggregate id when the mapping has no aggregateId
	// template (a CloudEvent's subject or partitionkey); "" leaves it null.
	AggregateID string
}

// Message maps r to the inbox row to store, or returns a *Rejection.
func (m *Mapping) Message(r Received) (dialects.InboxMessage, error) {
	var out dialects.InboxMessage
	if r.MessageID == "" {
		return out, reject("the message id is empty")
	}
	if err := checkText("the message id", r.MessageID); err != nil {
		return out, err
	}
	if err := CheckJSON(r.Body); err != nil {
		return out, err
	}
	lookup := r.Lookup
	if lookup == nil {
		lookup = func(name string) (string, bool) { return LookupFold(r.Headers, name) }
	}
	f := &routing.Fields{Headers: make(map[string]string, len(m.names))}
	for _, n := range m.names {
		if v, ok := lookup(n); ok {
			f.Headers[n] = v
		}
	}
	topic, err := m.render("topic", m.Topic, f)
	if err != nil {
		return out, err
	}
	if topic == "" {
		return out, reject("the topic template %q made an empty topic", m.Topic.String())
	}
	out = dialects.InboxMessage{Source: m.Source, MessageID: r.MessageID, Topic: topic, Payload: r.Body}
	if m.AggregateType != nil {
		v, err := m.render("aggregateType", m.AggregateType, f)
		if err != nil {
			return out, err
		}
		out.AggregateType = &v
	}
	if m.AggregateID != nil {
		v, err := m.render("aggregateId", m.AggregateID, f)
		if err != nil {
			return out, err
		}
		out.AggregateID = &v
	} else if r.AggregateID != "" {
		if err := checkText(fmt.Sprintf("the aggregate id %q", r.AggregateID), r.AggregateID); err != nil {
			return out, err
		}
		v := r.AggregateID
		out.AggregateID = &v
	}
	if len(r.Headers) > 0 {
		h, err := json.Marshal(storable(r.Headers))
		if err != nil {
			return out, reject("the headers cannot be stored as JSON: %v", err)
		}
		out.Headers = h
	}
	return out, nil
}

// storable returns h without NUL characters, which the inbox's JSON
// columns cannot hold (brokers' headers may carry them); invalid UTF-8 is
// replaced by the JSON encoder.
func storable(h map[string]string) map[string]string {
	clean := true
	for k, v := range h {
		if strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0) {
			clean = false
			break
		}
	}
	if clean {
		return h
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[strings.ReplaceAll(k, "\x00", "")] = strings.ReplaceAll(v, "\x00", "")
	}
	return out
}

func (m *Mapping) render(what string, t *routing.Template, f *routing.Fields) (string, error) {
	v, err := t.Render(f, nil)
	var me *routing.MissingError
	if errors.As(err, &me) {
		return "", reject("the %s template %q needs the header %s, which the message lacks or leaves empty", what, t.String(), strings.TrimPrefix(me.Name, "headers."))
	}
	if err != nil {
		return "", reject("the %s template %q: %v", what, t.String(), err)
	}
	if err := checkText("the "+what+" "+fmt.Sprintf("%q", v), v); err != nil {
		return "", err
	}
	return v, nil
}

// checkText refuses what the inbox's text columns cannot hold.
func checkText(what, s string) error {
	switch {
	case !utf8.ValidString(s):
		return reject("%s is not valid UTF-8", what)
	case strings.ContainsRune(s, 0):
		return reject("%s holds a NUL character", what)
	case utf8.RuneCountInString(s) > MaxColumn:
		return reject("%s is %d characters long; the inbox holds at most %d", what, utf8.RuneCountInString(s), MaxColumn)
	}
	return nil
}

// CheckJSON refuses a body that is not one JSON document the database can
// store, with the reason.
func CheckJSON(b []byte) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return reject("the body is empty; send a JSON document")
	}
	if !utf8.Valid(b) {
		return reject("the body is not valid UTF-8; JSON text must be")
	}
	if !json.Valid(b) {
		var v any
		err := json.Unmarshal(b, &v)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return reject("the body is not JSON: %v (at byte %d)", se, se.Offset)
		}
		if err == nil {
			err = errors.New("not one JSON document")
		}
		return reject("the body is not JSON: %v", err)
	}
	// The outbox delivers objects and arrays: anything else would go dead
	// downstream, so it is refused here, where the sender hears it.
	switch t := bytes.TrimSpace(b); t[0] {
	case '{', '[':
	case '"':
		var s string
		_ = json.Unmarshal(t, &s)
		if inner := strings.TrimSpace(s); len(inner) > 0 && (inner[0] == '{' || inner[0] == '[') && json.Valid([]byte(inner)) {
			return reject("the body is a JSON string that holds JSON text: the JSON was encoded twice; send the object itself")
		}
		return reject("the body is a JSON string; send a JSON object or array")
	default:
		return reject("the body is a JSON %s; send a JSON object or array", jsonKind(t[0]))
	}
	// PostgreSQL's jsonb cannot hold the NUL character, which JSON may
	// escape as \u0000. Decoding is needed only when the escape appears.
	if bytes.Contains(b, []byte(`\u0000`)) && hasNUL(b) {
		return reject(`the body holds the character \u0000 in a string, which the inbox cannot store`)
	}
	return nil
}

func jsonKind(first byte) string {
	switch first {
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

func hasNUL(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if s, ok := tok.(string); ok && strings.ContainsRune(s, 0) {
			return true
		}
	}
}

// LookupFold finds name in h: exactly, else ignoring case.
func LookupFold(h map[string]string, name string) (string, bool) {
	if v, ok := h[name]; ok {
		return v, true
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		if strings.EqualFold(k, name) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "", false
	}
	sort.Strings(keys) // the same answer every time
	return h[keys[0]], true
}
