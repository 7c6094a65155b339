package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
)

// DeadGroupWindow is how many of the newest dead rows the page groups. It
// bounds the work on a table with millions of dead rows; the rows beyond it
// show up once the newer ones are replayed or deleted.
const DeadGroupWindow = 1000

// DeadGroup is the dead rows of one destination that failed with the same
// error, once ids and numbers are taken out of it; or, with Copies, the
// dead copies of one destination that did.
type DeadGroup struct {
	// ID names the group on the command line (queuebox replay --group) and
	// in the API: GroupID of its destination and error, so it stays the
	// same from one look to the next while both do.
	ID string `json:"id"`
	// Destination and Route are where the group's topics route to today;
	// both empty for rows that match no route. A group of copies has its
	// copies' destination.
	Destination string `json:"destination"`
	Route       string `json:"route"`
	// Copies: the group is of dead copies, each one destination's part of
	// a fan-out row whose other destinations are not dead. IDs are then
	// the rows' ids, and a replay of the group replays Destination's
	// copies only.
	Copies bool `json:"copies,omitempty"`
	// Error is the normalised error: ids become <id>, numbers # (an HTTP
	// status stays).
	Error  string    `json:"error"`
	Rows   int64     `json:"rows"`
	Newest time.Time `json:"newest"`
	// Topics are the group's topics, sorted.
	Topics []string `json:"topics"`
	// Example is the group's newest row, with its error as written.
	Example DeadExample `json:"example"`
	// IDs are every row of the group within the window, newest first: the
	// page replays the group by them.
	IDs []uuid.UUID `json:"ids"`
	// ReplayWarning, when set, says why a replay would send the group's
	// rows dead again at once, and what a replay would do: the page and
	// `queuebox replay --group` show it before they replay.
	ReplayWarning *ReplayWarning `json:"replayWarning,omitempty"`
}

// ReplayWarning is why replaying a group now would not cure it.
type ReplayWarning struct {
	// Cause is what persists ("no route matches topic user.created").
	Cause string `json:"cause"`
	// Outcome is what a replay would do, and what to do first.
	Outcome string `json:"outcome"`
}

func (w ReplayWarning) String() string { return w.Cause + ". " + w.Outcome }

// FinalStatus reports whether a destination takes an HTTP status as final
// (its nonRetryableStatus): a row refused so goes dead at its first try.
type FinalStatus func(destination string, status int) bool

// GroupID names the group of a destination ("" for rows that match no
// route) and a normalised error: "g-" and 8 hex digits of their hash.
func GroupID(destination, normalisedError string) string {
	sum := sha256.Sum256([]byte(destination + "\x00" + normalisedError))
	return "g-" + hex.EncodeToString(sum[:4])
}

// CopyGroupID names the group of dead copies of a destination and a
// normalised error, apart from the group of dead rows of the same two.
func CopyGroupID(destination, normalisedError string) string {
	return GroupID(destination, normalisedError+"\x00copies")
}

// statusRE finds the HTTP status at the start of an HTTP destination's
// error ("HTTP 410 Gone: ...").
var statusRE = regexp.MustCompile(`^HTTP (\d{3})\b`)

// replayWarning says why a replay of g would fail again at once: its
// topics match no route today, or its destination refused the rows with a
// status it takes as final. Other failures may well pass on a replay
// (a destination that was down, rows that ran out of tries).
func replayWarning(g DeadGroup, final FinalStatus) *ReplayWarning {
	if g.Destination == "" {
		which := "topic " + strconv.Quote(g.Topics[0])
		if len(g.Topics) > 1 {
			which = fmt.Sprintf("the topics %s", quoteAll(g.Topics))
		}
		return &ReplayWarning{
			Cause:   "No route matches " + which + " in the configuration",
			Outcome: "A replay sends every row dead again at once, with the same error. Add a route for them first (routes in the configuration, then restart the relays), and replay then",
		}
	}
	m := statusRE.FindStringSubmatch(g.Error)
	if m == nil || final == nil {
		return nil
	}
	status, _ := strconv.Atoi(m[1])
	if !final(g.Destination, status) {
		return nil
	}
	return &ReplayWarning{
		Cause: fmt.Sprintf("%s answered HTTP %d, which its nonRetryableStatus makes final", g.Destination, status),
		Outcome: fmt.Sprintf("If it still answers %d for these rows, a replay sends each of them dead again after one try. "+
			"Replay once %s accepts them", status, g.Destination),
	}
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// Group finds the group of id among gs.
func (gs DeadGroups) Group(id string) (DeadGroup, bool) {
	for _, g := range gs.Groups {
		if g.ID == id {
			return g, true
		}
	}
	return DeadGroup{}, false
}

// DeadExample is one row of a group.
type DeadExample struct {
	ID    uuid.UUID `json:"id"`
	Topic string    `json:"topic"`
	Error string    `json:"error"`
}

// DeadGroups is the grouping of the newest dead rows and dead copies.
type DeadGroups struct {
	// Window is the most rows grouped, and the most copies; Grouped and
	// CopiesGrouped how many were.
	Window        int         `json:"window"`
	Grouped       int64       `json:"grouped"`
	CopiesGrouped int64       `json:"copiesGrouped"`
	Groups        []DeadGroup `json:"groups"`
}

// RouteOf names the route and destination a topic goes to ("", "" when no
// route matches).
type RouteOf func(topic string) (route, destination string)

// GroupDead groups the newest window dead rows by destination and
// normalised error, and the newest window dead copies by their destination
// and normalised error, the largest group first, and warns of the groups
// whose failure a replay would meet again at once (final may be nil: only
// rows without a route are warned of then).
func GroupDead(ctx context.Context, d dialects.Dialect, routeOf RouteOf, final FinalStatus, window int) (DeadGroups, error) {
	raw, err := d.OutboxDeadGroups(ctx, window)
	if err != nil {
		return DeadGroups{}, err
	}
	copies, err := listCopies(ctx, d, dialects.CopyFilter{Filter: dialects.Filter{States: []dialects.State{dialects.Dead}}}, nil, window)
	if err != nil {
		return DeadGroups{}, fmt.Errorf("listing the dead copies of fan-out rows: %w", err)
	}
	gs := mergeDeadGroups(raw, routeOf, window)
	gs.Groups = append(gs.Groups, groupCopies(copies, routeOf)...)
	gs.CopiesGrouped = int64(len(copies))
	sortGroups(gs.Groups)
	for i := range gs.Groups {
		gs.Groups[i].ReplayWarning = replayWarning(gs.Groups[i], final)
	}
	return gs, nil
}

func mergeDeadGroups(raw []dialects.DeadGroup, routeOf RouteOf, window int) DeadGroups {
	type key struct{ dest, err string }
	byKey := map[key]*DeadGroup{}
	topics := map[key]map[string]bool{}
	out := DeadGroups{Window: window, Groups: []DeadGroup{}}
	for _, r := range raw {
		route, dest := "", ""
		if routeOf != nil {
			route, dest = routeOf(r.Topic)
		}
		k := key{dest, NormaliseError(r.Error)}
		g := byKey[k]
		if g == nil {
			g = &DeadGroup{ID: GroupID(dest, k.err), Destination: dest, Route: route, Error: k.err}
			byKey[k] = g
			topics[k] = map[string]bool{}
		}
		out.Grouped += r.Rows
		g.Rows += r.Rows
		topics[k][r.Topic] = true
		if r.Newest.After(g.Newest) && len(r.IDs) > 0 {
			g.Newest = r.Newest
			g.Example = DeadExample{ID: r.IDs[0], Topic: r.Topic, Error: r.Error}
		}
		g.IDs = append(g.IDs, r.IDs...)
	}
	for k, g := range byKey {
		for t := range topics[k] {
			g.Topics = append(g.Topics, t)
		}
		sort.Strings(g.Topics)
		if len(topics[k]) > 1 {
			g.Route = "" // topics of one destination may come through several routes
		}
		out.Groups = append(out.Groups, *g)
	}
	sortGroups(out.Groups)
	return out
}

// groupCopies groups dead copies (newest first) by destination and
// normalised error. Route is the route of the group's topic when it has
// one topic.
func groupCopies(copies []dialects.CopyListed, routeOf RouteOf) []DeadGroup {
	type key struct{ dest, err string }
	byKey := map[key]*DeadGroup{}
	topics := map[key]map[string]bool{}
	var order []key
	for _, c := range copies {
		le := ""
		if c.LastError != nil {
			le = *c.LastError
		}
		k := key{c.Destination, NormaliseError(le)}
		g := byKey[k]
		if g == nil {
			g = &DeadGroup{ID: CopyGroupID(k.dest, k.err), Destination: k.dest, Error: k.err, Copies: true,
				Newest: c.UpdatedAt, Example: DeadExample{ID: c.RowID, Topic: c.Topic, Error: le}}
			if routeOf != nil {
				g.Route, _ = routeOf(c.Topic)
			}
			byKey[k], topics[k] = g, map[string]bool{}
			order = append(order, k)
		}
		g.Rows++
		g.IDs = append(g.IDs, c.RowID)
		topics[k][c.Topic] = true
	}
	out := make([]DeadGroup, 0, len(order))
	for _, k := range order {
		g := byKey[k]
		for t := range topics[k] {
			g.Topics = append(g.Topics, t)
		}
		sort.Strings(g.Topics)
		if len(g.Topics) > 1 {
			g.Route = ""
		}
		out = append(out, *g)
	}
	return out
}

// sortGroups puts the largest group first, then by destination, error and
// rows before copies.
func sortGroups(gs []DeadGroup) {
	sort.Slice(gs, func(i, j int) bool {
		a, b := gs[i], gs[j]
		if a.Rows != b.Rows {
			return a.Rows > b.Rows
		}
		if a.Destination != b.Destination {
			return a.Destination < b.Destination
		}
		if a.Error != b.Error {
			return a.Error < b.Error
		}
		return !a.Copies && b.Copies
	})
}

var (
	uuidRE   = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	hexRE    = regexp.MustCompile(`(?i)\b(?:0x)?[0-9a-f]{8,}\b`)
	numberRE = regexp.MustCompile(`(?i)(\b(?:HTTP(?:/\d(?:\.\d)?)?|status(?: code)?)[ :=]+)?\d+(?:[.,:]\d+)*`)
	spacesRE = regexp.MustCompile(`\s+`)
)

// NormaliseError takes what differs from row to row out of an error, so
// that rows that failed for the same reason group together: UUIDs and hex
// ids of 8 characters or more become <id>, other numbers #. The status of
// "HTTP 503" or "status 503" stays: it is the reason, not an id.
func NormaliseError(s string) string {
	s = uuidRE.ReplaceAllString(s, "<id>")
	s = hexRE.ReplaceAllStringFunc(s, func(h string) string {
		// A hex id mixes digits and letters; digits alone are a number
		// (below), letters alone a word.
		if strings.ContainsAny(h, "0123456789") && strings.ContainsAny(strings.ToLower(strings.TrimPrefix(h, "0x")), "abcdef") {
			return "<id>"
		}
		return h
	})
	s = numberRE.ReplaceAllStringFunc(s, func(n string) string {
		m := numberRE.FindStringSubmatch(n)
		if m[1] != "" {
			digits := n[len(m[1]):]
			if len(digits) == 3 && digits[0] >= '1' && digits[0] <= '5' {
				return n
			}
			return m[1] + "#"
		}
		return "#"
	})
	return strings.TrimSpace(spacesRE.ReplaceAllString(s, " "))
}
