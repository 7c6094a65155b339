package admin

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// Stats is the status summary of the outbox table.
type Stats struct {
	// Rows counts rows per state; every state is present.
	Rows map[dialects.State]int64 `json:"rows"`
	// OtherStates counts rows whose state is none of the four, per value:
	// rows written by hand, which QueueBox never claims, replays or
	// deletes.
	OtherStates map[string]int64 `json:"otherStates"`
	// OldestDue is how long the pending row due the longest has waited
	// since it became due; zero when none is due.
	OldestDue        time.Duration `json:"-"`
	OldestDueSeconds float64       `json:"oldestDuePendingSeconds"`
	// ScheduledLater counts pending rows not due yet (retries, rows
	// scheduled ahead).
	ScheduledLater int64 `json:"scheduledLater"`
	// DeadByTopic counts dead rows per topic.
	DeadByTopic map[string]int64 `json:"deadByTopic"`
	// HeldBackBy are open transactions that inserted outbox rows and have
	// been open for at least HeldBackAfter: keyed rows inserted after they
	// began wait until they end.
	HeldBackBy []Writer `json:"heldBackBy"`
	// Inbox counts the inbox table's rows.
	Inbox InboxStats `json:"inbox"`
	// Horizon is what holds the database's horizon back, and the outbox's
	// dead row versions.
	Horizon *HorizonView `json:"horizon,omitempty"`
	// WakeupSlot is where the wake-up slot stands; absent while no relay
	// holds one.
	WakeupSlot *WakeupSlotView `json:"wakeupSlot,omitempty"`
	// Copies counts the copies of fan-out rows per destination and state,
	// by destination name: the destinations that did not deliver in their
	// row's pass (a delivered destination has no copy).
	Copies []CopyCountsView `json:"copies"`
}

// WakeupSlotView is where the replication slot of logical wake-ups stands,
// in bytes behind the server's current WAL position: its restart position
// (the WAL the server keeps for it) and its confirmed position (what the
// relay that holds it has acknowledged). Every replica reads the same slot.
type WakeupSlotView struct {
	Slot          string `json:"slot"`
	RetainedBytes int64  `json:"retainedBytes"`
	BehindBytes   int64  `json:"behindBytes"`
}

// wakeupSlot reads where the wake-up slot stands, where the dialect has
// one (PostgreSQL); nil while no relay holds one, or when it cannot be
// read.
func wakeupSlot(ctx context.Context, d dialects.Operator) *WakeupSlotView {
	r, ok := d.(dialects.WakeupSlotReader)
	if !ok {
		return nil
	}
	s, found, err := r.WakeupSlot(ctx)
	if err != nil || !found {
		return nil
	}
	return &WakeupSlotView{Slot: s.Name, RetainedBytes: s.RetainedBytes, BehindBytes: s.BehindBytes}
}

// HorizonView is what holds the database's horizon back: while any
// transaction stays open, vacuum can remove no row version the relay leaves
// behind. Holder is null when nothing holds it back that the database user
// may see (other users' snapshots need pg_read_all_stats); DeadRowVersions
// is -1 where the database does not say.
type HorizonView struct {
	Holder          *HolderView `json:"holder"`
	DeadRowVersions int64       `json:"deadRowVersions"`
}

// HolderView is the oldest holder of the horizon.
type HolderView struct {
	// Kind: transaction, standby, prepared transaction or replication slot.
	Kind string `json:"kind"`
	PID  int64  `json:"pid,omitempty"`
	// Since is when its transaction began; OpenSeconds how long ago.
	Since       *time.Time `json:"since,omitempty"`
	OpenSeconds float64    `json:"openSeconds"`
	QueryStart  *time.Time `json:"queryStart,omitempty"`
	State       string     `json:"state"`
	Application string     `json:"application"`
	Query       string     `json:"query,omitempty"`
	// Transactions is how many transaction ids were handed out since its
	// snapshot.
	Transactions int64 `json:"transactions"`
}

// horizonView turns the dialect's reading into its view.
func horizonView(h dialects.Horizon, now time.Time) *HorizonView {
	v := &HorizonView{DeadRowVersions: h.DeadVersions}
	if x := h.Holder; x != nil {
		v.Holder = &HolderView{Kind: x.Kind, PID: x.PID, State: x.State, Application: x.Name, Query: x.Query, Transactions: x.Transactions}
		if !x.Since.IsZero() {
			since := x.Since.UTC()
			v.Holder.Since, v.Holder.OpenSeconds = &since, now.Sub(x.Since).Seconds()
		}
		if !x.QueryStart.IsZero() {
			qs := x.QueryStart.UTC()
			v.Holder.QueryStart = &qs
		}
	}
	return v
}

// InboxStats counts inbox rows: received (waiting for the inbox relay) and
// relayed (turned into outbox rows), and how long the oldest received row
// has waited.
type InboxStats struct {
	Received              int64         `json:"received"`
	Relayed               int64         `json:"relayed"`
	OldestReceived        time.Duration `json:"-"`
	OldestReceivedSeconds float64       `json:"oldestReceivedSeconds"`
}

// Writer is an open transaction that holds back keyed rows.
type Writer struct {
	PID         int64     `json:"pid"`
	Since       time.Time `json:"since,omitzero"`
	OpenSeconds float64   `json:"openSeconds"`
	State       string    `json:"state"`
	Application string    `json:"application"`
	Query       string    `json:"query"`
}

// HeldBackAfter is how long a writer must be open before status names it:
// every insert is a writer for the milliseconds its transaction runs.
const HeldBackAfter = time.Second

// OtherStateNames returns the states found that are none of the four,
// sorted.
func (s Stats) OtherStateNames() []string {
	out := make([]string, 0, len(s.OtherStates))
	for st := range s.OtherStates {
		out = append(out, st)
	}
	sort.Strings(out)
	return out
}

// DeadTopics returns the topics that have dead rows, sorted.
func (s Stats) DeadTopics() []string {
	out := make([]string, 0, len(s.DeadByTopic))
	for t := range s.DeadByTopic {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Status reads the status summary.
func Status(ctx context.Context, d dialects.Dialect) (Stats, error) {
	st, err := d.OutboxStats(ctx)
	if err != nil {
		return Stats{}, err
	}
	out := Stats{Rows: map[dialects.State]int64{}, OtherStates: map[string]int64{}, OldestDue: st.OldestDue,
		OldestDueSeconds: st.OldestDue.Seconds(), ScheduledLater: st.ScheduledLater, DeadByTopic: map[string]int64{}}
	for s, n := range st.Rows {
		if s.Valid() {
			out.Rows[s] = n
		} else {
			out.OtherStates[string(s)] = n
		}
	}
	for _, s := range dialects.States {
		out.Rows[s] += 0
	}
	for t, n := range st.DeadByTopic {
		out.DeadByTopic[t] = n
	}
	if out.HeldBackBy, err = heldBackBy(ctx, d); err != nil {
		return out, fmt.Errorf("listing the open transactions that inserted outbox rows: %w", err)
	}
	if h, err := d.OutboxHorizon(ctx); err == nil {
		out.Horizon = horizonView(h, time.Now())
	}
	out.WakeupSlot = wakeupSlot(ctx, d)
	counts, err := d.CopyCounts(ctx)
	if err != nil {
		return out, fmt.Errorf("counting the copies of fan-out rows: %w", err)
	}
	out.Copies = copyCounts(counts)
	in, err := d.InboxStats(ctx)
	if err != nil {
		return out, fmt.Errorf("counting the inbox: %w", err)
	}
	out.Inbox = InboxStats{Received: in.Rows[dialects.InboxReceived], Relayed: in.Rows[dialects.InboxRelayed],
		OldestReceived: in.OldestReceived, OldestReceivedSeconds: in.OldestReceived.Seconds()}
	return out, nil
}

// Tries words a row's attempt column for people: "try n of m, attempt a".
// attempt counts the failed tries so far, and a row goes dead at a failure
// once attempt reaches max_attempts, so it is tried at most max_attempts +
// 1 times; n is attempt + 1: the try running (processing), the one it waits
// for (pending), or the last one made (delivered, dead). a is that try's
// number as the destination sees it (X-Attempt, counted from 0). The page,
// `dead list` and the API (try, maxTries, attempt) all say it so.
func Tries(attempt, maxAttempts int) string {
	return fmt.Sprintf("try %d of %d, attempt %d", attempt+1, maxAttempts+1, attempt)
}

// DeadList is what `queuebox dead list` shows: up to Limit dead rows and
// dead copies (CopyID set: one destination's part of a fan-out row), the
// most recently updated first, and whether more match (More).
type DeadList struct {
	Rows  []RowView `json:"rows"`
	Limit int       `json:"limit"`
	More  bool      `json:"more"`
}

// DeadRows lists up to limit dead rows and dead copies that f selects, the
// most recently updated first, each with where its topic routes today
// (routeOf may be nil). With a destination, the rows are those whose topic
// the routes send to it (routes) and the copies its own; without, every
// dead row and every dead copy. Callers check limit with CheckLimit, which
// names it as their source does.
func DeadRows(ctx context.Context, d dialects.Dialect, f dialects.Filter, destination string, limit int, routeOf RouteOf, routes Routes) (DeadList, error) {
	f.States = []dialects.State{dialects.Dead}
	rowFilter := f
	if destination != "" {
		rowFilter = RoutedTo(f, destination, routes)
	}
	// One more than asked says whether the limit cut the list.
	rows, _, err := dialects.List(ctx, d, rowFilter, nil, limit+1)
	if err != nil {
		return DeadList{}, err
	}
	copies, err := listCopies(ctx, d, dialects.CopyFilter{Filter: f, Destination: destination}, nil, limit+1)
	if err != nil {
		return DeadList{}, err
	}
	rv := make([]RowView, 0, len(rows))
	for _, r := range rows {
		rv = append(rv, rowView(r, routeOf))
	}
	cv := make([]RowView, 0, len(copies))
	for _, c := range copies {
		cv = append(cv, copyView(c, routeOf))
	}
	all, more := mergeNewest(rv, cv, limit)
	if len(all) > limit {
		all, more = all[:limit], true
	}
	return DeadList{Rows: all, Limit: limit, More: more}, nil
}

// RoutedTo narrows f to the rows the routes send to destination today,
// alone or among the destinations of a fan-out route (by topic, or by
// each row where route filters decide).
func RoutedTo(f dialects.Filter, destination string, routes Routes) dialects.Filter {
	return routedTo(routes, f, func(ds []string) bool { return slices.Contains(ds, destination) })
}

// Replay puts the rows f selects back to pending (attempt 0, due now) and
// returns how many; with dryRun it only counts them. Rows being delivered
// are never touched. f must come from a ForReplay filter, which refuses to
// select everything by accident. by, who or what replays, is recorded in
// each row's attempt history; "" records nothing (the history is off). A
// fan-out row's copies are replayed by destination (ReplayDestination).
func Replay(ctx context.Context, d dialects.Dialect, f dialects.Filter, dryRun bool, by string) (int, error) {
	return dialects.Replay(ctx, d, f, dryRun, by)
}
