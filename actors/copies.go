package actors

import (
	"context"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/queuebox/queuebox/actors/internal/upkeep"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/backoff"
	"github.com/queuebox/queuebox/internal/clock"
)

// The copies path delivers the copies of fan-out rows (dialects.Copies)
// with the engine's own actors: key actors (one per lane), a pool, a
// completer and a lease keeper of its own, over copiesRelay, which turns
// the Relay statements they run into the Copy ones, and the engine's
// destinations (their sinks, pauses, circuits and flow). Only its claimer
// is its own (copyClaimer): copies are written by the relay itself, in
// order, so they need no gate, no bounds and no probing at a pace; the
// copies path claims when this process wrote copies (the completer tells
// it), when a copy comes due (a retry, a deferral, the probe's NextDue),
// when copies went back to pending, and at a safety net's tick.

// copySafetyNet is how often the copies path probes the copies' change
// counter (CopyProbe), whoever wrote them; copyBlindClaim how often it
// claims even when the counter has not moved, once copies exist: a copy
// whose lane waited for an outbox row that another replica completed
// without copies becomes claimable without a change to the counter.
const (
	copySafetyNet  = 3 * time.Second
	copyBlindClaim = 15 * time.Second
)

// copiesRelay is the Relay the copies path's completer and lease keeper
// run: their statements on the copies table. They call nothing else.
type copiesRelay struct {
	dialects.Relay
	copies dialects.Copies
}

func (r copiesRelay) OutboxComplete(ctx context.Context, out []dialects.Outcome) ([]dialects.Claim, error) {
	return r.copies.CopyComplete(ctx, out)
}

func (r copiesRelay) OutboxRenewLeases(ctx context.Context, claims []dialects.Claim, lease time.Duration) ([]dialects.Claim, error) {
	return r.copies.CopyRenewLeases(ctx, claims, lease)
}

// OutboxRewind does nothing: copies claims have no bounds to set aside.
func (copiesRelay) OutboxRewind(context.Context) error { return nil }

// Messages of the copies claimer.
type (
	// copiesWritten: the completer wrote copies, the earliest due in in.
	copiesWritten struct{ in time.Duration }
	// copyTick: the safety net's tick.
	copyTick   struct{}
	copyProbed struct {
		probe dialects.Probe
		err   error
	}
	copyClaimed struct {
		rows  []dialects.Row
		lease *upkeep.Lease
		limit int
		err   error
	}
	// copyDue: a timer fired for copies due (gen tells a stale one).
	copyDue struct{ gen uint64 }
)

// copyClaimer claims copies and hands them to the lanes' key actors and
// the pool, as the claimer does rows, within its own credit
// (outbox.maxInFlight). Its I/O runs in goroutines that report back.
type copyClaimer struct {
	copies      dialects.Copies
	clock       clock.Clock
	leaseLength time.Duration
	batch       int
	maxInFlight int
	pool        *actor.PID
	leaseKeeper *actor.PID
	delivery    *deliverer
	// keyIdleAfter and keyMailbox build the lanes' key actors.
	keyIdleAfter time.Duration
	keyMailbox   actor.MailboxProducer
	bg           context.Context
	log          *slog.Logger
	// drained is closed once a drain has every outcome written.
	drained chan struct{}

	keys     map[dialects.Lane]*keyEntry
	inFlight int
	// claiming: a claim runs; again: claim once it returns, or once
	// credit allows.
	claiming, again, draining bool
	// seen is the change counter at the last probe; found says the last
	// claim took copies; lastClaim is when a claim last started.
	seen      int64
	found     bool
	lastClaim time.Time
	failing   backoff.Capped
	failures  int
	// due is the timer for the earliest copy due, at dueAt.
	due    clock.Timer
	dueAt  time.Time
	dueGen uint64
	root   *actor.RootContext
	self   *actor.PID
}

func newCopyClaimer(c copyClaimer) *copyClaimer {
	c.keys = map[dialects.Lane]*keyEntry{}
	c.failing = backoff.Capped{First: 100 * time.Millisecond, Max: 5 * time.Second}
	return &c
}

func (c *copyClaimer) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		c.root, c.self = ctx.ActorSystem().Root, ctx.Self()
		c.claim() // copies may wait from before
	case *actor.Stopping:
		if c.due != nil {
			c.due.Stop()
		}
	case *copiesWritten:
		c.claimIn(m.in)
	case *copyTick:
		c.probe()
	case *copyProbed:
		c.onProbe(m)
	case *copyClaimed:
		c.onClaim(ctx, m)
	case *credit:
		c.inFlight -= m.n
		if m.retryIn > 0 {
			c.armDue(m.retryIn)
		}
		// While claims take copies, the end of some lets the copies
		// behind them in their lanes be claimed.
		if m.released || c.again || c.found {
			c.claim()
		}
	case *copyDue:
		if m.gen == c.dueGen {
			c.due = nil
			c.claim()
		}
	case *upkeep.Released:
		c.claim()
	case *keyIdle:
		if e := c.keys[m.lane]; e != nil && e.pid.Equal(m.pid) && e.sent == m.done {
			delete(c.keys, m.lane)
			ctx.Poison(m.pid)
		}
	case *drain:
		c.draining = true
		for _, e := range c.keys {
			ctx.Send(e.pid, &drain{})
		}
		ctx.Send(c.pool, &drain{})
	}
	c.checkDrained()
}

func (c *copyClaimer) checkDrained() {
	if !c.draining || c.claiming || c.inFlight > 0 {
		return
	}
	select {
	case <-c.drained:
	default:
		close(c.drained)
	}
}

// claimIn claims now (in <= 0), or when a copy comes due in in.
func (c *copyClaimer) claimIn(in time.Duration) {
	if in <= 0 {
		c.claim()
		return
	}
	c.armDue(in)
}

// armDue arms the due timer for in from now, unless it fires sooner.
func (c *copyClaimer) armDue(in time.Duration) {
	at := c.clock.Now().Add(in)
	if c.due != nil && !c.dueAt.After(at) {
		return
	}
	if c.due != nil {
		c.due.Stop()
	}
	c.dueGen++
	root, self, msg := c.root, c.self, &copyDue{gen: c.dueGen}
	c.due, c.dueAt = c.clock.AfterFunc(in, func() { root.Send(self, msg) }), at
}

// probe reads the change counter and when the next copy comes due, unless a
// claim runs (its end decides what comes next).
func (c *copyClaimer) probe() {
	if c.claiming || c.draining {
		return
	}
	root, self, copies, bg := c.root, c.self, c.copies, c.bg
	go func() {
		qctx, cancel := context.WithTimeout(bg, 5*time.Second)
		p, err := copies.CopyProbe(qctx)
		cancel()
		root.Send(self, &copyProbed{probe: p, err: err})
	}()
}

// onProbe claims when copies changed since the last probe, when the last
// claim took some (there may be more), or, once copies exist, every
// copyBlindClaim; and arms the timer for the next copy due.
func (c *copyClaimer) onProbe(m *copyProbed) {
	if m.err != nil {
		c.log.Debug("probing the copies failed", "error", m.err)
		return
	}
	p := m.probe
	if p.Later {
		c.armDue(max(p.NextDue, time.Millisecond))
	}
	moved := p.Last != c.seen
	c.seen = p.Last
	if moved || c.found || (p.Last > 0 && clock.Since(c.clock, c.lastClaim) >= copyBlindClaim) {
		c.claim()
	}
}

// claim starts a claim for as many copies as the credit allows, unless one
// runs (then it claims again when it returns).
func (c *copyClaimer) claim() {
	if c.draining || c.self == nil {
		return
	}
	if c.claiming {
		c.again = true
		return
	}
	limit := min(c.batch, c.maxInFlight-c.inFlight)
	if limit < max(1, min(c.batch, c.maxInFlight)/4) {
		c.again = true // when credit comes back
		return
	}
	c.claiming, c.again, c.lastClaim = true, false, c.clock.Now()
	l := upkeep.NewLease(uuid.New(), 0)
	root, self, copies, bg, length, clk := c.root, c.self, c.copies, c.bg, c.leaseLength, c.clock
	go func() {
		qctx, cancel := context.WithTimeout(bg, max(length/2, time.Second))
		defer cancel()
		sentAt := clk.Now()
		got, err := copies.CopyClaim(qctx, dialects.ClaimParams{Limit: limit, Lease: length, Token: l.Token()})
		l.Extend(sentAt, length)
		root.Send(self, &copyClaimed{rows: got.Rows, lease: l, limit: limit, err: err})
	}()
}

func (c *copyClaimer) onClaim(ctx actor.Context, m *copyClaimed) {
	c.claiming = false
	if m.err != nil {
		if c.failures++; c.failures == 1 {
			c.log.Warn("claiming copies failed; retrying", "error", m.err)
		}
		c.again = false
		c.armDue(c.failing.Next())
		return
	}
	if c.failures > 0 {
		c.log.Info("claiming copies works again", "afterFailures", c.failures)
		c.failures = 0
		c.failing.Reset()
	}
	n := len(m.rows)
	c.found = n > 0
	if n > 0 {
		c.inFlight += n
		c.dispatch(ctx, m.rows, m.lease)
	}
	if n >= m.limit || c.again {
		c.claim()
	}
}

// dispatch hands each lane's copies, in sequence order, to the lane's key
// actor and the unkeyed copies to the pool. Copies arrive sorted by
// destination, key, then sequence.
func (c *copyClaimer) dispatch(ctx actor.Context, rows []dialects.Row, l *upkeep.Lease) {
	var runs []laneRun
	for i := range rows {
		lane := dialects.Lane{Key: rows[i].Key}
		if lane.Key != "" && rows[i].CopyOf != nil {
			lane.Destination = rows[i].CopyOf.Destination
		}
		if len(runs) == 0 || runs[len(runs)-1].lane != lane {
			runs = append(runs, laneRun{lane: lane})
		}
		runs[len(runs)-1].run = append(runs[len(runs)-1].run, claimed{Row: rows[i], lease: l})
	}
	track := make([]upkeep.TrackEntry, 0, len(rows))
	for i := range runs {
		b := &runs[i]
		b.pid = c.pool
		if b.lane.Key != "" {
			e := c.keys[b.lane]
			if e == nil {
				e = &keyEntry{pid: c.spawnKey(ctx, b.lane)}
				c.keys[b.lane] = e
			}
			e.sent += len(b.run)
			b.pid = e.pid
		}
		for _, r := range b.run {
			track = append(track, upkeep.TrackEntry{Claim: r.Claim, PID: b.pid})
		}
	}
	ctx.Send(c.leaseKeeper, &upkeep.Track{Lease: l, Entries: track})
	for _, b := range runs {
		ctx.Send(b.pid, &deliverRun{rows: b.run})
		if c.draining {
			ctx.Send(b.pid, &drain{})
		}
	}
}

func (c *copyClaimer) spawnKey(ctx actor.Context, lane dialects.Lane) *actor.PID {
	d, self, idle, clk := c.delivery, ctx.Self(), c.keyIdleAfter, c.clock
	props := actor.PropsFromProducer(func() actor.Actor { return newKeyActor(d, lane, self, idle, clk) },
		actor.WithMailbox(c.keyMailbox))
	return ctx.SpawnPrefix(props, "lane")
}

// copyUpkeep returns the copies of expired leases to pending (keeping this
// replica's own claims), and deletes old copies as retention says. Each
// runs in a loop of the engine's background.
type copyUpkeep struct {
	copies      dialects.Copies
	leaseKeeper *actor.PID
	claimer     *actor.PID
	leaseLength time.Duration
	retention   Retention
	log         *slog.Logger
	loops       *background
}

func (u *copyUpkeep) start(root *actor.RootContext) {
	u.loops.every(max(u.leaseLength/3, 100*time.Millisecond), func() { u.releaseExpired(root) })
	if u.retention.Interval > 0 {
		u.loops.every(u.retention.Interval, u.purge)
	}
}

func (u *copyUpkeep) releaseExpired(root *actor.RootContext) {
	res, err := root.RequestFuture(u.leaseKeeper, &upkeep.LiveTokens{}, 10*time.Second).Result()
	if err != nil {
		return
	}
	keep, _ := res.([]uuid.UUID)
	ctx, cancel := context.WithTimeout(u.loops.ctx, 30*time.Second)
	n, err := u.copies.CopyReleaseExpired(ctx, 1000, keep)
	cancel()
	if err != nil || n == 0 {
		return
	}
	u.log.Info("released copies whose leases had passed", "copies", n)
	root.Send(u.claimer, &upkeep.Released{})
}

func (u *copyUpkeep) purge() {
	r := u.retention
	batch := r.BatchSize
	if batch <= 0 {
		batch = 1000
	}
	for _, p := range []struct {
		state dialects.State
		age   time.Duration
	}{{dialects.Delivered, r.Delivered}, {dialects.Dead, r.Dead}} {
		total := 0
		for p.age > 0 && u.loops.ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(u.loops.ctx, 30*time.Second)
			n, err := u.copies.CopyPurge(ctx, dialects.PurgeParams{State: p.state, OlderThan: p.age, Batch: batch})
			cancel()
			if err != nil {
				u.log.Warn("retention delete of copies failed", "state", p.state, "error", err)
				break
			}
			total += n
			if n < batch {
				break
			}
		}
		if total > 0 {
			u.log.Info("retention deleted copies", "state", p.state, "copies", total)
		}
	}
}
