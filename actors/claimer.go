package actors

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
)

// Messages of the claimer.
type (
	claimTick   struct{}
	wake        struct{}
	claimResult struct {
		rows      []dialects.Row
		err       error
		requested int
		lease     *lease
		windowed  bool
		took      time.Duration
	}
	// credit returns room for n rows: their outcomes are written.
	credit struct{ n int }
	drain  struct{}
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
}

// claimer claims batches within its credit, groups them by key and hands
// each key's run to that key's actor (spawned on demand), unkeyed rows to the
// unordered pool. It never blocks on the database: the claim runs in a
// goroutine that sends the result back.
type claimer struct {
	e        *Engine
	free     int
	claiming int  // claim statements running (at most maxClaims)
	more     bool // the last claim was full: more rows are likely waiting
	again    bool // a wake came while a claim was running
	// waitCredit: after a short claim, how many more rows must finish
	// before credit alone triggers the next claim. A short claim means most
	// keys are busy; claiming again at every completion would scan the same
	// busy keys' rows over and over.
	waitCredit int
	draining   bool
	keys       map[string]*keyEntry
	failures   int
	retryAt    time.Time
	heads      headPolicy
	window     windowChoice
}

func newClaimer(e *Engine) *claimer {
	return &claimer{e: e, free: e.opts.MaxInFlight, keys: map[string]*keyEntry{}}
}

func (c *claimer) threshold() int {
	return max(1, min(c.e.opts.BatchSize, c.e.opts.MaxInFlight)/4)
}

func (c *claimer) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		c.maybeClaim(ctx)
	case *claimTick:
		c.maybeClaim(ctx)
	case *wake:
		if c.claiming > 0 {
			c.again = true
		}
		c.maybeClaim(ctx)
	case *claimResult:
		c.onClaim(ctx, m)
	case *credit:
		c.free += m.n
		c.e.Stats.InFlight.Add(-int64(m.n))
		if c.draining {
			c.checkDrained()
		} else {
			// Written outcomes can make the next rows of their keys heads:
			// claim now rather than at the next poll.
			c.waitCredit -= m.n
			if c.waitCredit <= 0 {
				c.maybeClaim(ctx)
			}
		}
	case *keyIdle:
		if e := c.keys[m.key]; e != nil && e.pid.Equal(m.pid) && e.sent == m.done {
			delete(c.keys, m.key)
			c.e.Stats.KeyActors.Add(-1)
			ctx.Poison(m.pid)
		}
	case *drain:
		c.draining = true
		for _, e := range c.keys {
			ctx.Send(e.pid, &drain{})
		}
		ctx.Send(c.e.pool, &drain{})
		c.checkDrained()
	}
}

func (c *claimer) checkDrained() {
	if c.free == c.e.opts.MaxInFlight && c.claiming == 0 {
		select {
		case <-c.e.drained:
		default:
			close(c.e.drained)
		}
	}
}

// maxClaims is how many claim statements may run at once: two overlap (one
// is in the database while the other's rows are dispatched), as two
// claim-complete loops beat one on these machines. SKIP LOCKED keeps them
// from taking the same rows.
const maxClaims = 2

func (c *claimer) maybeClaim(ctx actor.Context) {
	for c.claiming < maxClaims && c.claimOne(ctx) {
		// A second claim only while the first is full: when the table is
		// nearly drained, one is plenty.
		if !c.more {
			return
		}
	}
}

func (c *claimer) claimOne(ctx actor.Context) bool {
	if c.draining || c.free < c.threshold() || time.Now().Before(c.retryAt) {
		return false
	}
	limit := min(c.e.opts.BatchSize, c.free)
	c.free -= limit
	c.claiming++
	l := &lease{token: uuid.New()}
	self, e, heads := ctx.Self(), c.e, c.heads.next(limit)
	window := 0
	now := time.Now()
	windowed := c.window.pick(now)
	if windowed {
		window = limit * windowFactor
		c.window.lastRun[1] = now
	} else {
		c.window.lastRun[0] = now
	}
	go func() {
		sentAt := time.Now()
		qctx, cancel := context.WithTimeout(e.bgCtx, max(e.opts.Lease/2, time.Second))
		e.Stats.ClaimStatements.Add(1)
		rows, err := e.opts.Dialect.OutboxClaim(qctx, dialects.ClaimParams{Limit: limit, Lease: e.opts.Lease, Token: l.token, MaxHeads: heads, Window: window})
		cancel()
		e.Stats.ClaimTime.Add(int64(time.Since(sentAt)))
		l.extend(sentAt, e.opts.Lease)
		e.send(self, &claimResult{rows: rows, err: err, requested: limit, lease: l, windowed: windowed, took: time.Since(sentAt)})
	}()
	return true
}

func (c *claimer) onClaim(ctx actor.Context, m *claimResult) {
	c.claiming--
	c.free += m.requested - len(m.rows)
	e := c.e
	if m.err != nil {
		c.failures++
		// Back off: 100ms, 200ms, ... up to 5s, so a database outage is
		// not hammered; the tick resumes claiming.
		c.retryAt = time.Now().Add(min(time.Duration(c.failures)*100*time.Millisecond, 5*time.Second))
		if e.ready.Swap(false) || c.failures == 1 {
			e.log.Warn("database unreachable; claims paused", "error", m.err)
		}
		if c.draining {
			c.checkDrained()
		}
		return
	}
	if c.failures > 0 {
		e.log.Info("database reachable again; claiming", "afterFailures", c.failures)
	}
	c.failures = 0
	e.ready.Store(true)
	n := len(m.rows)
	c.heads.observe(m.rows, m.requested)
	if n > 0 {
		e.Stats.Claimed.Add(int64(n))
		e.Stats.InFlight.Add(int64(n))
		c.dispatch(ctx, m.rows, m.lease)
	}
	if c.draining {
		// A claim that was running when the drain began: hand the rows
		// back at once (dispatch already told each actor to drain).
		c.checkDrained()
		return
	}
	c.more = n == m.requested
	c.window.observe(m.windowed, m.took, n)
	c.waitCredit = 0
	if !c.more {
		c.waitCredit = min(c.e.opts.BatchSize/2, c.e.opts.MaxInFlight-c.free)
	}
	if c.more || c.again {
		c.again = false
		c.maybeClaim(ctx)
	}
}

// dispatch hands each key's run to its key actor and the unkeyed rows to the
// pool. Rows arrive sorted by key, then sequence. The lease keeper hears of
// the claims first, so that it can never receive their release before them.
func (c *claimer) dispatch(ctx actor.Context, rows []dialects.Row, l *lease) {
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
		pid := c.e.pool
		if key := rows[i].Key; key != "" {
			entry := c.keys[key]
			if entry == nil {
				props := actor.PropsFromProducer(func() actor.Actor { return newKeyActor(c.e, key) },
					actor.WithMailbox(mailbox(c.e.opts.Mailboxes.Key)))
				entry = &keyEntry{pid: ctx.SpawnPrefix(props, "key")}
				c.keys[key] = entry
				c.e.Stats.KeyActors.Add(1)
			}
			entry.sent += len(run)
			pid = entry.pid
		}
		for _, r := range run {
			track = append(track, trackEntry{claim: r.Claim, pid: pid})
		}
		batches = append(batches, batch{pid, run})
		i = j
	}
	ctx.Send(c.e.leaseKeeper, &trackClaims{lease: l, entries: track})
	for _, b := range batches {
		ctx.Send(b.pid, &deliverRun{rows: b.run})
		if c.draining {
			ctx.Send(b.pid, &drain{})
		}
	}
}
