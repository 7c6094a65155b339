package actors

import (
	"context"
	"math"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Keyed rows wait, behind the gate, for the transactions that were running
// when they were probed (see dialects.Watermark). Usually that is a few
// milliseconds. When it is longer, the wait is most often for a transaction
// that has nothing to do with the outbox (a report, a migration, a batch job
// on other tables): the claimer then asks the database which open
// transactions drew outbox sequence values (OutboxWriters) and settles every
// epoch that none of them can still add to. What is left is a real writer:
// an open transaction that inserted outbox rows. Its rows, and every keyed
// row inserted after it began, wait until it ends; the claimer says so in
// the log, and `queuebox status` names it.
const (
	// checkWritersAfter is how long an epoch stays open before the claimer
	// looks at the writers, and checkWritersEvery how often it looks again.
	checkWritersAfter = 250 * time.Millisecond
	checkWritersEvery = 250 * time.Millisecond
	// logHeldBackAfter is how long keyed rows wait for a writer before the
	// claimer logs it (once, and once when they flow again).
	logHeldBackAfter = 10 * time.Second
)

type heldBack struct {
	checking  bool
	lastCheck time.Time
	logged    bool
}

// checkHeldBack starts a look at the writers when an epoch has waited
// long, and logs when keyed rows flow again.
func (c *claimer) checkHeldBack(ctx actor.Context, now time.Time) {
	since, waiting := c.wm.Waiting()
	if !waiting {
		if c.held.logged {
			c.held.logged = false
			c.log.Info("keyed rows flow again: the transactions they waited for have ended")
		}
		return
	}
	if now.Sub(since) < checkWritersAfter || c.held.checking || now.Sub(c.held.lastCheck) < checkWritersEvery {
		return
	}
	c.held.checking, c.held.lastCheck = true, now
	root, self, dialect, bg := ctx.ActorSystem().Root, ctx.Self(), c.dialect, c.bg
	go func() {
		qctx, cancel := context.WithTimeout(bg, 5*time.Second)
		ws, err := dialect.OutboxWriters(qctx)
		cancel()
		res := &writersResult{oldest: math.MaxInt64, writers: ws, ok: err == nil}
		for _, w := range ws {
			res.oldest = min(res.oldest, w.Xid)
		}
		root.Send(self, res)
	}()
}

func (c *claimer) onWriters(ctx actor.Context, m *writersResult) {
	c.held.checking = false
	if !m.ok {
		return
	}
	now := time.Now()
	before := c.wm.Settled()
	c.wm.SettleBelow(m.oldest, now)
	if since, waiting := c.wm.Waiting(); waiting && len(m.writers) > 0 && !c.held.logged && now.Sub(since) >= logHeldBackAfter {
		w := m.writers[0]
		c.held.logged = true
		attrs := []any{"pid", w.PID, "state", w.State, "application", w.Application}
		if !w.Since.IsZero() {
			attrs = append(attrs, "openFor", now.Sub(w.Since).Round(time.Second), "since", w.Since.UTC().Format(time.RFC3339))
		}
		c.log.Warn("keyed rows wait for an open transaction that inserted outbox rows; they are delivered when it commits or rolls back (queuebox status shows it)", attrs...)
	}
	if c.wm.Settled() > before {
		c.maybeClaim(ctx)
	}
}
