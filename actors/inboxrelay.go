package actors

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/queuebox/queuebox/actors/internal/claimplan"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/backoff"
	"github.com/queuebox/queuebox/internal/clock"
)

// The Inbox relay turns received inbox rows into outbox rows (see the
// dialects package doc, "The inbox relay", for the statement and its three
// rules). It is one actor per engine, beside the Claimer, and works like
// it: ticks drive it; a goroutine probes the inbox sequence and, when
// something arrived or settled, runs one relay transaction, then sends the
// result back. The actor only keeps the watermark and decides.
//
// Replicas take turns through the relay's lock: a relay that finds it taken
// tries again at its next tick. Keyed rows wait behind the gate as outbox
// rows do (gate.go), and a writer that holds them back for long is logged.

// Messages of the inbox relay.
type (
	// relayTick: probe, and relay when something arrived or settled; gen
	// tells a stale tick (the timer was armed again since) from the
	// current one (0: a tick of its own, always current).
	relayTick struct{ gen uint64 }
	// relayPoll: relay whatever the probe says (rows that arrived
	// unnoticed, or a gate the database cannot keep).
	relayPoll struct{}
	// relayNudged: logical replication says inbox rows committed, or its
	// state changed.
	relayNudged struct{}
	relayResult struct {
		probe   *dialects.Probe
		relayed *dialects.InboxRelayResult
		// seen and settled are what the watermark knew when the relay ran.
		seen, settled int64
		err           error
	}
)

// InboxRelay configures the engine's inbox relay; Enabled false runs none.
type InboxRelay struct {
	Enabled bool
	// MaxAttempts is the max_attempts of the outbox rows it creates,
	// written as it is (0: a row goes dead at its first failure).
	MaxAttempts int
	// BatchSize is the most inbox rows one relay transaction moves;
	// 0 means Options.BatchSize.
	BatchSize int
}

type inboxRelay struct {
	dialect     dialects.Relay
	batchSize   int
	maxAttempts int
	timeout     time.Duration
	// claimer is woken when outbox rows were created.
	claimer *actor.PID
	bg      context.Context
	log     *slog.Logger

	// gate keeps keyed inbox rows in receive order (see gate.go).
	gate gate
	busy bool
	// again: relay at the next tick whatever the probe says (the last
	// batch was full, or another replica held the lock).
	again bool
	// seenAt and settledAt are what the watermark knew at the last relay.
	seenAt, settledAt int64
	// after is a sequence below which no inbox row is received: relays
	// start past it, and past the versions earlier relays left behind.
	after   int64
	failed  backoff.Capped
	retryAt time.Time
	clock   clock.Clock
	// pace paces the probes (relayTick), as the claimer's: idle once the
	// inbox has not moved for Tuning.IdleAfter. tick is the armed tick,
	// tickGen its generation.
	pace    claimplan.Pace
	tune    claimplan.Tuning
	tick    clock.Timer
	tickGen uint64
	root    *actor.RootContext
	self    *actor.PID
	// lastMove is when a probe last saw the inbox sequence move or a relay
	// moved rows; probed, whether a probe has answered yet.
	lastMove time.Time
	probed   bool
	// wakeups nudges the relay as inbox rows commit; listening says
	// nudges flow now.
	wakeups   dialects.Wakeups
	listening bool
}

func newInboxRelay(r inboxRelay) *inboxRelay {
	r.failed = backoff.Capped{First: r.tune.FailFirst, Max: r.tune.FailMax}
	// lastMove stays zero: the relay starts at the idle pace, like the
	// claimer, and speeds up once the inbox moves.
	r.gate = gate{wm: &dialects.Watermark{}, writers: r.dialect.InboxWriters, log: r.log, clock: r.clock, logAfter: r.tune.WaitLogAfter,
		waiting: "inbox relay: keyed inbox rows wait for an open transaction that stored inbox rows; they are relayed when it commits or rolls back",
		flowing: "inbox relay: keyed inbox rows flow again: the transactions they waited for have ended",
		blindly: "inbox relay: cannot see other transactions, so inbox rows of one aggregate stored by concurrent transactions may be relayed in commit order rather than receive order; grant the permission the error names"}
	return &r
}

func (r *inboxRelay) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		r.root, r.self = ctx.ActorSystem().Root, ctx.Self()
		r.hearWakeups()
		r.run(ctx, true)
	case *actor.Stopping:
		if r.tick != nil {
			r.tick.Stop()
		}
	case *relayTick:
		if m.gen != 0 && m.gen != r.tickGen {
			return
		}
		r.tick = nil
		r.run(ctx, false)
	case *relayPoll:
		if r.pace.Idle(r.paceState(r.clock.Now())) && !r.gate.blind {
			return // idle: probes (and nudges) say when inbox rows arrive
		}
		r.run(ctx, true)
	case *relayNudged:
		r.hearWakeups()
		r.lastMove = r.clock.Now()
		r.run(ctx, false)
	case *relayResult:
		r.onResult(ctx, m)
	case *writersResult:
		r.gate.onWriters(m)
	}
}

// run starts one probe-and-relay in a goroutine unless one runs already.
func (r *inboxRelay) run(ctx actor.Context, force bool) {
	now := r.clock.Now()
	if r.busy || now.Before(r.retryAt) {
		r.repace(now)
		return
	}
	r.busy = true
	r.disarm() // the run probes by itself
	force = force || r.again
	root, self := ctx.ActorSystem().Root, ctx.Self()
	dialect, bg, timeout, claimer := r.dialect, r.bg, r.timeout, r.claimer
	params := dialects.InboxRelayParams{Limit: r.batchSize, MaxAttempts: r.maxAttempts, After: r.after}
	wm, clk := r.gate.forStatement(), r.clock
	seenAt, settledAt := r.seenAt, r.settledAt
	go func() {
		res := &relayResult{}
		qctx, cancel := context.WithTimeout(bg, timeout)
		defer cancel()
		if wm != nil {
			if res.probe, res.err = probeInto(qctx, dialect.InboxProbe, wm, clk); res.err != nil {
				root.Send(self, res)
				return
			}
			if !force && wm.LastSeen() <= seenAt && wm.Settled() <= settledAt {
				root.Send(self, res) // nothing new
				return
			}
			params.Gate = wm.Gate()
			res.seen, res.settled = wm.LastSeen(), wm.Settled()
		}
		out, err := dialect.InboxRelay(qctx, params)
		res.relayed, res.err = &out, err
		if err == nil && out.Created > 0 {
			root.Send(claimer, &wake{})
		}
		root.Send(self, res)
	}()
}

// hearWakeups notes the wake-up source's state: the pace follows it.
func (r *inboxRelay) hearWakeups() {
	if r.wakeups != nil {
		r.listening = r.wakeups.Status().Listening()
	}
}

func (r *inboxRelay) paceState(now time.Time) claimplan.PaceState {
	return claimplan.PaceState{Listening: r.listening, Active: r.again || now.Sub(r.lastMove) <= r.tune.IdleAfter,
		Waiting: r.gate.wm.LastSeen() > r.gate.wm.Settled()}
}

// repace arms the next tick at the pace's interval, unless a run is under
// way (it probes by itself) or a tick is armed already.
func (r *inboxRelay) repace(now time.Time) {
	if r.busy || r.tick != nil || r.self == nil {
		return
	}
	r.tickGen++
	root, self, msg := r.root, r.self, &relayTick{gen: r.tickGen}
	r.tick = r.clock.AfterFunc(r.pace.Interval(r.paceState(now)), func() { root.Send(self, msg) })
}

func (r *inboxRelay) disarm() {
	if r.tick != nil {
		r.tick.Stop()
		r.tick = nil
	}
	r.tickGen++
}

func (r *inboxRelay) onResult(ctx actor.Context, m *relayResult) {
	r.busy = false
	now := r.clock.Now()
	moved := false
	defer func() {
		r.pace.Probed(r.paceState(now), moved)
		r.repace(now)
	}()
	if m.probe != nil {
		// The first probe only learns where the sequence stands: rows
		// stored before this replica started are no movement (the relay
		// that moves them sets lastMove below).
		if r.probed && m.probe.Last > r.gate.wm.LastSeen() {
			r.lastMove, moved = now, true
		}
		r.probed = true
		r.gate.observe(ctx, r.bg, *m.probe)
	}
	if m.err != nil {
		if r.gate.refused(m.err) {
			return
		}
		r.retryAt = now.Add(r.failed.Next())
		if r.failed.Failures() == 1 && !errors.Is(m.err, context.Canceled) {
			r.log.Warn("inbox relay failed; retrying", "error", m.err)
		}
		return
	}
	if n := r.failed.Failures(); n > 0 {
		r.log.Info("inbox relay works again", "afterFailures", n)
		r.failed.Reset()
	}
	if m.relayed == nil {
		return // the probe saw nothing new
	}
	r.seenAt, r.settledAt = max(r.seenAt, m.seen), max(r.settledAt, m.settled)
	res := *m.relayed
	if !res.Busy && !r.gate.blind && m.settled > 0 {
		// Every received row up to the watermark was visible to the relay;
		// a relay cut at its limit relayed everything up to Through.
		through := m.settled
		if res.Relayed == r.batchSize {
			through = min(res.Through, m.settled)
		}
		r.after = max(r.after, through)
	}
	if res.Relayed > 0 {
		r.lastMove, moved = now, true
	}
	// Another replica relays now: look again at the next tick, in case it
	// stops before the rows are done.
	r.again = res.Busy || res.Relayed == r.batchSize
	if res.Relayed == r.batchSize {
		ctx.Send(ctx.Self(), &relayTick{})
	}
	if res.Relayed > res.Created {
		r.log.Debug("inbox relay: outbox rows with some ids existed already; left as they were", "relayed", res.Relayed, "created", res.Created)
	}
}
