package actors

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/backoff"
)

// Messages of the claimer.
type (
	claimTick struct{}
	// wake asks for a claim now; released says rows came back to pending
	// with their old schedule (leases that expired).
	wake struct{ released bool }
	// nudged: logical replication says rows committed, or its state
	// changed (see dialects.Wakeups).
	nudged struct{}
	// dueResult: how long until the next row scheduled later comes due.
	dueResult struct {
		in    time.Duration
		found bool
		err   error
	}
	// probeTick asks an idle claimer to probe: has anything arrived?
	probeTick   struct{}
	probeResult struct {
		probe dialects.Probe
		err   error
	}
	claimResult struct {
		rows      []dialects.Row
		err       error
		requested int
		// run is the run length the claim asked for (headPolicy), heads
		// the most heads it could take (ClaimParams.MaxHeads).
		run, heads int
		lease      *lease
		kind       claimKind
		took       time.Duration
		// probe is the probe read right before the claim (gated claims);
		// seen and settled are what the claim's watermark knew from it.
		probe         *dialects.Probe
		seen, settled int64
		// plan is what the claim took from the reach; report what it
		// told of its walk.
		plan   claimPlan
		report dialects.ClaimReport
		// cursor is where the next claim by key goes on ("": the claim
		// learnt none).
		cursor string
	}
	// floorsResult is a read of the floors (see reach.go).
	floorsResult struct {
		floors dialects.Floors
		took   time.Duration
		err    error
	}
	// stragglersResult is a look for stragglers (see reach.go).
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
		// retryIn is how soon the earliest retry among them comes due (0:
		// none was retried).
		retryIn time.Duration
	}
	drain struct{}
	// keyIdle: a key actor has had nothing to do for keyIdleMs; done is how
	// many rows it has finished.
	keyIdle struct {
		key  string
		pid  *actor.PID
		done int
	}
)

type keyEntry struct {
	pid  *actor.PID
	sent int
	// ended: the last run sent to the key was shorter than its claim
	// allowed, so the key had no other claimable row then.
	ended bool
}

// claimer claims batches within its credit, groups them by key and hands
// each key's run to that key's actor (spawned on demand), unkeyed rows to the
// unordered pool. It never blocks on the database: the claim runs in a
// goroutine that sends the result back.
type claimer struct {
	dialect     dialects.Relay
	batchSize   int
	maxInFlight int
	leaseLength time.Duration
	pool        *actor.PID
	leaseKeeper *actor.PID
	// delivery, keyIdleAfter and keyMailbox build the key actors.
	delivery     *deliverer
	keyIdleAfter time.Duration
	keyMailbox   actor.MailboxProducer
	// bg bounds the claim statements; it ends when the engine stops.
	bg    context.Context
	log   *slog.Logger
	stats *Stats
	obs   Observer
	// budget bounds the claims that run at once.
	budget *statementBudget
	// ready is the engine's readiness: the last claim reached the database.
	ready *atomic.Bool
	// drained is closed once, when a drain has every outcome written.
	drained chan struct{}

	free     int
	claiming int  // claim statements running (at most budget.statements())
	more     bool // the last claim was full: more rows are likely waiting
	again    bool // a wake came while a claim was running
	// waitCredit: after a short claim, how many more rows must finish
	// before credit alone triggers the next claim. A short claim means most
	// keys are busy; claiming again at every completion would scan the same
	// busy keys' rows over and over.
	waitCredit int
	draining   bool
	keys       map[string]*keyEntry
	// failed paces claims while the database refuses them.
	failed  backoff.Capped
	retryAt time.Time
	heads   headPolicy
	choice  claimChoice

	// gate keeps keyed rows in insert order (see gate.go); probing is
	// whether a probe of the idle clock is under way. reach bounds the
	// claims by what the claimer knows (see reach.go).
	gate    gate
	probing bool
	reach   reach
	// sawAtClaim and settledAtClaim are what the last claim knew: a probe
	// that sees more claims again.
	sawAtClaim, settledAtClaim int64
	// pace is the clock of probeTick: idle (see idleAfter) once nothing
	// has arrived, settled or been claimed for a while and no row is in
	// flight. lastNews is when something last did.
	pace     *pace
	lastNews time.Time
	// wakeups nudges the claimer as rows commit (nil: it probes);
	// listening says nudges flow now.
	wakeups          dialects.Wakeups
	listening, heard bool
	// root and self let goroutines started outside Receive's context
	// report back.
	root *actor.RootContext
	self *actor.PID
	// While idle, the poll claims only once the next row scheduled later
	// is due (nextDue, known from OutboxNextDue), and at least every
	// idlePoll: an idle replica then runs next to no statements. asking
	// says an OutboxNextDue runs.
	pollInterval time.Duration
	nextDue      time.Time
	dueKnown     bool
	asking       bool
	// exhausted: the last claim that looked at every key found nothing to
	// take, so the table holds nothing claimable until rows arrive, settle,
	// come back or come due.
	exhausted bool
	// claimsStarted counts the claims started, so that a check for a slow
	// claim (slowClaimCheck) can tell whether one started since; typical is
	// a moving average of the claims' durations.
	claimsStarted int64
	typical       time.Duration
	// lastStart is when the last claim started; paced says a claim waits
	// for heldClaimEvery to pass since (a heldPace message ends the wait).
	lastStart time.Time
	paced     bool
	// cursor is the key after which the next claim by key goes on
	// (ClaimParams.After), so that keys take turns: the last non-empty
	// Claimed.Cursor.
	cursor string
}

// heldPace ends a claim's wait for heldClaimEvery.
type heldPace struct{}

// heldClaimEvery is how long, while a long transaction holds the horizon
// back, a replica whose last claim was not full waits from one claim's
// start to the next. Claims otherwise follow each other as fast as the
// outcomes come back (one every 5 ms or so at 1,000 rows/s, a few rows
// each), and each costs a probe, a claim and the reads of its walk, which
// passes over the entries of every row that became due within its margin:
// the transaction keeps them all. On a busy server those claims were a
// large share of its work, and the rest of the database slowed with them.
// Waiting between claims makes each take more rows for about the same
// cost. A full claim does not wait: a backlog is claimed back to back.
// Since the claims' ranges are bounded (reach.go), a claim under a held
// horizon costs about what it costs without one (1 ms against 0.8 in the
// long-transaction scenario), so the wait is short: 5 ms gave that
// scenario's held windows a p99 of 12 ms (20 ms with 10) for a server
// still busier without a hold than with one.
const heldClaimEvery = 5 * time.Millisecond

// slowClaimCheck: the claim numbered n may still run (see slowClaimAfter).
type slowClaimCheck struct{ n int64 }

// slowClaimAfter is how long a claim runs, at least slowClaimFactor times
// the typical claim, before the claimer probes beside it: probes wait while
// a claim runs (the claim read the same before it began), so one claim
// slowed by a commit's flush or a busy server would otherwise hold back
// every row that commits meanwhile. When the probe finds news and the
// budget has room, a second claim takes it.
const (
	slowClaimAfter  = 5 * time.Millisecond
	slowClaimFactor = 3
)

// slowAfter is how long the claim just started may run before the claimer
// probes beside it.
func (c *claimer) slowAfter() time.Duration {
	return max(slowClaimAfter, slowClaimFactor*c.typical)
}

// idlePoll is the longest an idle claimer goes without a claim.
const idlePoll = 30 * time.Second

// newClaimer takes a claimer with its collaborators filled in and sets its
// starting state: all the credit, no keys.
func newClaimer(c claimer) *claimer {
	c.free = c.maxInFlight
	c.keys = map[string]*keyEntry{}
	c.choice.keyed = 0.5
	c.heads = newHeadPolicy()
	c.failed = backoff.Capped{First: 100 * time.Millisecond, Max: 5 * time.Second}
	c.reach = newReach(wallClock{})
	c.gate = gate{writers: c.dialect.OutboxWriters, log: c.log, clock: wallClock{},
		waiting: "keyed rows wait for an open transaction that inserted outbox rows; they are delivered when it commits or rolls back (queuebox status shows it)",
		flowing: "keyed rows flow again: the transactions they waited for have ended",
		blindly: "cannot see other transactions, so rows of one key written by concurrent transactions may be delivered in commit order rather than insert order; grant the permission the error names"}
	return &c
}

// horizonHeld says whether, at the janitor's last look, a transaction had
// held the database's horizon back for heldAfter or longer (see reach.held).
// The age at the look, not since: a look that caught a bulk insert a second
// old, followed by none for a while, made a replica that drained the
// insert's rows behave as under a long transaction once the insert would
// have been five seconds old, long after it had committed.
func (c *claimer) horizonHeld() bool {
	if c.stats == nil {
		return false
	}
	return c.stats.Horizon.Load().HeldAtRead(heldAfter)
}

func (c *claimer) threshold() int {
	return max(1, min(c.batchSize, c.maxInFlight)/4)
}

func (c *claimer) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		// lastNews stays zero: a replica starts at the idle pace and
		// speeds up when its first claim finds rows, so starting one
		// beside busy replicas, or on an empty table, costs no burst of
		// probes.
		c.root, c.self = ctx.ActorSystem().Root, ctx.Self()
		c.hearWakeups()
		c.maybeClaim(ctx)
	case *claimTick:
		if c.exhausted && c.stats.Idle.Load() && c.dueKnown && time.Now().Before(c.nextDue) {
			return // nothing is due until then, and probes watch for arrivals
		}
		c.maybeClaim(ctx)
	case *nudged:
		c.stats.Nudges.Add(1)
		c.hearWakeups()
		// Rows committed: look now, and at the busy pace for a while (the
		// transaction may become visible an instant after the nudge).
		c.lastNews = time.Now()
		if c.claiming > 0 {
			// The running claim read the sequence before it began: the
			// rows of this nudge may be newer. Claim again after it.
			c.again = true
		}
		c.probe(ctx)
	case *dueResult:
		c.asking = false
		if m.err == nil {
			c.dueKnown, c.nextDue = true, time.Now().Add(min(idlePoll, max(c.pollInterval, m.in)))
			if !m.found {
				c.nextDue = time.Now().Add(idlePoll)
			}
		}
	case *wake:
		if m.released {
			// Rows came back to pending with their old schedule: look at
			// everything again.
			c.reach.lowerTo(time.Time{})
		}
		c.exhausted = false
		if c.claiming > 0 {
			c.again = true
		}
		c.maybeClaim(ctx)
	case *floorsResult:
		c.reach.floorsRead(m.floors, m.took, m.err)
	case *stragglersResult:
		c.reach.stragglersFound(m.ago, m.found, m.sentAt, m.took, m.err)
		if m.found && m.err == nil {
			c.stats.looked(stragglersFoundLook, m.ago)
		}
		if m.found {
			c.exhausted = false
			c.maybeClaim(ctx)
		}
	case *probeTick:
		c.probe(ctx)
	case *heldPace:
		c.paced = false
		c.maybeClaim(ctx)
		c.repace(time.Now())
	case *slowClaimCheck:
		// No claim started since claim m.n, and one still runs: look
		// beside it, and again after as long while it goes on.
		if m.n == c.claimsStarted && c.claiming > 0 && c.claiming < c.budget.statements() {
			c.probeBeside(ctx)
			c.checkSlow(m.n)
		}
	case *probeResult:
		c.onProbe(ctx, m)
	case *writersResult:
		c.gate.onWriters(m)
	case *claimResult:
		c.onClaim(ctx, m)
	case *credit:
		c.free += m.n
		c.stats.InFlight.Add(-int64(m.n))
		if c.draining {
			c.checkDrained()
		} else {
			// Written outcomes can make the next rows of their keys heads:
			// claim now rather than at the next poll.
			for i := range m.continued {
				if e := c.keys[m.continued[i].pos.Key]; e != nil && e.ended {
					m.continued[i].ended = true
				}
			}
			c.reach.continued(m.continued)
			if m.retryIn > 0 {
				c.reach.walkBy(time.Now().Add(m.retryIn))
			}
			c.waitCredit -= m.n
			if c.waitCredit <= 0 || len(c.reach.continuing) >= c.threshold() {
				c.maybeClaim(ctx)
			}
		}
	case *keyIdle:
		if e := c.keys[m.key]; e != nil && e.pid.Equal(m.pid) && e.sent == m.done {
			delete(c.keys, m.key)
			c.stats.KeyActors.Add(-1)
			ctx.Poison(m.pid)
		}
	case *drain:
		c.draining = true
		for _, e := range c.keys {
			ctx.Send(e.pid, &drain{})
		}
		ctx.Send(c.pool, &drain{})
		c.checkDrained()
	}
}

func (c *claimer) checkDrained() {
	if c.free == c.maxInFlight && c.claiming == 0 {
		select {
		case <-c.drained:
		default:
			close(c.drained)
		}
	}
}

func (c *claimer) maybeClaim(ctx actor.Context) {
	for c.claiming < c.budget.statements() && c.claimOne(ctx) {
		// A second claim only while the first is full: when the table is
		// nearly drained, one is plenty.
		if !c.more {
			return
		}
	}
}

func (c *claimer) claimOne(ctx actor.Context) bool {
	if c.draining || c.free < c.threshold() || time.Now().Before(c.retryAt) || c.paced {
		return false
	}
	now := time.Now()
	c.reach.held = c.horizonHeld()
	if wait := c.lastStart.Add(heldClaimEvery).Sub(now); c.reach.held && !c.more && wait > 0 && c.root != nil {
		c.paced = true
		c.pace.hold()
		root, self := c.root, c.self
		time.AfterFunc(wait, func() { root.Send(self, &heldPace{}) })
		return false
	}
	limit := min(c.batchSize, c.free)
	c.free -= limit
	c.claiming++
	c.pace.hold() // the claim probes first; ticks meanwhile would be ignored
	heads, run := c.heads.next(limit)
	c.reach.seen = mark{c.gate.wm.LastSeen(), c.gate.wm.Settled()}
	plan := c.reach.plan(c.choice.pick(c.heads.run), heads)
	kind := plan.kind
	if plan.continueOnly && len(plan.continued) == 0 {
		// By key, with nothing to continue and the walk over the keys not
		// due yet: nothing this claim could take.
		c.free += limit
		c.claiming--
		c.repace(time.Now())
		return false
	}
	c.claimsStarted++
	c.lastStart = now
	c.checkSlow(c.claimsStarted)
	l := &lease{token: uuid.New(), rewinds: c.reach.rewinds}
	if plan.bounds != nil {
		l.rewinds = plan.bounds.Rewinds
	}
	root, self := ctx.ActorSystem().Root, ctx.Self()
	dialect, bg, stats, length := c.dialect, c.bg, c.stats, c.leaseLength
	params := dialects.ClaimParams{Limit: limit, Lease: length, Token: l.token, MaxHeads: heads,
		Continue: plan.continued, Bounds: plan.bounds}
	switch {
	case plan.continueOnly:
		params.Walk = dialects.WalkNone
	case kind == byKeyClaim:
		params.Walk, params.After = dialects.WalkKeys, c.cursor
	}
	c.readFloors(ctx)
	c.lookForStragglers(ctx)
	// A gated claim probes first, on a copy of the watermark: the claim
	// then takes every row that arrived and settled up to that moment.
	wm, clk := c.gate.forStatement(), c.gate.clock
	c.sawAtClaim, c.settledAtClaim = c.gate.wm.LastSeen(), c.gate.wm.Settled()
	go func() {
		res := &claimResult{requested: limit, run: run, heads: heads, lease: l, kind: kind, plan: plan}
		qctx, cancel := context.WithTimeout(bg, max(length/2, time.Second))
		defer cancel()
		if wm != nil {
			if res.probe, res.err = probeInto(qctx, dialect.OutboxProbe, wm, clk); res.err != nil {
				root.Send(self, res)
				return
			}
			params.Gate = wm.Gate()
			res.seen, res.settled = wm.LastSeen(), wm.Settled()
		}
		sentAt := time.Now()
		stats.ClaimStatements.Add(1)
		claimed, err := dialect.OutboxClaim(qctx, params)
		res.rows, res.cursor, res.report, res.err = claimed.Rows, claimed.Cursor, claimed.Walk, err
		res.took = time.Since(sentAt)
		stats.ClaimTime.Add(int64(res.took))
		l.extend(sentAt, length)
		root.Send(self, res)
	}()
	return true
}

// readFloors starts a read of the floors when one is due (see reach.go).
// It goes by the gate's watermark: every row up to it is visible to the
// read.
func (c *claimer) readFloors(ctx actor.Context) {
	if c.gate.blind || !c.reach.floorsDue() {
		return
	}
	root, self, dialect, bg, stats, settled := ctx.ActorSystem().Root, ctx.Self(), c.dialect, c.bg, c.stats, c.gate.wm.Settled()
	prev := c.reach.lastFloors()
	go func() {
		qctx, cancel := context.WithTimeout(bg, time.Minute)
		defer cancel()
		start := time.Now()
		f, err := dialect.OutboxFloors(qctx, settled, prev)
		stats.looked(floorsLook, time.Since(start))
		root.Send(self, &floorsResult{floors: f, took: time.Since(start), err: err})
	}()
}

// lookForStragglers starts a look for stragglers when one is due (see
// reach.go), on the gate as it stands: a row the gate holds back is no
// straggler yet.
func (c *claimer) lookForStragglers(ctx actor.Context) {
	if c.gate.blind {
		return
	}
	b, ok := c.reach.stragglersDue()
	if !ok {
		return
	}
	root, self, dialect, bg, stats, g := ctx.ActorSystem().Root, ctx.Self(), c.dialect, c.bg, c.stats, c.gate.wm.Gate()
	go func() {
		qctx, cancel := context.WithTimeout(bg, time.Minute)
		defer cancel()
		start := time.Now()
		ago, found, err := dialect.OutboxStragglers(qctx, g, b)
		stats.looked(stragglersLook, time.Since(start))
		root.Send(self, &stragglersResult{ago: ago, found: found, sentAt: start, took: time.Since(start), err: err})
	}()
}

// probe asks the database, when no claim runs, whether rows arrived or
// settled since the last claim. A claim probes by itself, so a probe while
// one runs would mostly learn nothing new; probeBeside does while a claim
// is slow.
func (c *claimer) probe(ctx actor.Context) {
	c.repace(time.Now())
	if c.claiming > 0 || c.paced {
		// A claim runs, or one waits to run: each probes first.
		return
	}
	c.probeBeside(ctx)
}

// checkSlow arms the check for a slow claim numbered n.
func (c *claimer) checkSlow(n int64) {
	if c.root == nil {
		return
	}
	root, self := c.root, c.self
	time.AfterFunc(c.slowAfter(), func() { root.Send(self, &slowClaimCheck{n: n}) })
}

// probeBeside probes whether or not a claim runs.
func (c *claimer) probeBeside(ctx actor.Context) {
	if c.probing || c.draining || c.gate.blind || time.Now().Before(c.retryAt) {
		return
	}
	c.probing = true
	root, self, dialect, bg := ctx.ActorSystem().Root, ctx.Self(), c.dialect, c.bg
	c.stats.Probes.Add(1)
	go func() {
		qctx, cancel := context.WithTimeout(bg, time.Second)
		p, err := dialect.OutboxProbe(qctx)
		cancel()
		root.Send(self, &probeResult{probe: p, err: err})
	}()
}

func (c *claimer) onProbe(ctx actor.Context, m *probeResult) {
	c.probing = false
	if m.err != nil {
		if c.gate.refused(m.err) {
			c.reach.blind = true
		}
		return // claims find out whether the database is away
	}
	now := time.Now()
	c.gate.observe(ctx, c.bg, m.probe)
	rewound := c.reach.observe(m.probe)
	if c.gate.wm.LastSeen() > c.sawAtClaim || c.gate.wm.Settled() > c.settledAtClaim || rewound {
		c.exhausted = false
		c.lastNews = now
		c.maybeClaim(ctx)
	}
	c.repace(now)
}

// repace sets the probe clock: held while a claim runs (it probes by
// itself), idle once nothing happened for idleAfter and no row is in flight
// (outcomes make the next rows of their keys heads).
func (c *claimer) repace(now time.Time) {
	if c.claiming > 0 {
		c.pace.hold()
		c.stats.Idle.Store(false)
		return
	}
	idle := c.free == c.maxInFlight && now.Sub(c.lastNews) > idleAfter
	c.pace.set(idle)
	if c.stats.Idle.Swap(idle) != idle && !idle {
		c.dueKnown = false
	}
	if idle && !c.dueKnown && !c.asking {
		c.askNextDue()
	}
}

// askNextDue asks when the next row scheduled later comes due, for the
// idle poll; the answer comes as a *dueResult.
func (c *claimer) askNextDue() {
	if c.self == nil {
		return
	}
	c.asking = true
	root, self, dialect, bg := c.root, c.self, c.dialect, c.bg
	go func() {
		qctx, cancel := context.WithTimeout(bg, 5*time.Second)
		in, found, err := dialect.OutboxNextDue(qctx)
		cancel()
		root.Send(self, &dueResult{in: in, found: found, err: err})
	}()
}

// hearWakeups sets the idle pace for the wake-up source's state: a safety
// net while nudges flow, a backing-off probe otherwise.
func (c *claimer) hearWakeups() {
	if c.wakeups == nil {
		return
	}
	if l := c.wakeups.Status().Listening(); l != c.listening || !c.heard {
		c.listening, c.heard = l, true
		c.pace.setIdle(l)
	}
}

func (c *claimer) onClaim(ctx actor.Context, m *claimResult) {
	c.claiming--
	// The clock resumes once no claim runs, whichever way this ends.
	defer func() { c.repace(time.Now()) }()
	c.free += m.requested - len(m.rows)
	full := claimFull(m.rows, m.requested, m.heads)
	if m.probe != nil {
		c.gate.observe(ctx, c.bg, *m.probe)
		c.reach.observe(*m.probe)
	}
	if m.err != nil {
		c.reach.failed(m.plan)
	} else {
		since, _ := c.gate.wm.Waiting()
		if m.probe != nil {
			m.plan.writerAge = c.reach.writersSeen(m.probe.Writers, m.plan.sentAt)
		}
		c.reach.claimed(m.kind, m.plan, m.report, m.took, since)
		if m.kind == scheduleClaim && m.plan.full {
			c.stats.looked(fromStartWalk, m.took)
		}
		c.reach.took(m.plan, len(m.rows), full)
	}
	if m.err != nil && c.gate.refused(m.err) {
		c.reach.blind = true
		c.maybeClaim(ctx)
		return
	}
	if m.err != nil {
		// It took nothing: what led to it is news to the next probe, which
		// claims again once the backoff below has passed.
		c.sawAtClaim, c.settledAtClaim = -1, -1
		// Back off, so that a database outage is not hammered; the tick
		// resumes claiming.
		c.retryAt = time.Now().Add(c.failed.Next())
		if c.ready.Swap(false) || c.failed.Failures() == 1 {
			c.log.Warn("database unreachable; claims paused", "error", m.err)
		}
		if c.draining {
			c.checkDrained()
		}
		return
	}
	if n := c.failed.Failures(); n > 0 {
		c.log.Info("database reachable again; claiming", "afterFailures", n)
	}
	c.failed.Reset()
	c.ready.Store(true)
	if m.cursor != "" {
		c.cursor = m.cursor
	}
	n := len(m.rows)
	// A claim that was not full took what its own probe showed: a later
	// probe that shows the same is no news. A full one may have left rows
	// behind, which stay news until a claim takes them.
	if !full {
		c.sawAtClaim, c.settledAtClaim = max(c.sawAtClaim, m.seen), max(c.settledAtClaim, m.settled)
	}
	c.obs.Claimed(n, m.took)
	if !m.plan.full {
		c.typical = (c.typical*7 + m.took) / 8
	}
	if n > 0 {
		c.exhausted = false
	} else if !m.plan.continueOnly && len(c.reach.continuing) == 0 {
		// Nothing to take: an idle claimer asks again when the next row
		// comes due, rather than claim at every poll.
		c.exhausted, c.dueKnown = true, false
	}
	c.heads.observe(m.rows, m.requested, m.run)
	if n > 0 {
		c.lastNews = time.Now()
		c.stats.Claimed.Add(int64(n))
		c.stats.InFlight.Add(int64(n))
		c.dispatch(ctx, m.rows, m.lease, m.requested)
	}
	if c.draining {
		// A claim that was running when the drain began: hand the rows
		// back at once (dispatch already told each actor to drain).
		c.checkDrained()
		return
	}
	// A full claim says more rows are waiting: claim again at once. One
	// that came back less than half full and short of its heads says most
	// keys are busy: wait for some of them to finish rather than scan the
	// same busy keys again.
	c.more = full
	c.choice.observe(m.rows)
	ck := &c.stats.Claims[m.kind]
	ck.Statements.Add(1)
	ck.Rows.Add(int64(n))
	ck.Time.Add(int64(m.took))
	c.waitCredit = 0
	if !full && n*2 < m.requested {
		c.waitCredit = min(c.batchSize/2, c.maxInFlight-c.free)
	}
	// Keys to continue came back while this claim ran (the statements were
	// all taken): their next rows are heads now, so claim them at once
	// rather than at the next tick. So too when the last walk over the keys
	// left keys waiting and this claim by key took continuations only
	// (they filled it): nothing in flight may be left to bring a credit.
	// Only a claim by key: the next claim is one only if the policy still
	// picks it, and a claim in schedule order that found nothing says
	// nothing about the keys (keysWait would stay true, and the claimer
	// would claim back to back on an empty table).
	if c.more || c.again || len(c.reach.continuing) > 0 || m.kind == byKeyClaim && c.reach.keysWait() {
		c.again = false
		c.maybeClaim(ctx)
	}
}

// dispatch hands each key's run to its key actor and the unkeyed rows to the
// pool. Rows arrive sorted by key, then sequence. The lease keeper hears of
// the claims first, so that it can never receive their release before them.
// A run shorter than its claim's share (claimShare) ended at its key's last
// claimable row.
func (c *claimer) dispatch(ctx actor.Context, rows []dialects.Row, l *lease, requested int) {
	share := claimShare(rows, requested)
	type batch struct {
		pid *actor.PID
		run []claimed
	}
	var batches []batch
	track := make([]trackEntry, 0, len(rows))
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j].Key == rows[i].Key {
			j++
		}
		run := make([]claimed, 0, j-i)
		for _, r := range rows[i:j] {
			run = append(run, claimed{Row: r, lease: l})
		}
		pid := c.pool
		if key := rows[i].Key; key != "" {
			entry := c.keys[key]
			if entry == nil {
				entry = &keyEntry{pid: c.spawnKey(ctx, key)}
				c.keys[key] = entry
				c.stats.KeyActors.Add(1)
			}
			entry.sent += len(run)
			entry.ended = len(run) < share
			pid = entry.pid
		}
		for _, r := range run {
			track = append(track, trackEntry{claim: r.Claim, pid: pid})
		}
		batches = append(batches, batch{pid, run})
		i = j
	}
	ctx.Send(c.leaseKeeper, &trackClaims{lease: l, entries: track})
	for _, b := range batches {
		ctx.Send(b.pid, &deliverRun{rows: b.run})
		if c.draining {
			ctx.Send(b.pid, &drain{})
		}
	}
}

// spawnKey spawns the actor of a key, as a child of the claimer. Its name is
// generated: a key's next actor may start before the last one has stopped.
func (c *claimer) spawnKey(ctx actor.Context, key string) *actor.PID {
	d, claimer, idle := c.delivery, ctx.Self(), c.keyIdleAfter
	props := actor.PropsFromProducer(func() actor.Actor { return newKeyActor(d, key, claimer, idle) },
		actor.WithMailbox(c.keyMailbox))
	return ctx.SpawnPrefix(props, "key")
}
