package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/routing"
)

// Source is where the text of a filter came from. Messages name each input
// the way a person wrote it there.
type Source int

// The sources of filter text.
const (
	Flags Source = iota // queuebox replay --state dead
	Query               // GET /api/rows?state=dead
	JSON                // POST /api/replay {"states": ["dead"]}
)

// input is one input of a filter or of a request around it.
type input int

const (
	inID input = iota
	inState
	inTopic
	inKey
	inSince
	inUntil
	inErrorContains
	inLimit
	inDryRun
)

var inputNames = map[Source][]string{
	Flags: {"--id", "--state", "--topic", "--key", "--since", "--until", "--error-contains", "--limit", "--dry-run"},
	Query: {"id", "state", "topic", "key", "since", "until", "errorContains", "limit", "dryRun"},
	JSON:  {"ids", "states", "topic", "key", "since", "until", "errorContains", "limit", "dryRun"},
}

func (s Source) name(i input) string { return inputNames[s][i] }

// FilterText is a row filter as a person writes it: text, before
// validation. Its JSON form is the body of a replay request.
type FilterText struct {
	IDs           []string `json:"ids,omitempty"`
	States        []string `json:"states,omitempty"`
	Topic         string   `json:"topic,omitempty"`
	Key           string   `json:"key,omitempty"`
	Since         string   `json:"since,omitempty"`
	Until         string   `json:"until,omitempty"`
	ErrorContains string   `json:"errorContains,omitempty"`
}

// Purpose is what a filter selects rows for. It decides which states the
// filter may name and whether it may select everything.
type Purpose struct {
	verb   string
	states []dialects.State
	// needsSelection refuses a filter that names nothing, so that an
	// accidental bare replay changes nothing.
	needsSelection bool
}

var (
	// ForReplay selects rows to put back to pending: dead rows (the
	// default), or delivered ones when asked. It must name some rows.
	ForReplay = Purpose{verb: "replay", states: []dialects.State{dialects.Dead, dialects.Delivered}, needsSelection: true}
	// ForDeadRows selects dead rows to look at.
	ForDeadRows = Purpose{verb: "dead list", states: []dialects.State{dialects.Dead}}
	// ForRows selects rows in any state to look at.
	ForRows = Purpose{verb: "the row listing", states: dialects.States}
)

// InputError is filter input that cannot be used. It names the input as it
// was written, the value, why it cannot be used and what to write instead.
type InputError struct {
	Input  string // "--state", "state", "states"; "" for the filter as a whole
	Value  string // "" when the message needs none
	Reason string
	Fix    string
}

func (e *InputError) Error() string {
	var b strings.Builder
	if e.Input != "" {
		b.WriteString(e.Input)
		if e.Value != "" {
			fmt.Fprintf(&b, " %q", e.Value)
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	if e.Fix != "" {
		b.WriteString("; ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

func stateNames(states []dialects.State) string {
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = string(s)
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Filter validates the text and returns the filter the dialects run. now
// anchors durations such as "24h" (since 24 hours ago).
func (t FilterText) Filter(src Source, p Purpose, now time.Time) (dialects.Filter, error) {
	var out dialects.Filter
	for _, s := range t.IDs {
		id, err := uuid.Parse(strings.TrimSpace(s))
		if err != nil {
			return out, &InputError{Input: src.name(inID), Value: s, Reason: "is not a row id",
				Fix: "give the id of a row, a UUID such as 0b7e3f4e-8c1a-4d2e-9f3a-1b2c3d4e5f60 (queuebox dead list prints them)"}
		}
		out.IDs = append(out.IDs, id)
	}
	for _, s := range t.States {
		st := dialects.State(strings.TrimSpace(s))
		allowed := false
		for _, a := range p.states {
			allowed = allowed || a == st
		}
		switch {
		case allowed:
			out.States = append(out.States, st)
		case st.Valid():
			return out, &InputError{Input: src.name(inState), Value: s, Reason: fmt.Sprintf("%s does not select %s rows", p.verb, st),
				Fix: "use " + stateNames(p.states)}
		default:
			return out, &InputError{Input: src.name(inState), Value: s, Reason: "is not a state",
				Fix: "use " + stateNames(p.states)}
		}
	}
	if t.Topic != "" {
		pat, err := routing.CompilePattern(t.Topic)
		if err != nil {
			return out, &InputError{Input: src.name(inTopic), Reason: err.Error()}
		}
		out.TopicMatch = pat.Match
	}
	if t.Key != "" {
		k := t.Key
		out.Key = &k
	}
	var err error
	if out.Since, err = parseWhen(src.name(inSince), t.Since, now); err != nil {
		return out, err
	}
	if out.Until, err = parseWhen(src.name(inUntil), t.Until, now); err != nil {
		return out, err
	}
	if out.Since != nil && out.Until != nil && !out.Until.After(*out.Since) {
		return out, &InputError{Input: src.name(inUntil), Value: t.Until,
			Reason: fmt.Sprintf("is not after %s %q, so no row can match", src.name(inSince), t.Since),
			Fix:    untilFix(src, t)}
	}
	out.ErrorContains = t.ErrorContains
	if p.needsSelection && len(out.IDs) == 0 && len(out.States) == 0 && out.TopicMatch == nil && out.Key == nil &&
		out.Since == nil && out.Until == nil && out.ErrorContains == "" {
		return out, &InputError{Reason: sayWhichRows,
			Fix: fmt.Sprintf("give %s, or at least one filter (%s replays every dead row)", src.name(inID), stateExample(src))}
	}
	return out, nil
}

// sayWhichRows is the refusal of a filter that names no rows where it
// must: a destination, which the filter itself does not hold, names some.
const sayWhichRows = "say which rows"

func stateExample(src Source) string {
	switch src {
	case Query:
		return "state=dead"
	case JSON:
		return `"states": ["dead"]`
	}
	return "--state dead"
}

// parseWhen reads an RFC 3339 time, or a duration that far before now.
func parseWhen(name, s string, now time.Time) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return &t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		t := now.Add(-d)
		return &t, nil
	}
	return nil, &InputError{Input: name, Value: s, Reason: "is neither an RFC 3339 time nor a duration",
		Fix: "write a time such as 2025-01-31T12:00:00Z, or how long ago such as 24h or 90m"}
}

// MaxLimit is the most rows one listing returns.
const MaxLimit = 10000

// CheckLimit validates how many rows a listing may return.
func CheckLimit(src Source, n int) error {
	if n < 1 || n > MaxLimit {
		return &InputError{Input: src.name(inLimit), Value: strconv.Itoa(n), Reason: "is out of range",
			Fix: fmt.Sprintf("use a number from 1 to %d", MaxLimit)}
	}
	return nil
}

// ParseLimit reads the limit of a listing from text; "" is def.
func ParseLimit(src Source, s string, def int) (int, error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, &InputError{Input: src.name(inLimit), Value: s, Reason: "is not a whole number",
			Fix: fmt.Sprintf("use a number from 1 to %d", MaxLimit)}
	}
	return n, CheckLimit(src, n)
}

// RoutedDestinations let a request name a destination, as --destination
// does on the command line: the configured destinations' names.
type RoutedDestinations struct {
	Names []string
}

// check refuses a name that is none of ds; input is how the request spells
// the parameter. An empty name selects nothing more, as an empty topic
// does.
func (ds *RoutedDestinations) check(input, name string) error {
	if name == "" || slices.Contains(ds.Names, name) {
		return nil
	}
	names := slices.Sorted(slices.Values(ds.Names))
	return &InputError{Input: input, Value: name, Reason: "is not a destination of the configuration",
		Fix: "the destinations are " + strings.Join(names, ", ")}
}

// FilterFromQuery reads a filter from a URL query: id and state may repeat.
// With ds, it takes destination too (one of ds, which the caller reads
// from q: the filter does not hold it). A
// parameter that is neither a filter's nor one of extra (the other
// parameters of the request, such as limit) is an error, so that a typo
// does not silently widen the selection.
func FilterFromQuery(q url.Values, p Purpose, now time.Time, ds *RoutedDestinations, extra ...string) (dialects.Filter, error) {
	known := map[string]bool{}
	for _, i := range []input{inID, inState, inTopic, inKey, inSince, inUntil, inErrorContains} {
		known[Query.name(i)] = true
	}
	if ds != nil {
		known["destination"] = true
	}
	for _, e := range extra {
		known[e] = true
	}
	for k := range q {
		if !known[k] {
			return dialects.Filter{}, &InputError{Input: k, Reason: "is not a parameter of this request",
				Fix: "the parameters are " + strings.Join(sortedKeys(known), ", ")}
		}
	}
	one := func(i input) (string, error) {
		vs := q[Query.name(i)]
		if len(vs) > 1 {
			return "", &InputError{Input: Query.name(i), Reason: "is given more than once", Fix: "give it once"}
		}
		if len(vs) == 0 {
			return "", nil
		}
		return vs[0], nil
	}
	var t FilterText
	t.IDs, t.States = q[Query.name(inID)], q[Query.name(inState)]
	for i, dst := range map[input]*string{inTopic: &t.Topic, inKey: &t.Key, inSince: &t.Since, inUntil: &t.Until, inErrorContains: &t.ErrorContains} {
		v, err := one(i)
		if err != nil {
			return dialects.Filter{}, err
		}
		*dst = v
	}
	f, err := t.Filter(Query, p, now)
	if ds == nil || err != nil {
		return f, err
	}
	switch dest := q["destination"]; {
	case len(dest) > 1:
		return f, &InputError{Input: "destination", Reason: "is given more than once", Fix: "give it once"}
	case len(dest) == 1:
		return f, ds.check("destination", dest[0])
	}
	return f, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ReplayRequest is a replay as the admin API receives it: the filter of
// the command line as JSON, dryRun, and the destination whose part of the
// rows to replay ("" the rows themselves; see ReplayDestination).
type ReplayRequest struct {
	Filter      dialects.Filter
	DryRun      bool
	Destination string
}

// ReplayFromJSON reads a replay request body:
//
//	{"states": ["dead"], "topic": "order.#", "since": "24h", "dryRun": true}
//
// With ds, "destination" names the destination whose part of the rows to
// replay, as --destination does. An unknown field is an error, so that a typo does not
// widen the selection.
func ReplayFromJSON(r io.Reader, now time.Time, ds *RoutedDestinations) (ReplayRequest, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxBody+1))
	if err != nil {
		return ReplayRequest{}, &InputError{Reason: "the body cannot be read: " + err.Error(), Fix: "send it again"}
	}
	if len(data) > maxBody {
		return ReplayRequest{}, &InputError{Reason: fmt.Sprintf("the body is longer than %d bytes", maxBody), Fix: "send a filter, not a list of every row"}
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return ReplayRequest{}, &InputError{Reason: "the body is empty", Fix: replayExample}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return ReplayRequest{}, &InputError{Reason: "the body is not a JSON object: " + err.Error(), Fix: replayExample}
	}
	known := maps.Clone(replayFields)
	if ds != nil {
		known["destination"] = true
	}
	for k := range fields {
		if !known[k] {
			return ReplayRequest{}, &InputError{Input: k, Reason: "is not a field of a replay request",
				Fix: "the fields are " + strings.Join(sortedKeys(known), ", ")}
		}
	}
	var body struct {
		FilterText
		DryRun      bool   `json:"dryRun"`
		Destination string `json:"destination"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			// Field is the Go path of an embedded field ("FilterText.states").
			field := te.Field[strings.LastIndex(te.Field, ".")+1:]
			want := "text"
			switch field {
			case "ids", "states":
				want = `a list of text, such as ["dead"]`
			case "dryRun":
				want = "true or false"
			}
			return ReplayRequest{}, &InputError{Input: field, Reason: "has the wrong type (" + te.Value + ")", Fix: "give " + want}
		}
		return ReplayRequest{}, &InputError{Reason: "the body cannot be read: " + err.Error(), Fix: replayExample}
	}
	f, err := body.Filter(JSON, ForReplay, now)
	var ie *InputError
	if body.Destination != "" && errors.As(err, &ie) && ie.Reason == sayWhichRows {
		err = nil // the destination selects the rows
	}
	if err == nil && ds != nil {
		err = ds.check("destination", body.Destination)
	}
	return ReplayRequest{Filter: f, DryRun: body.DryRun, Destination: body.Destination}, err
}

// maxBody bounds a request body: a filter is small.
const maxBody = 1 << 20

const replayExample = `send an object such as {"states": ["dead"], "topic": "order.#", "dryRun": true}`

var replayFields = map[string]bool{"ids": true, "states": true, "topic": true, "key": true, "since": true,
	"until": true, "errorContains": true, "dryRun": true}

// untilFix says how to order --since and --until; where both are durations
// it reminds that a duration counts back from now, so the longer one comes
// first.
func untilFix(src Source, t FilterText) string {
	fix := fmt.Sprintf("give %s a later time than %s", src.name(inUntil), src.name(inSince))
	_, e1 := time.ParseDuration(t.Since)
	_, e2 := time.ParseDuration(t.Until)
	if e1 == nil && e2 == nil {
		fix += fmt.Sprintf(" (a duration counts back from now: %s %s %s %s)", src.name(inSince), t.Until, src.name(inUntil), t.Since)
	}
	return fix
}
