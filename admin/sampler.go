package admin

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// The sampler's rhythm. Counting rows per state and topic reads the whole
// table: about 0.4 s for a million rows on PostgreSQL, and grouping the
// newest dead rows 0.2 s more. It
// therefore runs on an interval that follows its own cost: CountCostFactor
// times the last count's duration, at least the minimum interval and at
// most MaxCountInterval, so that counting never takes more than 4% of one
// database core (a million rows: a count about every 20 s). The cheap reads (the oldest due
// pending row and the rows scheduled later, from the index the claim
// reads; the oldest received inbox row, from the relay's index; the open
// outbox transactions; what holds the horizon back; where the wake-up
// slot stands) run every FastInterval
// while someone has read in the last WatchedFor, and not at all otherwise:
// an idle replica that nobody watches costs its database nothing here.
// They are cheap unless many due rows wait behind held rows of their keys
// (a paused destination's backlog), which the look for the oldest row the
// relay could claim reads past; so their interval follows their cost too,
// CountCostFactor times it, at least FastInterval.
const (
	DefaultCountInterval = 5 * time.Second
	MaxCountInterval     = 5 * time.Minute
	CountCostFactor      = 25
	FastInterval         = 2 * time.Second
	WatchedFor           = time.Minute
	// BlockedKeysScan bounds the rows scheduled later that one look for
	// blocked keys examines; BlockedKeysShown the keys it returns.
	BlockedKeysScan  = 10000
	BlockedKeysShown = 100
	// MaxTopics bounds the topics /api/stats lists (the most rows first).
	MaxTopics = 500
)

// Snapshot is what the sampler last read.
type Snapshot struct {
	// The count of the whole table, and what was read with it.
	CountedAt     time.Time
	CountTook     time.Duration
	CountInterval time.Duration
	// Rows per state: the four (always present) and any other found.
	Rows map[string]int64
	// Topics: rows per state per topic.
	Topics map[string]map[string]int64
	Dead   DeadGroups
	// Blocked keys, the longest waiting first.
	Blocked []dialects.BlockedKey
	// Inbox counts the inbox table's rows, read with the count; nil before
	// the first count and when the schema has no inbox table.
	Inbox *dialects.InboxStats
	// Copies counts the copies of fan-out rows per destination and state.
	Copies []CopyCountsView

	// The cheap reads.
	PendingAt  time.Time
	Pending    dialects.PendingSummary
	Writers    []Writer
	WritersErr string
	Horizon    *HorizonView
	WakeupSlot *WakeupSlotView

	// Err is the last failed read, cleared by the next one that works.
	Err   string
	ErrAt time.Time
}

// Sampler reads the outbox table on an interval for the page, /api/stats
// and the row gauges, so that any number of viewers costs the database
// nothing more. It counts only while someone reads what it counts (the page,
// the API, a /metrics scrape): a replica nobody watches costs the database
// no count at all, however many replicas run.
type Sampler struct {
	d       dialects.Dialect
	m       *Metrics
	routeOf RouteOf
	// final tells the dead groups a replay would not cure (set by
	// NewServer; nil in tests).
	final FinalStatus
	log   *slog.Logger
	min   time.Duration
	fast  time.Duration
	wake  chan struct{} // wakes Run for a count (Kick, Demand)

	// The schedule runs on the monotonic clock, as durations since start,
	// so that a step of the wall clock neither stops nor hurries counting;
	// wall gives the snapshot's times.
	start time.Time
	wall  func() time.Time

	// demanded counts the reads that asked for the counts (Run counts when
	// it has grown since the last count began); forced is set by Kick; due
	// is when (since start, in ns) the next count may begin, MaxInt64 while
	// one runs. counted is closed once the first count has been tried.
	demanded    atomic.Uint64
	lastDemand  atomic.Int64 // since start, in ns
	forced      atomic.Bool
	due         atomic.Int64
	counted     chan struct{}
	countedOnce sync.Once

	mu      sync.Mutex
	snap    Snapshot
	failing bool
}

func newSampler(d dialects.Dialect, m *Metrics, routeOf RouteOf, log *slog.Logger, minInterval time.Duration) *Sampler {
	if minInterval <= 0 {
		minInterval = DefaultCountInterval
	}
	return &Sampler{d: d, m: m, routeOf: routeOf, log: log, min: minInterval, fast: min(FastInterval, minInterval),
		wake: make(chan struct{}, 1), start: time.Now(), wall: time.Now, counted: make(chan struct{}), snap: Snapshot{Rows: zeroRows(), Topics: map[string]map[string]int64{},
			Dead: DeadGroups{Window: DeadGroupWindow, Groups: []DeadGroup{}}, Blocked: []dialects.BlockedKey{}, Writers: []Writer{}, Copies: []CopyCountsView{}}}
}

func zeroRows() map[string]int64 {
	rows := map[string]int64{}
	for _, s := range dialects.States {
		rows[string(s)] = 0
	}
	return rows
}

// Kick asks for a count now, whatever the interval (after a replay, so
// that the page shows it): if a count is running, another follows it.
func (s *Sampler) Kick() {
	s.demanded.Add(1)
	s.forced.Store(true)
	s.wakeRun()
}

func (s *Sampler) wakeRun() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// since reads the monotonic clock of the schedule.
func (s *Sampler) since() time.Duration { return time.Since(s.start) }

// FirstCountWait bounds how long a reader waits for the first count of a
// replica nobody has watched before.
const FirstCountWait = 3 * time.Second

// Demand tells the sampler that a reader wants the counts: it counts now if
// its interval has passed since the last attempt ended (the minimum
// interval after a failed one), and otherwise when the interval ends; a count that is
// running serves the reads that arrive meanwhile. The reader gets the values
// at hand; the first reader waits for the first count (at most
// FirstCountWait), so that it does not read zeros.
func (s *Sampler) Demand(ctx context.Context) {
	s.Want()
	t := time.NewTimer(FirstCountWait)
	defer t.Stop()
	select {
	case <-s.counted:
	case <-t.C:
	case <-ctx.Done():
	}
}

// Want is Demand without the wait: the reader takes the values at hand,
// and the sampler keeps counting at its interval while it is read.
func (s *Sampler) Want() {
	s.demanded.Add(1)
	s.lastDemand.Store(int64(s.since()))
	if s.since() >= time.Duration(s.due.Load()) {
		s.wakeRun()
	}
}

// Snapshot returns a copy of what was last read.
func (s *Sampler) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap
}

// Run samples until ctx ends.
func (s *Sampler) Run(ctx context.Context) {
	// Times on the schedule's monotonic clock (since s.start).
	var nextCount, nextCheap time.Duration
	var served uint64 // the demands the last count began after
	for ctx.Err() == nil {
		// A count is wanted if a reader asked since the last one began,
		// and due once its interval has passed; Kick forces one.
		forced := s.forced.Swap(false)
		wanted := forced || s.demanded.Load() > served
		count := forced || wanted && s.since() >= nextCount
		// The cheap reads first: a count comes with a pending summary at
		// least as new.
		watched := s.demanded.Load() > 0 && s.since()-time.Duration(s.lastDemand.Load()) < WatchedFor
		if count || watched && s.since() >= nextCheap {
			took := s.cheap(ctx)
			nextCheap = s.since() + max(s.fast, CountCostFactor*took)
		}
		if count {
			// The reads that arrive while it runs are served by it: they
			// neither wake Run nor count as wanting the next one.
			s.due.Store(math.MaxInt64)
			interval := s.count(ctx) // the minimum interval after a failure
			served = s.demanded.Load()
			nextCount = s.since() + interval
			s.due.Store(int64(nextCount))
			s.countedOnce.Do(func() { close(s.counted) })
			wanted = false
		}
		wait := nextCheap
		if !watched {
			wait = s.since() + WatchedFor // until a read wakes it
		}
		if wanted {
			wait = min(wait, nextCount)
		}
		t := time.NewTimer(max(wait-s.since(), 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-s.wake:
			t.Stop()
		}
	}
}

// count reads the whole table's counts, the dead-row groups, the blocked
// keys, the copies' counts and the inbox's counts, and returns when to
// count next.
func (s *Sampler) count(ctx context.Context) time.Duration {
	start := time.Now()
	counts, err := s.d.OutboxCountByTopic(ctx)
	if err != nil {
		s.failed(ctx, "counting the outbox rows", err)
		return s.min
	}
	dead, err := GroupDead(ctx, s.d, s.routeOf, s.final, DeadGroupWindow)
	if err != nil {
		s.failed(ctx, "grouping the dead rows", err)
		return s.min
	}
	blocked, err := s.d.OutboxBlockedKeys(ctx, dialects.BlockedKeysParams{Scan: BlockedKeysScan, Limit: BlockedKeysShown})
	if err != nil {
		s.failed(ctx, "looking for blocked keys", err)
		return s.min
	}
	counted, err := s.d.CopyCounts(ctx)
	if err != nil {
		s.failed(ctx, "counting the copies of fan-out rows", err)
		return s.min
	}
	copies := copyCounts(counted)
	// The inbox is counted with the outbox (its count reads the whole
	// inbox table too), and its cost counts in the interval.
	var in *dialects.InboxStats
	inboxFailed := false
	switch st, err := s.d.InboxStats(ctx); {
	case errors.Is(err, dialects.ErrNoTable):
		// A schema without the inbox: nothing to show.
		s.m.setInbox(dialects.InboxStats{})
	case err != nil:
		// The outbox's figures are still published; the inbox's keep
		// their last values, and the error shows as the sampling's.
		s.failed(ctx, "counting the inbox", err)
		inboxFailed = true
		s.mu.Lock()
		in = s.snap.Inbox
		s.mu.Unlock()
	default:
		in = &st
		s.m.setInbox(st)
	}
	took := time.Since(start)
	interval := min(max(s.min, CountCostFactor*took), MaxCountInterval)
	rows, topics := zeroRows(), map[string]map[string]int64{}
	for _, c := range counts {
		rows[string(c.State)] += c.Rows
		if topics[c.Topic] == nil {
			topics[c.Topic] = map[string]int64{}
		}
		topics[c.Topic][string(c.State)] += c.Rows
	}
	if blocked == nil {
		blocked = []dialects.BlockedKey{}
	}
	s.m.setRows(rows, took)
	s.m.setCopies(copies)
	s.mu.Lock()
	s.snap.CountedAt, s.snap.CountTook, s.snap.CountInterval = s.wall(), took, interval
	s.snap.Rows, s.snap.Topics, s.snap.Dead, s.snap.Blocked, s.snap.Inbox = rows, topics, dead, blocked, in
	s.snap.Copies = copies
	s.mu.Unlock()
	if inboxFailed {
		return s.min
	}
	s.worked()
	return interval
}

// cheap reads the pending summary, the oldest received inbox row and the
// open outbox transactions, and returns how long it took.
func (s *Sampler) cheap(ctx context.Context) time.Duration {
	start := time.Now()
	p, err := s.d.OutboxPending(ctx)
	if err != nil {
		s.failed(ctx, "reading the pending rows", err)
		return time.Since(start)
	}
	s.m.setOldestDue(p.OldestDue)
	age, ierr := s.d.InboxOldestReceived(ctx)
	writers, werr := heldBackBy(ctx, s.d)
	var horizon *HorizonView
	if h, err := s.d.OutboxHorizon(ctx); err == nil {
		horizon = horizonView(h, time.Now())
		s.m.setHorizon(horizon)
	}
	slot := wakeupSlot(ctx, s.d)
	s.m.setWakeupSlot(slot)
	s.mu.Lock()
	s.snap.Horizon = horizon
	s.snap.WakeupSlot = slot
	s.snap.PendingAt, s.snap.Pending = s.wall(), p
	s.snap.Writers, s.snap.WritersErr = writers, ""
	if werr != nil {
		s.snap.WritersErr = werr.Error()
	}
	if ierr == nil && s.snap.Inbox != nil {
		in := *s.snap.Inbox
		in.OldestReceived = age
		s.snap.Inbox = &in
	}
	s.mu.Unlock()
	switch {
	case errors.Is(ierr, dialects.ErrNoTable): // a schema without the inbox
	case ierr != nil:
		// The outbox's figures above are published; the inbox's wait
		// keeps its last value.
		s.failed(ctx, "reading the oldest inbox row", ierr)
		return time.Since(start)
	default:
		s.m.setInboxAge(age)
	}
	s.worked()
	return time.Since(start)
}

func (s *Sampler) failed(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	s.snap.Err, s.snap.ErrAt = what+": "+err.Error(), s.wall()
	first := !s.failing
	s.failing = true
	s.mu.Unlock()
	if first {
		s.log.Warn("admin: sampling the outbox failed; the page and queuebox_rows keep the last values", "error", s.snap.Err)
	}
}

func (s *Sampler) worked() {
	s.mu.Lock()
	was := s.failing
	s.failing, s.snap.Err = false, ""
	s.mu.Unlock()
	if was {
		s.log.Info("admin: sampling the outbox works again")
	}
}

// topTopics keeps the MaxTopics topics with the most rows; the second
// result counts the topics left out.
func topTopics(topics map[string]map[string]int64) (map[string]map[string]int64, int) {
	if len(topics) <= MaxTopics {
		return topics, 0
	}
	type t struct {
		name string
		rows int64
	}
	all := make([]t, 0, len(topics))
	for name, byState := range topics {
		var n int64
		for _, c := range byState {
			n += c
		}
		all = append(all, t{name, n})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].rows != all[j].rows {
			return all[i].rows > all[j].rows
		}
		return all[i].name < all[j].name
	})
	out := make(map[string]map[string]int64, MaxTopics)
	for _, x := range all[:MaxTopics] {
		out[x.name] = topics[x.name]
	}
	return out, len(all) - MaxTopics
}

// heldBackBy lists the open transactions that inserted outbox rows and have
// been open for at least HeldBackAfter.
func heldBackBy(ctx context.Context, d dialects.Operator) ([]Writer, error) {
	ws, err := d.OutboxWriters(ctx)
	out := []Writer{}
	if err != nil {
		if dialects.Blind(err) {
			return out, errors.New("the database user may not list other transactions (on SQL Server it needs VIEW SERVER STATE)")
		}
		return out, err
	}
	now := time.Now()
	for _, w := range ws {
		if w.Since.IsZero() || now.Sub(w.Since) < HeldBackAfter {
			continue
		}
		out = append(out, Writer{PID: w.PID, Since: w.Since, OpenSeconds: now.Sub(w.Since).Seconds(),
			State: w.State, Application: w.Application, Query: w.Query})
	}
	return out, nil
}
