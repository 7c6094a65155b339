package admin

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// The sampler's rhythm. Counting rows per state and topic reads the whole
// table: about 0.4 s for a million rows on PostgreSQL, and grouping the
// newest dead rows 0.2 s more (docs/operations.md has the measurements). It
// therefore runs on an interval that follows its own cost: CountCostFactor
// times the last count's duration, at least the minimum interval and at
// most MaxCountInterval, so that counting never takes more than 4% of one
// database core (a million rows: a count about every 20 s). The cheap reads (the oldest due
// pending row and the rows scheduled later, from the index the claim
// reads; the open outbox transactions) run every FastInterval.
const (
	DefaultCountInterval = 5 * time.Second
	MaxCountInterval     = 5 * time.Minute
	CountCostFactor      = 25
	FastInterval         = 2 * time.Second
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

	// The cheap reads.
	PendingAt  time.Time
	Pending    dialects.PendingSummary
	Writers    []Writer
	WritersErr string

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
	log     *slog.Logger
	min     time.Duration
	fast    time.Duration
	kick    chan struct{}

	// demanded is when a reader last asked (unix ns); counted is closed
	// once the first count has been tried.
	demanded    atomic.Int64
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
		kick: make(chan struct{}, 1), counted: make(chan struct{}), snap: Snapshot{Rows: zeroRows(), Topics: map[string]map[string]int64{},
			Dead: DeadGroups{Window: DeadGroupWindow, Groups: []DeadGroup{}}, Blocked: []dialects.BlockedKey{}, Writers: []Writer{}}}
}

func zeroRows() map[string]int64 {
	rows := map[string]int64{}
	for _, s := range dialects.States {
		rows[string(s)] = 0
	}
	return rows
}

// Kick asks for a count now (after a replay, so that the page shows it).
func (s *Sampler) Kick() {
	s.demanded.Store(time.Now().UnixNano())
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// FirstCountWait bounds how long a reader waits for the first count of a
// replica nobody has watched before.
const FirstCountWait = 3 * time.Second

// Demand tells the sampler that a reader wants the counts: it counts now if
// its last count is older than its interval (the reader gets the values at
// hand), and the first reader waits for the first count (at most
// FirstCountWait), so that it does not read zeros.
func (s *Sampler) Demand(ctx context.Context) {
	s.demanded.Store(time.Now().UnixNano())
	s.mu.Lock()
	stale := s.snap.CountedAt.IsZero() || time.Since(s.snap.CountedAt) > s.snap.CountInterval
	s.mu.Unlock()
	if stale {
		s.Kick()
	}
	t := time.NewTimer(FirstCountWait)
	defer t.Stop()
	select {
	case <-s.counted:
	case <-t.C:
	case <-ctx.Done():
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
	var nextCount time.Time
	var lastCount int64 // unix ns; 0 before the first count
	for ctx.Err() == nil {
		// The cheap reads first: a count comes with a pending summary at
		// least as new.
		s.cheap(ctx)
		// A count is due by the interval, and wanted if a reader asked
		// since the last one.
		wanted := s.demanded.Load() > lastCount
		if wanted && !time.Now().Before(nextCount) {
			lastCount = time.Now().UnixNano()
			interval := s.count(ctx)
			nextCount = time.Now().Add(interval)
			s.countedOnce.Do(func() { close(s.counted) })
		}
		wait := s.fast
		if wanted {
			wait = min(wait, time.Until(nextCount))
		}
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-s.kick:
			t.Stop()
			nextCount = time.Time{}
		}
	}
}

// count reads the whole table's counts, the dead-row groups and the blocked
// keys, and returns when to count next.
func (s *Sampler) count(ctx context.Context) time.Duration {
	start := time.Now()
	counts, err := s.d.OutboxCountByTopic(ctx)
	if err != nil {
		s.failed(ctx, "counting the outbox rows", err)
		return s.min
	}
	dead, err := GroupDead(ctx, s.d, s.routeOf, DeadGroupWindow)
	if err != nil {
		s.failed(ctx, "grouping the dead rows", err)
		return s.min
	}
	blocked, err := s.d.OutboxBlockedKeys(ctx, dialects.BlockedKeysParams{Scan: BlockedKeysScan, Limit: BlockedKeysShown})
	if err != nil {
		s.failed(ctx, "looking for blocked keys", err)
		return s.min
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
	s.mu.Lock()
	s.snap.CountedAt, s.snap.CountTook, s.snap.CountInterval = time.Now(), took, interval
	s.snap.Rows, s.snap.Topics, s.snap.Dead, s.snap.Blocked = rows, topics, dead, blocked
	s.mu.Unlock()
	s.worked()
	return interval
}

// cheap reads the pending summary and the open outbox transactions.
func (s *Sampler) cheap(ctx context.Context) {
	p, err := s.d.OutboxPending(ctx)
	if err != nil {
		s.failed(ctx, "reading the pending rows", err)
		return
	}
	s.m.setOldestDue(p.OldestDue)
	writers, werr := heldBackBy(ctx, s.d)
	s.mu.Lock()
	s.snap.PendingAt, s.snap.Pending = time.Now(), p
	s.snap.Writers, s.snap.WritersErr = writers, ""
	if werr != nil {
		s.snap.WritersErr = werr.Error()
	}
	s.mu.Unlock()
	s.worked()
}

func (s *Sampler) failed(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	s.snap.Err, s.snap.ErrAt = what+": "+err.Error(), time.Now()
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
		if errors.Is(err, dialects.ErrNotPermitted) {
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
