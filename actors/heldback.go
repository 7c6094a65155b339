package actors

import (
	"context"
	"log/slog"
	"math"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/queuebox/queuebox/dialects"
)

// Keyed rows wait, behind the gate, for the transactions that were running
// when they were probed (see dialects.Watermark). Usually that is a few
// milliseconds. When it is longer, the wait is most often for a transaction
// that has nothing to do with the table (a report, a migration, a batch job
// on other tables): the actor then asks the database which open
// transactions drew values from the table's sequence (OutboxWriters,
// InboxWriters) and settles every epoch that none of them can still add to.
// What is left is a real writer: an open transaction that inserted rows. Its
// rows, and every keyed row inserted after it began, wait until it ends; the
// actor says so in the log, and `queuebox status` names it. The Claimer
// and the Inbox relay each keep one heldBack.
const (
	// checkWritersAfter is how long an epoch stays open before the actor
	// looks at the writers, and checkWritersEvery how often it looks again.
	checkWritersAfter = 250 * time.Millisecond
	checkWritersEvery = 250 * time.Millisecond
	// logHeldBackAfter is how long keyed rows wait for a writer before the
	// actor logs it (once, and once when they flow again).
	logHeldBackAfter = 10 * time.Second
)

// writersResult: the oldest open writer's transaction id (ok false: the
// check failed), for settling epochs that only other transactions held back.
type writersResult struct {
	oldest  int64
	writers []dialects.Writer
	ok      bool
}

type heldBack struct {
	// writers lists the open writers of the table.
	writers func(context.Context) ([]dialects.Writer, error)
	// waiting and flowing are the two log lines.
	waiting, flowing string

	checking  bool
	lastCheck time.Time
	logged    bool
}

// check starts a look at the writers when an epoch of wm has waited long,
// and logs when keyed rows flow again. The result comes to the actor as a
// *writersResult, for onWriters.
func (h *heldBack) check(ctx actor.Context, bg context.Context, wm *dialects.Watermark, log *slog.Logger, now time.Time) {
	since, waiting := wm.Waiting()
	if !waiting {
		if h.logged {
			h.logged = false
			log.Info(h.flowing)
		}
		return
	}
	if now.Sub(since) < checkWritersAfter || h.checking || now.Sub(h.lastCheck) < checkWritersEvery {
		return
	}
	h.checking, h.lastCheck = true, now
	root, self, list := ctx.ActorSystem().Root, ctx.Self(), h.writers
	go func() {
		qctx, cancel := context.WithTimeout(bg, 5*time.Second)
		ws, err := list(qctx)
		cancel()
		res := &writersResult{oldest: math.MaxInt64, writers: ws, ok: err == nil}
		for _, w := range ws {
			res.oldest = min(res.oldest, w.Xid)
		}
		root.Send(self, res)
	}()
}

// onWriters settles what no open writer holds back, logs a writer that has
// held keyed rows back for long, and reports whether more rows settled.
func (h *heldBack) onWriters(m *writersResult, wm *dialects.Watermark, log *slog.Logger) bool {
	h.checking = false
	if !m.ok {
		return false
	}
	now := time.Now()
	before := wm.Settled()
	wm.SettleBelow(m.oldest, now)
	if since, waiting := wm.Waiting(); waiting && len(m.writers) > 0 && !h.logged && now.Sub(since) >= logHeldBackAfter {
		w := m.writers[0]
		h.logged = true
		attrs := []any{"pid", w.PID, "state", w.State, "application", w.Application}
		if !w.Since.IsZero() {
			attrs = append(attrs, "openFor", now.Sub(w.Since).Round(time.Second), "since", w.Since.UTC().Format(time.RFC3339))
		}
		log.Warn(h.waiting, attrs...)
	}
	return wm.Settled() > before
}
