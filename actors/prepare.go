package actors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/queuebox/queuebox/actors/internal/destctl"
	"strings"
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
)

// prepared is a row ready for its sink, or the reason it never can be.
type prepared struct {
	row   dialects.Row
	route *routing.Route
	dest  *destctl.Handle
	msg   sinks.Message
	// obs hears how the row's delivery ends (its route's handle).
	obs RouteObserver
	// dead is set when the row can never be delivered.
	dead error
	// retry is set when this attempt failed before reaching the sink (a
	// transform that failed on this payload).
	retry error
}

// prepare routes a row and builds its message. A row that can never be
// delivered (no route, a destination that does not exist, a payload that is
// not a JSON object or array, headers that are not an object of strings)
// comes back dead, in words that tell the producer what to fix. A transform
// that fails on this payload fails this attempt only.
func (d *deliverer) prepare(r dialects.Row) prepared {
	p := prepared{row: r}
	p.route = d.router.Match(r.Topic)
	p.obs = d.routes.of(p.route)
	if p.route == nil {
		p.dead = fmt.Errorf("no route matches topic %q", r.Topic)
		return p
	}
	p.dest = d.sinks[p.route.Destination]
	if p.dest == nil {
		p.dead = fmt.Errorf("route %q sends to destination %q, which does not exist", p.route.Name, p.route.Destination)
		return p
	}
	if err := checkPayload(r.Payload, r.TypedJSON); err != nil {
		p.dead = err
		return p
	}
	headers, err := parseHeaders(r.Headers)
	if err != nil {
		p.dead = err
		return p
	}
	p.msg = sinks.Message{
		ID: r.ID.String(), Topic: r.Topic, Key: r.Key, AggregateType: r.AggregateType,
		Sequence: r.Sequence, Attempt: r.Attempt, CreatedAt: r.CreatedAt, Headers: headers, Body: r.Payload,
	}
	if p.route.Transform != nil {
		var key *string
		if r.Key != "" {
			key = &r.Key
		}
		body, err := p.route.Transform.Run(r.Payload, routing.Vars{
			Attempt: r.Attempt, ID: p.msg.ID, Topic: r.Topic, Key: key, AggregateType: r.AggregateType,
			Sequence: r.Sequence, CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339Nano), Headers: headers,
		})
		if err != nil {
			p.retry = err
			return p
		}
		p.msg.Body = body
	}
	return p
}

// checkPayload accepts a JSON object or array. typed says the database has
// already checked that b is valid JSON (a jsonb column), which saves
// reading all of it again.
func checkPayload(b []byte, typed bool) error {
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return errors.New("the payload is empty; write a JSON object or array")
	}
	if !typed && !json.Valid(t) {
		var v any
		err := json.Unmarshal(t, &v)
		return fmt.Errorf("the payload is not valid JSON (%v); write a JSON object or array", err)
	}
	switch t[0] {
	case '{', '[':
		return nil
	case '"':
		var s string
		_ = json.Unmarshal(t, &s)
		inner := strings.TrimSpace(s)
		if len(inner) > 0 && (inner[0] == '{' || inner[0] == '[') && json.Valid([]byte(inner)) {
			return errors.New("the payload is a JSON string that holds JSON text, not a JSON object: the JSON was encoded twice. Store the object itself (in PostgreSQL '{\"a\":1}'::jsonb, not to_jsonb('{\"a\":1}'::text))")
		}
		return errors.New("the payload is a JSON string; QueueBox delivers a JSON object or array")
	case 't', 'f':
		return errors.New("the payload is a JSON boolean; QueueBox delivers a JSON object or array")
	case 'n':
		return errors.New("the payload is JSON null; QueueBox delivers a JSON object or array")
	default:
		return errors.New("the payload is a JSON number; QueueBox delivers a JSON object or array")
	}
}

// parseHeaders reads the headers column: a JSON object of string values.
func parseHeaders(b []byte) (map[string]string, error) {
	t := bytes.TrimSpace(b)
	if len(t) == 0 || bytes.Equal(t, []byte("{}")) {
		return nil, nil
	}
	if t[0] != '{' {
		return nil, fmt.Errorf("headers must be a JSON object of string values, got %s", jsonKind(t))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(t, &raw); err != nil {
		return nil, fmt.Errorf("headers must be a JSON object of string values: %v", err)
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, fmt.Errorf("headers must be a JSON object of string values; %q is %s", k, jsonKind(v))
		}
		if k == "" || strings.ContainsAny(k, " :\r\n") || strings.ContainsAny(s, "\r\n") {
			return nil, fmt.Errorf("headers: %q is not a valid header (names have no spaces or colons, values no line breaks)", k)
		}
		out[k] = s
	}
	return out, nil
}

func jsonKind(b []byte) string {
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return "empty"
	}
	switch t[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
