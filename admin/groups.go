package admin

import (
	"context"
	"regexp"
	"sort"
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
// error, once ids and numbers are taken out of it.
type DeadGroup struct {
	// Destination and Route are where the group's topics route to today;
	// both empty for rows that match no route.
	Destination string `json:"destination"`
	Route       string `json:"route"`
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
}

// DeadExample is one row of a group.
type DeadExample struct {
	ID    uuid.UUID `json:"id"`
	Topic string    `json:"topic"`
	Error string    `json:"error"`
}

// DeadGroups is the grouping of the newest dead rows.
type DeadGroups struct {
	// Window is the most rows grouped; Grouped how many were.
	Window  int         `json:"window"`
	Grouped int64       `json:"grouped"`
	Groups  []DeadGroup `json:"groups"`
}

// RouteOf names the route and destination a topic goes to ("", "" when no
// route matches).
type RouteOf func(topic string) (route, destination string)

// GroupDead groups the newest window dead rows by destination and
// normalised error, the largest group first.
func GroupDead(ctx context.Context, d dialects.Operator, routeOf RouteOf, window int) (DeadGroups, error) {
	raw, err := d.OutboxDeadGroups(ctx, window)
	if err != nil {
		return DeadGroups{}, err
	}
	return mergeDeadGroups(raw, routeOf, window), nil
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
			g = &DeadGroup{Destination: dest, Route: route, Error: k.err}
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
	sort.Slice(out.Groups, func(i, j int) bool {
		a, b := out.Groups[i], out.Groups[j]
		if a.Rows != b.Rows {
			return a.Rows > b.Rows
		}
		if a.Destination != b.Destination {
			return a.Destination < b.Destination
		}
		return a.Error < b.Error
	})
	return out
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
