package actors

import (
	"context"
	"github.com/queuebox/queuebox/actors/internal/upkeep"
	"log/slog"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/backoff"
	"github.com/queuebox/queuebox/internal/clock"
)

// Messages of the completer.
type (
	// finished carries the outcomes one actor decided in one step, and the
	// claims it gave up because they were lost (nothing to write for them).
	finished struct {
		outcomes []dialects.Outcome
		abandons []dialects.Claim
		// units are the ends of fan-out rows' units (fanout.go).
		units []unitEnd
		// continued: a key's run ended well (see runState).
		continued *continuation
		// rewind: move the rewind counter once these are written.
		rewind bool
	}
	flushDone struct{}
	// fanClaimed: the claimer split these rows into units (fanout.go);
	// their ends follow.
	fanClaimed struct{ rows []*fanRow }
)

// secondFlushAt is the buffer size at which a second statement starts while
// one is running; below it the outcomes wait for the running one (group
// commit).
const secondFlushAt = 64

// completer writes outcomes in few statements (group commit), up to
// statements of them at once (the budget watcher says how many). The outcomes of one actor step
// always land in one statement, so a retry and the releases behind it are
// written together. It never waits
// on the database itself: each flush runs in a goroutine, which afterwards
// returns the credit to the claimer and tells the lease keeper to forget the
// claims, so the completer never sends to an actor that could be waiting on
// it.
type completer struct {
	dialect dialects.Relay
	// claimer gets the credit back; leaseKeeper forgets the claims.
	claimer, leaseKeeper *actor.PID
	// bg ends when the engine stops: the flushes then give up after a few
	// tries instead of retrying until the database is back.
	bg    context.Context
	log   *slog.Logger
	stats *Stats
	obs   Observer
	clock clock.Clock
	// statements is how many flushes may run at once (budgetChanged).
	statements int
	// fan gathers the units of fan-out rows (nil: the router has no
	// fan-out); copies hears that copies were written (nil: none are).
	fan    *fanIn
	copies *actor.PID

	buf       []dialects.Outcome
	abandons  []dialects.Claim
	continued []continuation
	rewind    bool
	running   int
}

func (c *completer) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *finished:
		c.buf = append(c.buf, m.outcomes...)
		c.abandons = append(c.abandons, m.abandons...)
		if len(m.units) > 0 {
			c.gather(func(out *fanOut) { c.fan.end(m.units, out) })
		}
		if m.continued != nil {
			c.continued = append(c.continued, *m.continued)
		}
		c.rewind = c.rewind || m.rewind
	case *fanClaimed:
		c.gather(func(out *fanOut) { c.fan.add(m.rows, out) })
	case *flushDone:
		c.running--
	case *budgetChanged:
		c.statements = m.statements
	}
	if c.running == 0 || (c.running < max(c.statements, 1) && len(c.buf) >= secondFlushAt) {
		c.flush(ctx)
	}
}

// gather adds the outcomes of the fan-out rows that step hands out.
func (c *completer) gather(step func(*fanOut)) {
	out := fanOut{outcomes: c.buf, abandons: c.abandons, continued: c.continued, rewind: c.rewind}
	step(&out)
	c.buf, c.abandons, c.continued, c.rewind = out.outcomes, out.abandons, out.continued, out.rewind
}

func (c *completer) flush(ctx actor.Context) {
	if len(c.buf) == 0 && len(c.abandons) == 0 {
		return
	}
	out, abandons, continued, rewind := c.buf, c.abandons, c.continued, c.rewind
	c.buf, c.abandons, c.continued, c.rewind = nil, nil, nil, false
	c.running++
	root, self := ctx.ActorSystem().Root, ctx.Self()
	go func() {
		lost := c.write(out)
		if rewind {
			// The released rows keep their old schedule: every replica's
			// claims set their bounds aside once (see claimplan, "Bounds").
			rctx, cancel := context.WithTimeout(context.WithoutCancel(c.bg), 5*time.Second)
			if err := c.dialect.OutboxRewind(rctx); err != nil {
				c.log.Warn("could not tell the other replicas that rows went back to pending; they find them at their next look for stragglers", "error", err)
			}
			cancel()
		}
		if n := len(lost) + len(abandons); n > 0 {
			c.obs.LostClaims(n)
			c.stats.LostClaims.Add(int64(n))
			c.log.Warn("claims lost: their leases passed and the rows went back to pending or to another replica; their outcomes were not written",
				"count", n)
		}
		done := make([]dialects.Claim, 0, len(out)+len(abandons))
		for _, o := range out {
			done = append(done, o.Claim)
		}
		done = append(done, abandons...)
		// A position whose run's last outcome was lost is not the key's.
		continued = slices.DeleteFunc(continued, func(k continuation) bool {
			return slices.ContainsFunc(lost, func(l dialects.Claim) bool { return l.ID == k.last.ID })
		})
		root.Send(c.leaseKeeper, &upkeep.Untrack{Claims: done})
		// The earliest row put back for later (a retry, a deferral): the
		// claimer claims again when it comes due. Rows released as they were
		// are claimable at once.
		var retryIn time.Duration
		released := false
		for _, o := range out {
			switch o.Kind {
			case dialects.OutcomeRetry, dialects.OutcomeDefer:
				if retryIn == 0 || o.Delay < retryIn {
					retryIn = max(o.Delay, time.Millisecond)
				}
			case dialects.OutcomeRelease:
				released = true
			}
		}
		root.Send(c.claimer, &credit{n: len(done), continued: continued, retryIn: retryIn, released: released})
		if c.copies != nil {
			if in, ok := c.copiesWritten(out, lost); ok {
				root.Send(c.copies, &copiesWritten{in: in})
			}
		}
		root.Send(self, &flushDone{})
	}()
}

// copiesWritten tells the observer of the copies the outcomes written
// wrote, and says whether one of them is to be delivered, and how soon the
// earliest comes due.
func (c *completer) copiesWritten(out []dialects.Outcome, lost []dialects.Claim) (time.Duration, bool) {
	var in time.Duration
	found := false
	co, _ := c.obs.(CopiesObserver)
	for _, o := range out {
		if len(o.Copies) == 0 || slices.ContainsFunc(lost, func(l dialects.Claim) bool { return l.ID == o.ID }) {
			continue
		}
		for _, cp := range o.Copies {
			if co != nil {
				co.CopiesWritten(cp.Destination, cp.Kind, 1)
			}
			if cp.Kind != dialects.CopyDead && (!found || cp.Delay < in) {
				in, found = cp.Delay, true
			}
		}
	}
	return in, found
}

// write writes until the database takes the outcomes, backing off while it
// is away. Outcomes are never dropped: if the outage outlasts the lease, the
// write reports them lost, which is the truth. It runs in the flush
// goroutine and reads only the completer's collaborators, which never
// change.
func (c *completer) write(out []dialects.Outcome) []dialects.Claim {
	if len(out) == 0 {
		return nil
	}
	wait := backoff.Capped{First: 100 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.bg), 30*time.Second)
		c.stats.CompleteStatements.Add(1)
		t0 := c.clock.Now()
		lost, err := c.dialect.OutboxComplete(ctx, out)
		took := clock.Since(c.clock, t0)
		c.stats.CompleteTime.Add(int64(took))
		cancel()
		if err == nil {
			c.obs.Completed(len(out), took)
			return lost
		}
		if attempt == 1 {
			c.log.Warn("writing outcomes failed; retrying", "rows", len(out), "error", err)
		}
		if c.bg.Err() != nil && attempt >= 3 {
			c.log.Error("giving up on outcomes while stopping; their leases will expire", "rows", len(out), "error", err)
			return nil
		}
		clock.Sleep(context.Background(), c.clock, wait.Next())
	}
}
