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
	// unit is set when the row is one destination's part of a fan-out row.
	unit *unit
	// dead is set when the row can never be delivered; rowDead says that
	// the reason is the row's own (its payload or headers), not its
	// destination's: every unit of a fan-out row finds the same.
	dead    error
	rowDead bool
	// retry is set when this attempt failed before reaching the sink (a
	// transform that failed on this payload).
	retry error
}

// prepareClaimed prepares a claimed row, or its unit of a fan-out row.
func (d *deliverer) prepareClaimed(c *claimed) prepared {
	switch {
	case c.unit != nil:
		return d.prepareUnit(c.Row, c.unit)
	case c.route != nil:
		return d.prepareRouted(c.Row, c.route)
	}
	return d.prepare(c.Row)
}

// prepare routes a row and builds its message. A row that can never be
// delivered (no route, a filter that fails on it, a destination that does
// not exist, a payload that is not a JSON object or array, headers that
// are not an object of strings) comes back dead, in words that tell the
// producer what to fix. A transform that fails on this payload fails this
// attempt only. A copy (Row.CopyOf) goes to its own destination, with the
// transform of the route that sends its row there (prepareCopy).
func (d *deliverer) prepare(r dialects.Row) prepared {
	if r.CopyOf != nil {
		return d.prepareCopy(r)
	}
	p := prepared{row: r}
	var headers map[string]string
	checked := false
	if d.router.Filters() {
		route, h, err := d.routeFiltered(&r)
		if err != nil {
			p.obs, p.dead = d.routes.unrouted, err
			return p
		}
		p.route, headers, checked = route, h, true
	} else {
		p.route = d.router.Match(r.Topic)
	}
	if p.route == nil {
		p.obs, p.dead = d.routes.unrouted, fmt.Errorf("no route matches topic %q", r.Topic)
		return p
	}
	return d.toRoute(p, headers, checked)
}

// prepareRouted prepares a row whose route was found when it was claimed.
func (d *deliverer) prepareRouted(r dialects.Row, route *routing.Route) prepared {
	return d.toRoute(prepared{row: r, route: route}, nil, false)
}

// toRoute sends a routed row to its route's destination.
func (d *deliverer) toRoute(p prepared, headers map[string]string, checked bool) prepared {
	p.obs = d.routes.of(p.route)
	p.dest = d.sinks[p.route.Destination]
	if p.dest == nil {
		p.dead = fmt.Errorf("route %q sends to destination %q, which does not exist", p.route.Name, p.route.Destination)
		return p
	}
	return d.build(p, headers, checked, p.row.ID.String())
}

// prepareUnit prepares one destination's part of a fan-out row: its route
// was found when the row was claimed.
func (d *deliverer) prepareUnit(r dialects.Row, u *unit) prepared {
	p := prepared{row: r, unit: u, route: u.route, obs: u.obs, dest: d.sinks[u.dest]}
	if p.dest == nil {
		p.dead = fmt.Errorf("route %q sends to destination %q, which does not exist", u.route.Name, u.dest)
		return p
	}
	return d.build(p, nil, false, r.ID.String())
}

// prepareCopy prepares a copy: the message of its outbox row (the row's id
// is the message id) for the copy's destination.
//
// Its route (for the transform and the metrics) is the one that sent the
// row to the copy's destination: with route filters, the first route that
// sends there and accepts the row (routing.Router.MatchRowTo); without, or
// when no route sends the row there today, the first route whose pattern
// matches. A filter that fails on the copy's row sends the copy dead, as
// it sends a row dead.
func (d *deliverer) prepareCopy(r dialects.Row) prepared {
	dest := r.CopyOf.Destination
	p := prepared{row: r}
	var headers map[string]string
	checked := false
	if d.router.Filters() {
		route, h, err := d.copyRoute(&r)
		if err != nil {
			p.obs, p.dead = d.routes.to(d.router.Match(r.Topic), dest), err
			return p
		}
		p.route, headers, checked = route, h, true
	}
	if p.route == nil {
		p.route = d.router.Match(r.Topic)
	}
	p.obs = d.routes.to(p.route, dest)
	p.dest = d.sinks[dest]
	if p.dest == nil {
		p.dead = fmt.Errorf("this copy of row %s goes to destination %q, which no longer exists in the configuration; add it back and replay the copy, or leave it dead",
			r.CopyOf.RowID, dest)
		return p
	}
	return d.build(p, headers, checked, r.CopyOf.RowID.String())
}

// copyRoute finds the route that sent a copy's row to the copy's
// destination, running the filters with the row's variables (its id is
// the outbox row's).
func (d *deliverer) copyRoute(r *dialects.Row) (*routing.Route, map[string]string, error) {
	headers, err := checkRow(r)
	if err != nil {
		return nil, nil, err
	}
	route, err := d.router.MatchRowTo(r.Payload, vars(r, r.CopyOf.RowID.String(), headers), r.CopyOf.Destination)
	if err != nil {
		return nil, nil, fmt.Errorf("the filter of a route to %q failed on this row, so its route cannot be told (fix the filter or the row, then replay the copy): %w", r.CopyOf.Destination, err)
	}
	return route, headers, nil
}

// RowRoute is the route of r under router, its filters run with the row's
// variables as the relay runs them: what the operator commands that select
// rows by destination ask of a row whose topic alone does not tell. nil
// when no route matches; an error when the row cannot be routed (a filter
// failed, the payload or headers are not valid).
func RowRoute(router *routing.Router, r *dialects.Row) (*routing.Route, error) {
	if !router.Filters() {
		return router.Match(r.Topic), nil
	}
	d := deliverer{router: router}
	route, _, err := d.routeFiltered(r)
	return route, err
}

// routeFiltered finds the route of a row when some route has a filter: the
// filters read the payload and the variables, so the payload and headers
// are checked first. No route is not an error here (nil, nil).
func (d *deliverer) routeFiltered(r *dialects.Row) (*routing.Route, map[string]string, error) {
	headers, err := checkRow(r)
	if err != nil {
		return nil, nil, err
	}
	route, err := d.router.MatchRow(r.Payload, vars(r, r.ID.String(), headers))
	if err != nil {
		return nil, nil, fmt.Errorf("the route's filter failed on this row, so it cannot be routed (fix the filter or the row, then replay it): %w", err)
	}
	return route, headers, nil
}

// build checks the payload and headers (unless checked already) and builds
// the message, with id as its id, through the route's transform.
func (d *deliverer) build(p prepared, headers map[string]string, checked bool, id string) prepared {
	r := &p.row
	if !checked {
		h, err := checkRow(r)
		if err != nil {
			p.dead, p.rowDead = err, true
			return p
		}
		headers = h
	}
	p.msg = sinks.Message{
		ID: id, Topic: r.Topic, Key: r.Key, AggregateType: r.AggregateType,
		Sequence: r.Sequence, Attempt: r.Attempt, CreatedAt: r.CreatedAt, Headers: headers, Body: r.Payload,
	}
	if p.route != nil && p.route.Transform != nil {
		body, err := p.route.Transform.Run(r.Payload, vars(r, id, headers))
		if err != nil {
			p.retry = err
			return p
		}
		p.msg.Body = body
	}
	return p
}

// vars are the variables filters and transforms read.
func vars(r *dialects.Row, id string, headers map[string]string) routing.Vars {
	var key *string
	if r.Key != "" {
		k := r.Key // a copy: a pointer into the row would move the row to the heap
		key = &k
	}
	return routing.Vars{
		Attempt: r.Attempt, ID: id, Topic: r.Topic, Key: key, AggregateType: r.AggregateType,
		Sequence: r.Sequence, CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339Nano), Headers: headers,
	}
}

// checkRow checks the payload of r and reads its headers: what a row must
// pass before a filter or a transform reads it.
func checkRow(r *dialects.Row) (map[string]string, error) {
	if err := checkPayload(r.Payload, r.TypedJSON); err != nil {
		return nil, err
	}
	return parseHeaders(r.Headers)
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
