package actors

import (
	"context"
	"github.com/queuebox/queuebox/actors/internal/upkeep"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/queuebox/queuebox/actors/internal/claimplan"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/clock"
)

// Messages of the claimer.
type (
	// wake asks for a claim now: the inbox relay relayed rows.
	wake struct{}
	// nudged: logical replication says rows committed, or its state
	// changed (see dialects.Wakeups).
	nudged struct{}
	// timerFired: one of the planner's timers fired; gen tells a stale
	// firing (the timer was armed again since) from the current one.
	timerFired struct {
		timer claimplan.Timer
		gen   uint64
	}
	// budgetChanged: how many claims (and completions) may run at once.
	budgetChanged struct{ statements int }
	probeResult   struct {
		probe dialects.Probe
		err   error
	}
	claimResult struct {
		claim  claimplan.Claim
		lease  *upkeep.Lease
		rows   []dialects.Row
		report dialects.ClaimReport
		cursor string
		// blocked are the lanes with copies waiting (ClaimParams.Lanes).
		blocked []dialects.Lane
		probe   *dialects.Probe
		// seen and settled are what the claim's watermark knew from its
		// probe.
		seen, settled int64
		took          time.Duration
		err           error
	}
	floorsResult struct {
		floors dialects.Floors
		took   time.Duration
		err    error
	}
	stragglersResult struct {
		ago    time.Duration
		found  bool
		sentAt time.Time
		took   time.Duration
		err    error
	}
	// credit returns room for n rows: their outcomes are written;
	// continued are the keys whose runs ended well among them.
	credit struct {
		n         int
		continued []continuation
		// retryIn is how soon the earliest row put back for later (a retry,
		// a deferral) comes due (0: none was); released says rows went back
		// to pending as they were.
		retryIn  time.Duration
		released bool
	}
	drain struct{}
	// keyIdle: a key actor has had nothing to do for keyIdleMs; done is how
	// many rows it has finished.
	keyIdle struct {
		lane dialects.Lane
		pid  *actor.PID
		done int
	}
)

type keyEntry struct {
	pid  *actor.PID
	sent int
	// ended: the last run sent to the key was shorter than its claim
	// allowed, so the key had no other claimable row then; seen is the
	// newest sequence the claim that sent it had seen. A row that arrived
	// since may be the key's next.
	ended bool
	seen  int64
}

// claimer is the actor around the claim planner (claimplan): it turns what
// happens (messages) into the planner's events, and the planner's actions
// into I/O: claims, probes, looks and timers, each run in a goroutine that
// sends its result back. It hands each claim's rows to the key actors
// (spawned on demand) and the unordered pool. It never blocks on the
// database.
type claimer struct {
	dialect     dialects.Relay
	clock       clock.Clock
	leaseLength time.Duration
	pool        *actor.PID
	leaseKeeper *actor.PID
	// completer hears of the fan-out rows a claim split (fanOut: the
	// router has fan-out routes, so claims ask which lanes are blocked).
	completer *actor.PID
	fanOut    bool
	// delivery, keyIdleAfter and keyMailbox build the key actors.
	delivery     *deliverer
	keyIdleAfter time.Duration
	keyMailbox   actor.MailboxProducer
	// bg bounds the statements; it ends when the engine stops.
	bg    context.Context
	log   *slog.Logger
	stats *Stats
	obs   Observer
	// ready is the engine's readiness: the last claim reached the database.
	ready *atomic.Bool
	// drained is closed once, when a drain has every outcome written.
	drained chan struct{}
	// wakeups nudges the claimer as rows commit (nil: it probes).
	wakeups dialects.Wakeups

	plan *claimplan.Planner
	tune claimplan.Tuning
	// keys are the key actors, by key (Lane.Key) for rows, by lane for
	// the units of fan-out rows.
	keys map[dialects.Lane]*keyEntry
	// gate logs the writers that hold keyed rows back (see gate.go).
	gate gate
	// timers are the planner's armed timers, gens their generations.
	timers [claimplan.Timers]clock.Timer
	gens   [claimplan.Timers]uint64
	// root and self let goroutines report back.
	root *actor.RootContext
	self *actor.PID
}

// newClaimer takes a claimer with its collaborators and planner filled in
// and sets its starting state: no keys.
func newClaimer(c claimer) *claimer {
	c.keys = map[dialects.Lane]*keyEntry{}
	c.gate = gate{wm: c.plan.Watermark(), writers: c.dialect.OutboxWriters, log: c.log, clock: c.clock, logAfter: c.tune.WaitLogAfter,
		waiting: "keyed rows wait for an open transaction that inserted outbox rows; they are delivered when it commits or rolls back (queuebox status shows it)",
		flowing: "keyed rows flow again: the transactions they waited for have ended",
		blindly: "cannot see other transactions, so rows of one key written by concurrent transactions may be delivered in commit order rather than insert order; grant the permission the error names"}
	return &c
}

func (c *claimer) listening() bool { return c.wakeups != nil && c.wakeups.Status().Listening() }

func (c *claimer) Receive(ctx actor.Context) {
	now := c.clock.Now()
	var ev claimplan.Event
	switch m := ctx.Message().(type) {
	case *actor.Started:
		c.root, c.self = ctx.ActorSystem().Root, ctx.Self()
		ev = claimplan.Start{Listening: c.listening()}
	case *actor.Stopping:
		for _, t := range c.timers {
			if t != nil {
				t.Stop()
			}
		}
		return
	case *nudged:
		c.stats.Nudges.Add(1)
		ev = claimplan.Nudge{Listening: c.listening()}
	case *timerFired:
		if m.gen != c.gens[m.timer] {
			return // armed again since
		}
		c.timers[m.timer] = nil
		ev = claimplan.Fired{Timer: m.timer}
	case *probeResult:
		blind := m.err != nil && c.gate.refused(m.err)
		c.step(ctx, now, claimplan.Probed{Probe: m.probe, Err: m.err, Blind: blind})
		if m.err != nil && !blind {
			c.unreachable(m.err)
		} else if m.err == nil {
			c.gate.check(ctx, c.bg)
		}
		return
	case *claimResult:
		c.onClaim(ctx, now, m)
		return
	case *credit:
		ev = c.onCredit(m)
	case *wake:
		ev = claimplan.Woken{}
	case *upkeep.Released:
		ev = claimplan.Woken{Released: true}
	case *upkeep.HorizonSeen:
		ev = claimplan.HorizonSeen{Horizon: m.Horizon}
	case *budgetChanged:
		ev = claimplan.Budget{Statements: m.statements}
	case *floorsResult:
		ev = claimplan.FloorsDone{Floors: m.floors, Took: m.took, Err: m.err}
	case *stragglersResult:
		if m.found && m.err == nil {
			c.stats.looked(stragglersFoundLook, m.ago)
		}
		ev = claimplan.StragglersDone{Ago: m.ago, Found: m.found, SentAt: m.sentAt, Took: m.took, Err: m.err}
	case *writersResult:
		c.gate.onWriters(m)
		return
	case *keyIdle:
		if e := c.keys[m.lane]; e != nil && e.pid.Equal(m.pid) && e.sent == m.done {
			delete(c.keys, m.lane)
			c.stats.KeyActors.Add(-1)
			ctx.Poison(m.pid)
		}
		return
	case *drain:
		for _, e := range c.keys {
			ctx.Send(e.pid, &drain{})
		}
		ctx.Send(c.pool, &drain{})
		ev = claimplan.Drain{}
	default:
		return
	}
	c.step(ctx, now, ev)
}

// unreachable reports a statement the database refused: the engine is not
// ready, and the first failure of an outage is logged.
func (c *claimer) unreachable(err error) {
	if c.ready.Swap(false) || c.plan.Failures() == 1 {
		c.log.Warn("database unreachable; claims paused", "error", err)
	}
}

// step runs one step of the planner and does what it asks.
func (c *claimer) step(ctx actor.Context, now time.Time, ev claimplan.Event) {
	acts := c.plan.Step(now, ev)
	for _, a := range acts.Arms {
		c.arm(a.Timer, a.After)
	}
	for _, cl := range acts.Claims {
		c.startClaim(cl)
	}
	if acts.Probe {
		c.startProbe()
	}
	if acts.Floors != nil {
		c.readFloors(*acts.Floors)
	}
	if acts.Stragglers != nil {
		c.lookForStragglers(*acts.Stragglers)
	}
	c.stats.Idle.Store(c.plan.Idle(now))
	if c.plan.Drained() {
		select {
		case <-c.drained:
		default:
			close(c.drained)
		}
	}
}

// arm arms the planner's timer t to fire after d (d < 0 disarms it).
func (c *claimer) arm(t claimplan.Timer, d time.Duration) {
	if old := c.timers[t]; old != nil {
		old.Stop()
		c.timers[t] = nil
	}
	c.gens[t]++
	if d < 0 || c.self == nil {
		return
	}
	root, self, msg := c.root, c.self, &timerFired{timer: t, gen: c.gens[t]}
	c.timers[t] = c.clock.AfterFunc(d, func() { root.Send(self, msg) })
}

// startClaim runs one claim in a goroutine: it probes first (on the claim's
// copy of the watermark, so that it takes every row that arrived and
// settled up to that moment), then claims.
func (c *claimer) startClaim(cl claimplan.Claim) {
	l := upkeep.NewLease(uuid.New(), cl.Rewinds)
	root, self, dialect, bg, stats, length, clk := c.root, c.self, c.dialect, c.bg, c.stats, c.leaseLength, c.clock
	params := dialects.ClaimParams{Limit: cl.Limit, Lease: length, Token: l.Token(), MaxHeads: cl.Heads,
		Walk: cl.Walk, After: cl.After, Continue: cl.Continue, Bounds: cl.Bounds, Lanes: c.fanOut}
	if wm := cl.Watermark; wm != nil {
		params.Settle = func(p dialects.Probe) *dialects.Gate {
			wm.Observe(p, clk.Now())
			return wm.Gate()
		}
	}
	go func() {
		res := &claimResult{claim: cl, lease: l}
		qctx, cancel := context.WithTimeout(bg, max(length/2, time.Second))
		defer cancel()
		sentAt := clk.Now()
		stats.ClaimStatements.Add(1)
		got, err := dialect.OutboxClaim(qctx, params)
		res.rows, res.cursor, res.report, res.probe, res.blocked, res.err = got.Rows, got.Cursor, got.Walk, got.Probe, got.Blocked, err
		if wm := cl.Watermark; wm != nil && got.Probe != nil {
			res.seen, res.settled = wm.LastSeen(), wm.Settled()
		}
		res.took = clk.Now().Sub(sentAt)
		stats.ClaimTime.Add(int64(res.took))
		l.Extend(sentAt, length)
		root.Send(self, res)
	}()
}

func (c *claimer) onClaim(ctx actor.Context, now time.Time, m *claimResult) {
	failuresBefore := c.plan.Failures()
	blind := m.err != nil && c.gate.refused(m.err)
	c.step(ctx, now, claimplan.ClaimDone{Claim: m.claim, Rows: m.rows, Report: m.report, Cursor: m.cursor,
		Probe: m.probe, Seen: m.seen, Settled: m.settled, Took: m.took, Err: m.err, Blind: blind})
	if m.probe != nil {
		c.gate.check(ctx, c.bg)
	}
	if m.err != nil {
		if !blind {
			c.unreachable(m.err)
		}
		return
	}
	if failuresBefore > 0 {
		c.log.Info("database reachable again; claiming", "afterFailures", failuresBefore)
	}
	c.ready.Store(true)
	n := len(m.rows)
	c.obs.Claimed(n, m.took)
	if m.claim.FromStart() {
		c.stats.looked(fromStartWalk, m.took)
	}
	ck := &c.stats.Claims[m.claim.Kind]
	ck.Statements.Add(1)
	ck.Rows.Add(int64(n))
	ck.Time.Add(int64(m.took))
	if n > 0 {
		c.stats.Claimed.Add(int64(n))
		c.stats.InFlight.Add(int64(n))
		c.dispatch(ctx, m.rows, m.lease, m.claim.Limit, m.seen, m.blocked)
	}
}

// onCredit turns returned credit into the planner's event: which of the
// keys whose runs ended may have a next row already (one arrived after
// their run was claimed).
func (c *claimer) onCredit(m *credit) claimplan.Event {
	c.stats.InFlight.Add(-int64(m.n))
	ev := claimplan.Credit{N: m.n, RetryIn: m.retryIn, Released: m.released}
	if len(m.continued) > 0 {
		ev.Continued = make([]claimplan.Continuation, len(m.continued))
		for i, k := range m.continued {
			ev.Continued[i] = claimplan.Continuation{Pos: k.pos, Rewinds: k.rewinds}
			if e := c.keys[dialects.Lane{Key: k.pos.Key}]; e != nil && e.ended {
				ev.Continued[i].Ended = true
				ev.Successors = ev.Successors || e.seen < c.plan.Seen()
			}
		}
	}
	return ev
}

// dispatch hands each key's run to its key actor and the unkeyed rows to the
// pool; with fan-out routes, the units of fan-out rows to their lanes'
// actors (splitClaim). Rows arrive sorted by key, then sequence. The lease
// keeper hears of the claims first, so that it can never receive their
// release before them, and the completer of the fan-out rows before their
// units end. A run shorter than its claim's share (claimplan.Share) ended at
// its key's last claimable row.
func (c *claimer) dispatch(ctx actor.Context, rows []dialects.Row, l *upkeep.Lease, requested int, seen int64, blocked []dialects.Lane) {
	share := claimplan.Share(rows, requested)
	draining := c.plan.Mode() == claimplan.Draining
	var runs []laneRun
	if c.fanOut {
		var fans []*fanRow
		runs, fans = c.delivery.splitClaim(rows, l, blocked)
		if len(fans) > 0 {
			ctx.Send(c.completer, &fanClaimed{rows: fans})
		}
	} else {
		runs = splitByKey(rows, l)
	}
	track := make([]upkeep.TrackEntry, 0, len(rows))
	for i := range runs {
		b := &runs[i]
		b.pid = c.pool
		if b.lane.Key != "" {
			b.pid = c.keyActor(ctx, b.lane, len(b.run), share, seen)
		}
		for _, r := range b.run {
			track = append(track, upkeep.TrackEntry{Claim: r.Claim, PID: b.pid})
		}
	}
	if c.fanOut {
		// Fan-out rows whose every lane is blocked are in no run, and the
		// lease keeper renews them until they are written.
		track = c.trackUnsent(track, rows)
	}
	ctx.Send(c.leaseKeeper, &upkeep.Track{Lease: l, Entries: track})
	for _, b := range runs {
		ctx.Send(b.pid, &deliverRun{rows: b.run})
		if draining {
			// A claim that was running when the drain began: hand the rows
			// back at once.
			ctx.Send(b.pid, &drain{})
		}
	}
}

// splitByKey splits a claim's rows, sorted by key then sequence, into one
// run per key; the unkeyed rows' run (the empty key) is the pool's.
func splitByKey(rows []dialects.Row, l *upkeep.Lease) []laneRun {
	var runs []laneRun
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j].Key == rows[i].Key {
			j++
		}
		run := make([]claimed, 0, j-i)
		for _, r := range rows[i:j] {
			run = append(run, claimed{Row: r, lease: l})
		}
		runs = append(runs, laneRun{lane: dialects.Lane{Key: rows[i].Key}, run: run})
		i = j
	}
	return runs
}

// trackUnsent adds the claims of rows that no run carries (fan-out rows
// whose lanes are all blocked) to the lease keeper's entries, with no
// actor to cancel.
func (c *claimer) trackUnsent(track []upkeep.TrackEntry, rows []dialects.Row) []upkeep.TrackEntry {
	sent := make(map[uuid.UUID]bool, len(track))
	for _, t := range track {
		sent[t.Claim.ID] = true
	}
	for _, r := range rows {
		if !sent[r.ID] {
			track = append(track, upkeep.TrackEntry{Claim: r.Claim})
		}
	}
	return track
}

// keyActor is the actor of a key, or of a fan-out lane, spawned on demand,
// told that a run of n rows goes to it.
func (c *claimer) keyActor(ctx actor.Context, lane dialects.Lane, n, share int, seen int64) *actor.PID {
	entry := c.keys[lane]
	if entry == nil {
		entry = &keyEntry{pid: c.spawnKey(ctx, lane)}
		c.keys[lane] = entry
		c.stats.KeyActors.Add(1)
	}
	entry.sent += n
	entry.ended, entry.seen = n < share, seen
	return entry.pid
}

// spawnKey spawns the actor of a key or lane, as a child of the claimer. Its
// name is generated: a key's next actor may start before the last one has
// stopped.
func (c *claimer) spawnKey(ctx actor.Context, lane dialects.Lane) *actor.PID {
	d, claimer, idle, clk := c.delivery, ctx.Self(), c.keyIdleAfter, c.clock
	props := actor.PropsFromProducer(func() actor.Actor { return newKeyActor(d, lane, claimer, idle, clk) },
		actor.WithMailbox(c.keyMailbox))
	return ctx.SpawnPrefix(props, "key")
}

// startProbe asks the database whether rows arrived or settled since the
// last claim.
func (c *claimer) startProbe() {
	root, self, dialect, bg := c.root, c.self, c.dialect, c.bg
	c.stats.Probes.Add(1)
	go func() {
		qctx, cancel := context.WithTimeout(bg, time.Second)
		p, err := dialect.OutboxProbe(qctx)
		cancel()
		root.Send(self, &probeResult{probe: p, err: err})
	}()
}

// readFloors reads the floors (see claimplan).
func (c *claimer) readFloors(r claimplan.ReadFloors) {
	root, self, dialect, bg, stats, clk := c.root, c.self, c.dialect, c.bg, c.stats, c.clock
	go func() {
		qctx, cancel := context.WithTimeout(bg, time.Minute)
		defer cancel()
		start := clk.Now()
		f, err := dialect.OutboxFloors(qctx, r.Settled, r.Prev)
		took := clk.Now().Sub(start)
		stats.looked(floorsLook, took)
		root.Send(self, &floorsResult{floors: f, took: took, err: err})
	}()
}

// lookForStragglers looks for rows left behind the walks' lookback (see
// claimplan).
func (c *claimer) lookForStragglers(l claimplan.LookForStragglers) {
	root, self, dialect, bg, stats, clk := c.root, c.self, c.dialect, c.bg, c.stats, c.clock
	go func() {
		qctx, cancel := context.WithTimeout(bg, time.Minute)
		defer cancel()
		start := clk.Now()
		ago, found, err := dialect.OutboxStragglers(qctx, l.Gate, l.Bounds)
		took := clk.Now().Sub(start)
		stats.looked(stragglersLook, took)
		root.Send(self, &stragglersResult{ago: ago, found: found, sentAt: start, took: took, err: err})
	}()
}
