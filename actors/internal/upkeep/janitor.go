package upkeep

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

// Messages of the Janitor, to the claimer.
type (
	// Released: rows of expired leases went back to pending, with their
	// old schedule.
	Released struct{}
	// HorizonSeen: a look at what holds the database's horizon back.
	HorizonSeen struct{ Horizon *dialects.Horizon }
	// Ping asks a loop actor whether its loops run; it answers true.
	Ping struct{}
)

// Retention is the Janitor's policy; an age of 0 keeps rows forever.
type Retention struct {
	Delivered, Dead time.Duration
	Interval        time.Duration
	BatchSize       int
}

// Loops runs the engine's loops: each until Context ends.
type Loops interface {
	Context() context.Context
	// Run runs loop in a goroutine; loop returns when Context ends.
	Run(loop func())
	// Every calls tick every d (the wait starts when a tick returns).
	Every(d time.Duration, tick func())
}

// Janitor returns the rows of dead or hung replicas to pending once their
// lease has passed, deletes old rows (and old attempts) in small batches,
// and looks at what holds the database's horizon back. Each runs in a loop
// of its own, so that a long retention backlog never delays the return of
// a dead replica's rows; the loops start with the actor, which answers Ping
// once they run.
type Janitor struct {
	Dialect     dialects.Relay
	LeaseLength time.Duration
	Retention   Retention
	// Attempts deletes the attempt history older than HistoryRetention (0:
	// keeps it).
	Attempts         dialects.History
	HistoryRetention time.Duration
	// LeaseKeeper tells which claims are this replica's own; the Claimer
	// hears of rows back to pending (Released) and of each look at the
	// horizon (HorizonSeen).
	LeaseKeeper, Claimer *actor.PID
	Log                  *slog.Logger
	Loops                Loops
	Clock                clock.Clock
	// Tune holds the horizon look's pace and what counts as held.
	Tune claimplan.Tuning
	// WarnAfter is how long a transaction may hold the horizon back before
	// the Janitor warns (0: never).
	WarnAfter time.Duration
	// SawHorizon and Looked are for observation: each look at the horizon,
	// and each look for expired leases with how long it took (nil: none).
	SawHorizon func(*dialects.Horizon)
	Looked     func(time.Duration)

	// warned is the holder it warned about.
	warned *dialects.HorizonHolder
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

// Receive starts the loops with the actor, so that the engine's start,
// which pings it, returns only once they are counted.
func (j *Janitor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		root := ctx.ActorSystem().Root
		if j.Retention.Interval > 0 {
			j.Loops.Every(j.Retention.Interval, j.purge)
		}
		j.Loops.Run(func() { j.horizonLoop(root) })
		j.Loops.Run(func() { j.loop(root) })
	case *Ping:
		ctx.Respond(true)
	}
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
func (j *Janitor) loop(root *actor.RootContext) {
	every := max(j.LeaseLength/3, 100*time.Millisecond)
	for pause := every; clock.Sleep(j.Loops.Context(), j.Clock, pause); {
		start := j.Clock.Now()
		j.releaseExpired(root)
		pause = releasePause(j.Tune, every, clock.Since(j.Clock, start))
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
func (j *Janitor) releaseExpired(root *actor.RootContext) {
	res, err := root.RequestFuture(j.LeaseKeeper, &LiveTokens{}, 10*time.Second).Result()
	if err != nil {
		return
	}
	keep, _ := res.([]uuid.UUID)
	from := j.releaseFrom
	full := from.IsZero() || clock.Since(j.Clock, j.fullReleaseAt) >= fullReleaseEvery
	if full {
		from = time.Time{}
	}
	for first := true; j.Loops.Context().Err() == nil; first = false {
		ctx, cancel := context.WithTimeout(j.Loops.Context(), 30*time.Second)
		start := j.Clock.Now()
		r, err := j.Dialect.OutboxReleaseExpired(ctx, 1000, keep, from)
		cancel()
		if j.Looked != nil {
			j.Looked(clock.Since(j.Clock, start))
		}
		if err != nil {
			return
		}
		if first {
			j.releaseFrom = nextReleaseFrom(r, releaseSlack(j.LeaseLength))
			if full {
				j.fullReleaseAt = start
			}
		}
		n := r.Rows
		if n == 0 {
			return
		}
		j.Log.Info("released rows whose leases had passed", "rows", n)
		root.Send(j.Claimer, &Released{})
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
func (j *Janitor) purge() {
	r := j.Retention
	if j.purgeAfter == nil {
		j.purgeAfter = map[dialects.State]time.Time{}
	}
	for _, p := range []struct {
		state dialects.State
		age   time.Duration
	}{{dialects.Delivered, r.Delivered}, {dialects.Dead, r.Dead}} {
		if p.age <= 0 || j.Clock.Now().Before(j.purgeAfter[p.state]) {
			continue
		}
		total, done := 0, false
		for j.Loops.Context().Err() == nil {
			ctx, cancel := context.WithTimeout(j.Loops.Context(), 30*time.Second)
			n, err := j.Dialect.OutboxPurge(ctx, dialects.PurgeParams{State: p.state, OlderThan: p.age, Batch: r.BatchSize})
			cancel()
			if err != nil {
				j.Log.Warn("retention delete failed", "state", p.state, "error", err)
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
			ctx, cancel := context.WithTimeout(j.Loops.Context(), 30*time.Second)
			wait, err := j.Dialect.OutboxPurgeWait(ctx, p.state, p.age)
			cancel()
			if err == nil && wait > r.Interval {
				j.purgeAfter[p.state] = j.Clock.Now().Add(min(wait, maxPurgeWait))
			}
		}
		if total > 0 {
			j.Log.Info("retention deleted rows", "state", p.state, "rows", total)
		}
	}
	j.purgeAttempts()
}

// purgeAttempts deletes the attempts older than the history's retention,
// in batches like the rows. It runs whether or not this replica records
// attempts: another replica, or an earlier run, may have.
func (j *Janitor) purgeAttempts() {
	age, batch := j.HistoryRetention, j.Retention.BatchSize
	if age <= 0 || j.Attempts == nil {
		return
	}
	if batch <= 0 {
		batch = 1000
	}
	total := 0
	for j.Loops.Context().Err() == nil {
		ctx, cancel := context.WithTimeout(j.Loops.Context(), 30*time.Second)
		n, err := j.Attempts.AttemptsPurge(ctx, age, batch)
		cancel()
		if err != nil {
			j.Log.Warn("retention delete of the attempt history failed", "error", err)
			return
		}
		total += n
		if n < batch {
			break
		}
	}
	if total > 0 {
		j.Log.Info("retention deleted attempts", "attempts", total)
	}
}

// horizonLoop looks at what holds the horizon back (watchHorizon) until the
// engine stops, as often as horizonNext says, and tells the claimer what
// each look saw: its claims behave as under a long transaction while one
// has held the horizon back for Tuning.HeldAfter.
func (j *Janitor) horizonLoop(root *actor.RootContext) {
	var last *dialects.Horizon
	for wait := j.Tune.HorizonSoon; clock.Sleep(j.Loops.Context(), j.Clock, wait); {
		if h := j.watchHorizon(); h != nil {
			last = h
			root.Send(j.Claimer, &HorizonSeen{Horizon: h})
		}
		// After a look that failed, what the last one saw stands, and a
		// holder it saw is looked at again as soon.
		wait = horizonNext(j.Tune, last, j.Clock.Now())
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
func (j *Janitor) watchHorizon() *dialects.Horizon {
	ctx, cancel := context.WithTimeout(j.Loops.Context(), 5*time.Second)
	h, err := j.Dialect.OutboxHorizon(ctx)
	cancel()
	if err != nil {
		return nil
	}
	h.ReadAt = j.Clock.Now()
	if j.SawHorizon != nil {
		j.SawHorizon(&h)
	}
	held := h.HeldFor(j.WarnAfter)
	switch {
	case held && j.WarnAfter > 0 && (j.warned == nil || j.warned.PID != h.Holder.PID || !j.warned.Since.Equal(h.Holder.Since)):
		j.warned = h.Holder
		j.Log.Warn("a long transaction holds the database's horizon back: vacuum can remove no row version the relay leaves behind until it ends (see queuebox status)",
			"kind", h.Holder.Kind, "pid", h.Holder.PID, "openFor", clock.Since(j.Clock, h.Holder.Since).Round(time.Second),
			"state", h.Holder.State, "application", h.Holder.Name, "deadRowVersions", h.DeadVersions)
	case !held && j.warned != nil:
		j.Log.Info("the long transaction that held the horizon back has ended", "pid", j.warned.PID)
		j.warned = nil
	}
	return &h
}
