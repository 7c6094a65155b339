package actors

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/queuebox/queuebox/dialects"
)

// Messages of the completer.
type (
	// finished carries the outcomes one actor decided in one step, and the
	// claims it gave up because they were lost (nothing to write for them).
	finished struct {
		outcomes []dialects.Outcome
		abandons []dialects.Claim
	}
	flushDone struct{}
)

// maxFlushes is how many completion statements may run at once: two overlap
// (one writes while the next batch gathers), as two claim-complete loops beat
// one on these machines. The outcomes of one actor step always land in one
// statement, so a retry and the releases behind it are written together.
const maxFlushes = 2

// secondFlushAt is the buffer size at which a second statement starts while
// one is running; below it the outcomes wait for the running one (group
// commit).
const secondFlushAt = 64

// completer writes outcomes in few statements (group commit). It never waits
// on the database itself: each flush runs in a goroutine, which afterwards
// returns the credit to the claimer and tells the lease keeper to forget the
// claims, so the completer never sends to an actor that could be waiting on
// it.
type completer struct {
	e        *Engine
	buf      []dialects.Outcome
	abandons []dialects.Claim
	running  int
}

func newCompleter(e *Engine) *completer { return &completer{e: e} }

func (c *completer) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *finished:
		c.buf = append(c.buf, m.outcomes...)
		c.abandons = append(c.abandons, m.abandons...)
	case *flushDone:
		c.running--
	}
	if c.running == 0 || (c.running < maxFlushes && len(c.buf) >= secondFlushAt) {
		c.flush(ctx)
	}
}

func (c *completer) flush(ctx actor.Context) {
	if len(c.buf) == 0 && len(c.abandons) == 0 {
		return
	}
	out, abandons := c.buf, c.abandons
	c.buf, c.abandons = nil, nil
	c.running++
	e, self := c.e, ctx.Self()
	go func() {
		lost := e.writeOutcomes(out)
		if n := len(lost) + len(abandons); n > 0 {
			e.Stats.LostClaims.Add(int64(n))
			e.log.Warn("claims lost: their leases passed and the rows went back to pending or to another replica; their outcomes were not written",
				"count", n)
		}
		done := make([]dialects.Claim, 0, len(out)+len(abandons))
		for _, o := range out {
			done = append(done, o.Claim)
		}
		done = append(done, abandons...)
		e.send(e.leaseKeeper, &untrackClaims{claims: done})
		e.send(e.claimer, &credit{n: len(done)})
		e.send(self, &flushDone{})
	}()
}

// writeOutcomes writes until the database takes them, backing off while it
// is away. Outcomes are never dropped: if the outage outlasts the lease, the
// write reports them lost, which is the truth.
func (e *Engine) writeOutcomes(out []dialects.Outcome) []dialects.Claim {
	if len(out) == 0 {
		return nil
	}
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(e.bgCtx), 30*time.Second)
		e.Stats.CompleteStatements.Add(1)
		t0 := time.Now()
		lost, err := e.opts.Dialect.OutboxComplete(ctx, out)
		e.Stats.CompleteTime.Add(int64(time.Since(t0)))
		cancel()
		if err == nil {
			return lost
		}
		if attempt == 1 {
			e.log.Warn("writing outcomes failed; retrying", "rows", len(out), "error", err)
		}
		if e.bgCtx.Err() != nil && attempt >= 3 {
			e.log.Error("giving up on outcomes while stopping; their leases will expire", "rows", len(out), "error", err)
			return nil
		}
		time.Sleep(min(time.Duration(attempt)*100*time.Millisecond, 5*time.Second))
	}
}
