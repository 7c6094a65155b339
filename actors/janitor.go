package actors

import (
	"context"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/queuebox/queuebox/actors/internal/claimplan"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/clock"
)

// janitor is the Janitor: it returns the rows of dead or hung replicas to
// pending once their lease has passed, and deletes old rows in small
// batches. The two run in loops of their own, so that a long retention
// backlog never delays the return of a dead replica's rows.
type janitor struct {
	dialect     dialects.Relay
	leaseLength time.Duration
	retention   Retention
	// attempts deletes the attempt history older than history.Retention.
	attempts dialects.History
	history  History
	// leaseKeeper tells which claims are this replica's own; the claimer is
	// woken when rows come back to pending.
	leaseKeeper, claimer *actor.PID
	log                  *slog.Logger
	bg                   *background
	stats                *Stats
	clock                clock.Clock
	// tune holds the horizon look's pace and what counts as held.
	tune claimplan.Tuning
	// warnAfter is how long a transaction may hold the horizon back before
	// the janitor warns (0: never); warned is the holder it warned about.
	warnAfter time.Duration
	warned    *dialects.HorizonHolder
	// purgeAfter is, per state, when a row may next be old enough to
	// delete (read and written by the retention loop only).
	purgeAfter map[dialects.State]time.Time
	// releaseFrom is where the next look for expired leases starts (on
	// the database's clock; zero: from the start), and fullReleaseAt when
	// a look last started from the start (the release loop's own).
	releaseFrom, fullReleaseAt time.Time
}

// releaseSlack is how long a claim may run between its start, which is
// its rows' claimed_at, and its commit (its timeout is half a lease, at
// least a second; a minute at least here, because the timeout is the
// client's: a claim that stalls in the server may still commit after it):
// a look for expired leases starts that long before the previous look's
// clock, or at the oldest row that look saw processing, whichever is
// earlier. Rows claimed before that (a replica with a longer lease, a clock
// that stepped back, a claim that stalled longer) are found by a look from
// the start, every fullReleaseEvery.
func releaseSlack(lease time.Duration) time.Duration {
	return max(time.Minute, lease/2+5*time.Second)
}

const fullReleaseEvery = 10 * time.Minute

// maxPurgeWait bounds how long retention skips a state after learning
// when its oldest row comes of age: a row that an application wrote in the
// state itself, with an older updated_at, waits at most this long.
const maxPurgeWait = time.Hour

func (j *janitor) Receive(ctx actor.Context) {
	// Retention's loop starts with the actor, as the release loop does, so
	// that Engine.Start returns only once both are counted.
	if _, ok := ctx.Message().(*actor.Started); ok {
		if j.retention.Interval > 0 {
			j.bg.every(j.retention.Interval, j.purge)
		}
		root := ctx.ActorSystem().Root
		j.bg.run(func() { j.horizonLoop(root) })
	}
	runLoop(ctx, j.bg, j.loop)
}

// loop is the Janitor's release loop; retention has a loop of its own. It
// looks every third of a lease, or, when a look takes long,
// Tuning.BackgroundLookFactor times its duration (at most
// Tuning.MaxFullLook). A look walks the processing
// rows' index, and while a long transaction elsewhere keeps the entries of
// every row claimed since it began, a walk from the oldest entry reads all
// of them; so each look starts where the previous one said no processing
// row can be (see releaseSlack), and only one every fullReleaseEvery walks
// from the start. Paced so, it stays a small share of the database's time,
// and a dead replica's rows come back at most that much later.
func (j *janitor) loop(root *actor.RootContext) {
	every := max(j.leaseLength/3, 100*time.Millisecond)
	for pause := every; clock.Sleep(j.bg.ctx, j.clock, pause); {
		start := j.clock.Now()
		j.releaseExpired(root)
		pause = releasePause(j.tune, every, clock.Since(j.clock, start))
	}
}

// releasePause is the pause after a look for expired leases that took took.
func releasePause(t claimplan.Tuning, every, took time.Duration) time.Duration {
	return max(every, min(time.Duration(t.BackgroundLookFactor)*took, t.MaxFullLook))
}

// releaseExpired returns rows of dead or hung replicas to pending. It keeps
// this replica's own claims even when their lease passed (after a database
// outage): the replica still holds them and writes their outcomes when it
// can, and releasing them would only deliver them again.
func (j *janitor) releaseExpired(root *actor.RootContext) {
	res, err := root.RequestFuture(j.leaseKeeper, &liveTokens{}, 10*time.Second).Result()
	if err != nil {
		return
	}
	keep, _ := res.([]uuid.UUID)
	from := j.releaseFrom
	full := from.IsZero() || clock.Since(j.clock, j.fullReleaseAt) >= fullReleaseEvery
	if full {
		from = time.Time{}
	}
	for first := true; j.bg.ctx.Err() == nil; first = false {
		ctx, cancel := context.WithTimeout(j.bg.ctx, 30*time.Second)
		start := j.clock.Now()
		r, err := j.dialect.OutboxReleaseExpired(ctx, 1000, keep, from)
		cancel()
		j.stats.looked(releaseLook, clock.Since(j.clock, start))
		if err != nil {
			return
		}
		if first {
			j.releaseFrom = nextReleaseFrom(r, releaseSlack(j.leaseLength))
			if full {
				j.fullReleaseAt = start
			}
		}
		n := r.Rows
		if n == 0 {
			return
		}
		j.log.Info("released rows whose leases had passed", "rows", n)
		root.Send(j.claimer, &wake{released: true})
		if n < 1000 {
			return
		}
	}
}

// nextReleaseFrom is where the look after r may start: slack before r's
// clock, or at the oldest row r saw processing when that is earlier; zero
// (from the start) when the dialect tells no clock.
func nextReleaseFrom(r dialects.Released, slack time.Duration) time.Time {
	if r.At.IsZero() {
		return time.Time{}
	}
	from := r.At.Add(-slack)
	if !r.Oldest.IsZero() && r.Oldest.Before(from) {
		from = r.Oldest
	}
	return from
}

// purge deletes the rows older than their state's retention. When a pass
// finds none in a state, it learns when its oldest row comes of age, and skips the
// state until then (at most maxPurgeWait): PostgreSQL has no index on
// updated_at, so a delete that finds nothing reads the whole table, and a
// long transaction elsewhere makes that table every version since it began
// (seen: 2.3 s a minute in the tenth minute of a hold, for nothing).
func (j *janitor) purge() {
	r := j.retention
	if j.purgeAfter == nil {
		j.purgeAfter = map[dialects.State]time.Time{}
	}
	for _, p := range []struct {
		state dialects.State
		age   time.Duration
	}{{dialects.Delivered, r.Delivered}, {dialects.Dead, r.Dead}} {
		if p.age <= 0 || j.clock.Now().Before(j.purgeAfter[p.state]) {
			continue
		}
		total, done := 0, false
		for j.bg.ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(j.bg.ctx, 30*time.Second)
			n, err := j.dialect.OutboxPurge(ctx, dialects.PurgeParams{State: p.state, OlderThan: p.age, Batch: r.BatchSize})
			cancel()
			if err != nil {
				j.log.Warn("retention delete failed", "state", p.state, "error", err)
				break
			}
			total += n
			if n < r.BatchSize {
				done = true
				break
			}
		}
		if done && total == 0 {
			// Nothing was old enough. (A pass that deleted some rows finds
			// more in the next: the rows come of age all the time.)
			ctx, cancel := context.WithTimeout(j.bg.ctx, 30*time.Second)
			wait, err := j.dialect.OutboxPurgeWait(ctx, p.state, p.age)
			cancel()
			if err == nil && wait > r.Interval {
				j.purgeAfter[p.state] = j.clock.Now().Add(min(wait, maxPurgeWait))
			}
		}
		if total > 0 {
			j.log.Info("retention deleted rows", "state", p.state, "rows", total)
		}
	}
	j.purgeAttempts()
}

// purgeAttempts deletes the attempts older than the history's retention,
// in batches like the rows. It runs whether or not this replica records
// attempts: another replica, or an earlier run, may have.
func (j *janitor) purgeAttempts() {
	age, batch := j.history.Retention, j.retention.BatchSize
	if age <= 0 || j.attempts == nil {
		return
	}
	if batch <= 0 {
		batch = 1000
	}
	total := 0
	for j.bg.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(j.bg.ctx, 30*time.Second)
		n, err := j.attempts.AttemptsPurge(ctx, age, batch)
		cancel()
		if err != nil {
			j.log.Warn("retention delete of the attempt history failed", "error", err)
			return
		}
		total += n
		if n < batch {
			break
		}
	}
	if total > 0 {
		j.log.Info("retention deleted attempts", "attempts", total)
	}
}

// horizonLoop looks at what holds the horizon back (watchHorizon) until the
// engine stops, as often as horizonNext says, and tells the claimer what
// each look saw: its claims behave as under a long transaction while one
// has held the horizon back for Tuning.HeldAfter.
func (j *janitor) horizonLoop(root *actor.RootContext) {
	var last *dialects.Horizon
	for wait := j.tune.HorizonSoon; clock.Sleep(j.bg.ctx, j.clock, wait); {
		if h := j.watchHorizon(); h != nil {
			last = h
			root.Send(j.claimer, &horizonSeen{horizon: h})
		}
		// After a look that failed, what the last one saw stands, and a
		// holder it saw is looked at again as soon.
		wait = horizonNext(j.tune, last, j.clock.Now())
	}
}

// horizonNext is how long after a look that saw h, at now, the next one
// comes: Tuning.HorizonEvery while nothing holds the horizon; while a
// transaction does, a little after it would have held it for HeldAfter (so
// that the look sees it held), then every HorizonSoon, so that the claims
// stop behaving as held soon after it ends. (Looking only every
// HorizonEvery, a bulk insert a little longer than HeldAfter left replicas
// draining its rows as if a transaction still held the horizon.)
func horizonNext(t claimplan.Tuning, h *dialects.Horizon, now time.Time) time.Duration {
	if h == nil || h.Holder == nil || h.Holder.Since.IsZero() {
		return t.HorizonEvery
	}
	return min(t.HorizonEvery, max(t.HorizonSoon, t.HeldAfter-now.Sub(h.Holder.Since)+100*time.Millisecond))
}

// watchHorizon reads what holds the horizon back, for the metrics and the
// page, and warns once a transaction has held it for longer than warnAfter:
// while it stays open no row version the relay leaves behind can be
// removed (the claims are bounded so that they do not slow down, but the
// table and its indexes grow). It returns what it read (nil: the read
// failed).
func (j *janitor) watchHorizon() *dialects.Horizon {
	ctx, cancel := context.WithTimeout(j.bg.ctx, 5*time.Second)
	h, err := j.dialect.OutboxHorizon(ctx)
	cancel()
	if err != nil {
		return nil
	}
	h.ReadAt = j.clock.Now()
	j.stats.Horizon.Store(&h)
	held := h.HeldFor(j.warnAfter)
	switch {
	case held && j.warnAfter > 0 && (j.warned == nil || j.warned.PID != h.Holder.PID || !j.warned.Since.Equal(h.Holder.Since)):
		j.warned = h.Holder
		j.log.Warn("a long transaction holds the database's horizon back: vacuum can remove no row version the relay leaves behind until it ends (see queuebox status)",
			"kind", h.Holder.Kind, "pid", h.Holder.PID, "openFor", clock.Since(j.clock, h.Holder.Since).Round(time.Second),
			"state", h.Holder.State, "application", h.Holder.Name, "deadRowVersions", h.DeadVersions)
	case !held && j.warned != nil:
		j.log.Info("the long transaction that held the horizon back has ended", "pid", j.warned.PID)
		j.warned = nil
	}
	return &h
}
