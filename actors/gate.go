package actors

import (
	"context"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/clock"
)

// gate keeps keyed rows in insert order for the two actors that read a
// table of concurrent producers: the Claimer (the outbox) and the Inbox
// relay (the inbox). Both follow the same rule (see dialects.Watermark): a
// keyed row is taken only once every transaction that could still commit an
// earlier row of its key has ended. A statement probes first, on a copy of
// the watermark, and takes what that probe settles; the actor folds the
// probe back into its own watermark afterwards.
//
// Usually a row settles within a probe or two. When a transaction that
// wrote rows of the table stays open, its rows and every keyed row inserted
// after it wait until it ends; after Tuning.WaitLogAfter the gate asks the
// database which transaction it is (OutboxWriters, InboxWriters) and logs it
// once, and once more when rows flow again. A transaction that wrote no row
// of the table never holds rows back: each probe reads the oldest open
// writer along with the transaction horizon.
type gate struct {
	// wm is the watermark: the inbox relay's own, or the claim planner's
	// (which moves it itself; the gate only reads it).
	wm *dialects.Watermark
	// blind is true once the database refused to show other transactions
	// (dialects.Blind): keyed rows then pass as soon as they are seen, and
	// the gate said so once.
	blind bool
	// writers lists the open writers of the table, for the log.
	writers func(context.Context) ([]dialects.Writer, error)
	// waiting, flowing and blindly are the gate's three log lines.
	waiting, flowing, blindly string
	log                       *slog.Logger
	clock                     clock.Clock
	// logAfter is Tuning.WaitLogAfter.
	logAfter time.Duration

	checking  bool
	lastCheck time.Time
	logged    bool
}

// writersResult is the open writers of the table, for the log (ok false: the
// look failed).
type writersResult struct {
	writers []dialects.Writer
	ok      bool
}

// forStatement returns the copy of the watermark that a statement's
// goroutine moves with its own probe, or nil when the gate is blind.
func (g *gate) forStatement() *dialects.Watermark {
	if g.blind {
		return nil
	}
	return g.wm.Clone()
}

// probeInto probes and adds the probe to wm, in a statement's goroutine.
func probeInto(ctx context.Context, probe func(context.Context) (dialects.Probe, error), wm *dialects.Watermark, c clock.Clock) (*dialects.Probe, error) {
	p, err := probe(ctx)
	if err != nil {
		return nil, err
	}
	wm.Observe(p, c.Now())
	return &p, nil
}

// observe folds a probe into the gate's watermark, then checks it.
func (g *gate) observe(ctx actor.Context, bg context.Context, p dialects.Probe) {
	g.wm.Observe(p, g.clock.Now())
	g.check(ctx, bg)
}

// check starts a look at the writers when keyed rows have waited long (the
// result comes to the actor as a *writersResult, for onWriters), and logs
// when they flow again.
func (g *gate) check(ctx actor.Context, bg context.Context) {
	now := g.clock.Now()
	since, waiting := g.wm.Waiting()
	if !waiting {
		if g.logged {
			g.logged = false
			g.log.Info(g.flowing)
		}
		return
	}
	if now.Sub(since) < g.logAfter || g.logged || g.checking || now.Sub(g.lastCheck) < g.logAfter {
		return
	}
	g.checking, g.lastCheck = true, now
	root, self, list := ctx.ActorSystem().Root, ctx.Self(), g.writers
	go func() {
		qctx, cancel := context.WithTimeout(bg, 5*time.Second)
		ws, err := list(qctx)
		cancel()
		root.Send(self, &writersResult{writers: ws, ok: err == nil})
	}()
}

// onWriters logs the oldest writer when keyed rows still wait for one.
func (g *gate) onWriters(m *writersResult) {
	g.checking = false
	since, waiting := g.wm.Waiting()
	if !m.ok || !waiting || len(m.writers) == 0 || g.logged || g.clock.Now().Sub(since) < g.logAfter {
		return
	}
	w := m.writers[0]
	g.logged = true
	attrs := []any{"pid", w.PID, "state", w.State, "application", w.Application}
	if !w.Since.IsZero() {
		attrs = append(attrs, "openFor", g.clock.Now().Sub(w.Since).Round(time.Second), "since", w.Since.UTC().Format(time.RFC3339))
	}
	g.log.Warn(g.waiting, attrs...)
}

// refused reports whether err says that the database will not show other
// transactions to this user. The gate then opens for good: it cannot tell
// settled rows, so it lets every keyed row pass, and says so once.
func (g *gate) refused(err error) bool {
	if g.blind || !dialects.Blind(err) {
		return false
	}
	g.blind = true
	g.log.Warn(g.blindly, "error", err)
	return true
}
