package admin

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
)

// Fan-out: a route with several destinations delivers each row to each of
// them in the row's pass. A destination whose delivery did not end well in
// that pass gets a copy (dialects.Copies), which keeps its own state,
// tries and last error; a destination delivered in the pass has none: the
// delivered row tells it. The operator surfaces show and act on each
// destination's part of a row on its own: rows show and the row detail
// list each destination's state, dead list and the groups list dead
// copies next to dead rows, and a replay with a destination replays that
// destination's copies only.

// Routes tells where today's routes send rows: for the views, and for the
// commands that select rows by destination.
type Routes interface {
	// Targets names the destinations of each route a row of topic may take
	// (each route's in configuration order; none when no route matches).
	// byRow is true when route filters decide by each row's payload and
	// variables which one it takes: RowTargets tells a row's.
	Targets(topic string) (routes [][]string, byRow bool)
	// RowTargets names the destinations of r's route, its filters run on
	// it; none when no route takes it.
	RowTargets(r dialects.Row) []string
}

// TargetsOf names the destinations the route of a topic sends each row to
// today, in configuration order: one for a route to one destination, two
// or more for a fan-out route, none when no route matches. It is the
// Routes of routes without filters.
type TargetsOf func(topic string) []string

// Targets is the topic's one route's destinations.
func (t TargetsOf) Targets(topic string) ([][]string, bool) {
	if ds := t(topic); len(ds) > 0 {
		return [][]string{ds}, false
	}
	return nil, false
}

// RowTargets is the destinations of the row's topic.
func (t TargetsOf) RowTargets(r dialects.Row) []string { return t(r.Topic) }

// TargetsFromRouteOf is the TargetsOf of routes that each send to one
// destination: the one routeOf names.
func TargetsFromRouteOf(routeOf RouteOf) TargetsOf {
	return func(topic string) []string {
		if routeOf == nil {
			return nil
		}
		if _, d := routeOf(topic); d != "" {
			return []string{d}
		}
		return nil
	}
}

// routedTo narrows f to the rows whose route today sends them to
// destinations that want accepts: by topic where the topic tells, by each
// row (its route's filters run on it) where filters decide.
func routedTo(routes Routes, f dialects.Filter, want func(targets []string) bool) dialects.Filter {
	// Each topic is asked once: a walk asks of every row.
	type verdict struct{ possible, byRow bool }
	seen := map[string]verdict{}
	of := func(t string) verdict {
		v, ok := seen[t]
		if !ok {
			sets, byRow := routes.Targets(t)
			v = verdict{slices.ContainsFunc(sets, want), byRow}
			seen[t] = v
		}
		return v
	}
	topic := f.TopicMatch
	f.TopicMatch = func(t string) bool { return (topic == nil || topic(t)) && of(t).possible }
	f.Rows = &dialects.RowMatch{
		ByRow: func(t string) bool { return of(t).byRow },
		Keep:  func(r dialects.Row) bool { return want(routes.RowTargets(r)) },
	}
	return f
}

// sendsTo narrows f to the rows whose route sends them to destination:
// among others (fanOut), or alone (!fanOut).
func sendsTo(routes Routes, f dialects.Filter, destination string, fanOut bool) dialects.Filter {
	return routedTo(routes, f, func(ds []string) bool {
		return (len(ds) > 1) == fanOut && slices.Contains(ds, destination)
	})
}

// copyPage is how many copies one CopyList page of a walk reads.
const copyPage = 500

// listCopies returns up to limit copies that f selects, newest update
// first, starting past the position after when one is given (every copy
// at it too, as a listing's cursor), as dialects.List does for rows (it
// applies the topic pattern above the dialect). Without States, f selects
// dead copies.
func listCopies(ctx context.Context, d dialects.Copies, f dialects.CopyFilter, after *dialects.Cursor, limit int) ([]dialects.CopyListed, error) {
	if len(f.States) == 0 {
		f.States = []dialects.State{dialects.Dead}
	}
	p := dialects.CopyListParams{Filter: f, After: after}
	var out []dialects.CopyListed
	for len(out) < limit {
		p.Limit = copyPage
		if f.TopicMatch == nil {
			p.Limit = limit - len(out)
		}
		cs, err := d.CopyList(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			if f.TopicMatch == nil || f.TopicMatch(c.Topic) {
				out = append(out, c)
			}
		}
		if len(cs) < p.Limit {
			break
		}
		p.After, p.AfterDestination = afterCopy(cs[len(cs)-1])
	}
	return out[:min(len(out), limit)], nil
}

// afterCopy is where a page of copies that ends at c goes on: copies of
// one row share its position, and are told apart by their destination.
func afterCopy(c dialects.CopyListed) (*dialects.Cursor, string) {
	next := dialects.CursorOf(c.ListedRow)
	return &next, c.Destination
}

// walkCopies hands each page of the copies f selects (topic pattern
// applied) to each, newest update first. each may change the copies it is
// given: the walk goes on past the last copy of the page it read.
func walkCopies(ctx context.Context, d dialects.Copies, f dialects.CopyFilter, each func([]dialects.CopyListed) error) error {
	p := dialects.CopyListParams{Filter: f, Limit: copyPage}
	for {
		cs, err := d.CopyList(ctx, p)
		if err != nil {
			return err
		}
		kept := make([]dialects.CopyListed, 0, len(cs))
		for _, c := range cs {
			if f.TopicMatch == nil || f.TopicMatch(c.Topic) {
				kept = append(kept, c)
			}
		}
		if len(kept) > 0 {
			if err := each(kept); err != nil {
				return err
			}
		}
		if len(cs) < copyPage {
			return nil
		}
		p.After, p.AfterDestination = afterCopy(cs[len(cs)-1])
	}
}

// walkRows hands each chunk of the ids of the rows f selects (f.States
// set, topic pattern applied) to each, in sequence order.
func walkRows(ctx context.Context, d dialects.Operator, f dialects.Filter, each func([]uuid.UUID) error) error {
	after := int64(-1 << 62)
	for {
		chunk, err := d.OutboxSelect(ctx, dialects.SelectParams{Filter: f, AfterSequence: after, Limit: copyPage})
		if err != nil {
			return err
		}
		keep, err := dialects.Keep(ctx, d, f, len(chunk), func(i int) (uuid.UUID, string) { return chunk[i].ID, chunk[i].Topic })
		if err != nil {
			return err
		}
		ids := make([]uuid.UUID, 0, len(chunk))
		for i, r := range chunk {
			after = r.Sequence
			if keep[i] {
				ids = append(ids, r.ID)
			}
		}
		if len(ids) > 0 {
			if err := each(ids); err != nil {
				return err
			}
		}
		if len(chunk) < copyPage {
			return nil
		}
	}
}

// copyView is a copy as the listings show it: ID is its row's (the id
// that rows show, replay --id and the row detail take), CopyID its own,
// Destination the copy's and State, the tries and LastError the copy's.
func copyView(c dialects.CopyListed, routeOf RouteOf) RowView {
	v := rowView(c.ListedRow, routeOf)
	id := c.ID
	v.ID, v.CopyID, v.Destination = c.RowID, &id, c.Destination
	return v
}

// newerFirst orders listed rows and copies as the listings do: the newest
// update first, then the highest sequence.
func newerFirst(a, b RowView) bool {
	if !a.UpdatedAt.Equal(b.UpdatedAt) {
		return a.UpdatedAt.After(b.UpdatedAt)
	}
	return a.Sequence > b.Sequence
}

// sameCursor: a and b sit at the same position of a listing.
func sameCursor(a, b RowView) bool { return a.UpdatedAt.Equal(b.UpdatedAt) && a.Sequence == b.Sequence }

// mergeNewest merges two listings, each newest first, and keeps the first
// limit entries, and the entries after them at the same position (a row
// and its copies written by one statement share it: a page that ended
// between them would lose the rest, since the next page starts past that
// position). more says whether entries were left out.
func mergeNewest(a, b []RowView, limit int) (out []RowView, more bool) {
	all := append(append(make([]RowView, 0, len(a)+len(b)), a...), b...)
	sort.SliceStable(all, func(i, j int) bool { return newerFirst(all[i], all[j]) })
	n := min(limit, len(all))
	for n > 0 && n < len(all) && sameCursor(all[n-1], all[n]) {
		n++
	}
	return all[:n], n < len(all)
}

// CopyCountsView is one destination's copies per state, and how long its
// oldest due pending copy has waited.
type CopyCountsView struct {
	Destination string `json:"destination"`
	// Copies counts per state; the four states are always present.
	Copies                  map[string]int64 `json:"copies"`
	OldestDuePendingSeconds float64          `json:"oldestDuePendingSeconds"`
	OldestDue               time.Duration    `json:"-"`
}

// copyCounts turns the dialect's counts into one entry a destination, by
// name.
func copyCounts(counts []dialects.DestinationCount) []CopyCountsView {
	byDest := map[string]*CopyCountsView{}
	for _, c := range counts {
		v := byDest[c.Destination]
		if v == nil {
			v = &CopyCountsView{Destination: c.Destination, Copies: map[string]int64{}}
			for _, s := range dialects.States {
				v.Copies[string(s)] = 0
			}
			byDest[c.Destination] = v
		}
		v.Copies[string(c.State)] += c.Rows
		if c.State == dialects.Pending && c.OldestDue > v.OldestDue {
			v.OldestDue, v.OldestDuePendingSeconds = c.OldestDue, c.OldestDue.Seconds()
		}
	}
	out := make([]CopyCountsView, 0, len(byDest))
	for _, v := range byDest {
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Destination < out[j].Destination })
	return out
}

// ReplayResult is what a replay did, or with a dry run would do.
type ReplayResult struct {
	// Rows is how many rows were put back to pending.
	Rows int `json:"rows"`
	// Copies is how many copies of the destination were put back to
	// pending; Backfilled how many were created for delivered rows that
	// had none (see ReplayDestination).
	Copies     int `json:"copies"`
	Backfilled int `json:"backfilled"`
}

// ReplayDestination replays destination's part of the rows f selects (a
// ForReplay filter), and nothing of the other destinations':
//   - the rows whose topic the routes send to destination alone, as Replay
//     does;
//   - the dead rows of fan-out routes that send to it (a fan-out row goes
//     dead only when it could not be routed: no destination has it);
//   - destination's copies in f's states (dead by default; dead and
//     delivered for a replay by id), back to pending with attempt 0;
//   - with the delivered state, a new pending copy for each delivered row
//     of a fan-out route that sends to destination and has no copy of it:
//     the row was delivered to destination in its pass, or before
//     destination was added to the route.
//
// Replaying a delivered fan-out row itself would deliver it to every
// destination again. Since and Until bound the copies' own updated_at.
func ReplayDestination(ctx context.Context, d dialects.Dialect, f dialects.Filter, destination string, routes Routes, dryRun bool, by string) (ReplayResult, error) {
	var res ReplayResult
	if len(f.States) == 0 {
		f.States = dialects.ReplayDefaultStates(f)
	}
	n, err := dialects.Replay(ctx, d, sendsTo(routes, f, destination, false), dryRun, by)
	res.Rows += n
	if err != nil {
		return res, err
	}
	fanOut := sendsTo(routes, f, destination, true)
	if slices.Contains(f.States, dialects.Dead) {
		dead := fanOut
		dead.States = []dialects.State{dialects.Dead}
		n, err := dialects.Replay(ctx, d, dead, dryRun, by)
		res.Rows += n
		if err != nil {
			return res, err
		}
	}
	err = walkCopies(ctx, d, dialects.CopyFilter{Filter: f, Destination: destination}, func(cs []dialects.CopyListed) error {
		if dryRun {
			res.Copies += len(cs)
			return nil
		}
		n, err := d.CopyReplay(ctx, destination, rowIDs(cs), f.States, by)
		res.Copies += n
		return err
	})
	if err != nil || !slices.Contains(f.States, dialects.Delivered) {
		return res, err
	}
	delivered := fanOut
	delivered.States = []dialects.State{dialects.Delivered}
	err = walkRows(ctx, d, delivered, func(ids []uuid.UUID) error {
		if dryRun {
			n, err := withoutCopy(ctx, d, destination, ids)
			res.Backfilled += n
			return err
		}
		n, err := d.CopyBackfill(ctx, destination, ids, by)
		res.Backfilled += n
		return err
	})
	return res, err
}

// ReplayCopies replays destination's copies of the rows ids in states (a
// group of dead copies), and returns how many it put back to pending; with
// dryRun, how many it would.
func ReplayCopies(ctx context.Context, d dialects.Dialect, destination string, ids []uuid.UUID, states []dialects.State, dryRun bool, by string) (int, error) {
	if !dryRun {
		return d.CopyReplay(ctx, destination, ids, states, by)
	}
	n := 0
	err := walkCopies(ctx, d, dialects.CopyFilter{Filter: dialects.Filter{IDs: ids, States: states}, Destination: destination}, func(cs []dialects.CopyListed) error {
		n += len(cs)
		return nil
	})
	return n, err
}

// withoutCopy counts the rows of ids that have no copy of destination: the
// ones a backfill would give one.
func withoutCopy(ctx context.Context, d dialects.Copies, destination string, ids []uuid.UUID) (int, error) {
	have := map[uuid.UUID]bool{}
	f := dialects.CopyFilter{Filter: dialects.Filter{IDs: ids, States: dialects.States}, Destination: destination}
	err := walkCopies(ctx, d, f, func(cs []dialects.CopyListed) error {
		for _, c := range cs {
			have[c.RowID] = true
		}
		return nil
	})
	return len(ids) - len(have), err
}

func rowIDs(cs []dialects.CopyListed) []uuid.UUID {
	ids := make([]uuid.UUID, len(cs))
	for i, c := range cs {
		ids[i] = c.RowID
	}
	return ids
}

// RowDestinationView is one destination of a fan-out row in its detail:
// its copy's state, tries, last error and when it is due, or, with no
// copy, what the row tells (WithRow).
type RowDestinationView struct {
	Destination string `json:"destination"`
	State       string `json:"state"`
	// WithRow: the destination has no copy, and the row tells its state:
	// delivered in the row's pass (the row is delivered), or not tried yet
	// (the row is pending or processing).
	WithRow bool `json:"withRow,omitempty"`
	// The copy's: its id, tries (as RowView's), last error and when a
	// pending copy is due. Absent WithRow.
	CopyID      *uuid.UUID `json:"copyId,omitempty"`
	Attempt     int        `json:"attempt"`
	MaxAttempts int        `json:"maxAttempts"`
	Try         int        `json:"try"`
	MaxTries    int        `json:"maxTries"`
	LastError   *string    `json:"lastError,omitempty"`
	DueAt       *time.Time `json:"dueAt,omitempty"`
	UpdatedAt   *time.Time `json:"updatedAt,omitempty"`
	// NotRouted: the copy's destination is no longer one the row's topic
	// routes to.
	NotRouted bool `json:"notRouted,omitempty"`
}

// rowDestinations lists the state of each destination of a row: those the
// route of its topic sends it to today, in configuration order, then any
// other that has a copy. A row of a route to one destination without a
// copy has none (nil): the row's own state is its destination's.
func rowDestinations(r dialects.ListedRow, targets []string, copies []dialects.CopyListed) []RowDestinationView {
	if len(targets) < 2 && len(copies) == 0 {
		return nil
	}
	byDest := map[string]dialects.CopyListed{}
	for _, c := range copies {
		byDest[c.Destination] = c
	}
	out := make([]RowDestinationView, 0, len(targets)+len(copies))
	for _, dest := range targets {
		c, ok := byDest[dest]
		if !ok {
			out = append(out, RowDestinationView{Destination: dest, State: string(r.State), WithRow: true})
			continue
		}
		out = append(out, copyDestination(c, false))
		delete(byDest, dest)
	}
	rest := make([]string, 0, len(byDest))
	for dest := range byDest {
		rest = append(rest, dest)
	}
	sort.Strings(rest)
	for _, dest := range rest {
		out = append(out, copyDestination(byDest[dest], true))
	}
	return out
}

func copyDestination(c dialects.CopyListed, notRouted bool) RowDestinationView {
	id := c.ID
	updated := c.UpdatedAt.UTC()
	v := RowDestinationView{Destination: c.Destination, State: string(c.State), CopyID: &id, Attempt: c.Attempt,
		MaxAttempts: c.MaxAttempts, Try: c.Attempt + 1, MaxTries: c.MaxAttempts + 1, LastError: c.LastError,
		UpdatedAt: &updated, NotRouted: notRouted}
	if c.State == dialects.Pending {
		due := c.ScheduledAt.UTC()
		v.DueAt = &due
	}
	return v
}
