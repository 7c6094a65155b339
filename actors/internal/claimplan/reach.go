package claimplan

import (
	"slices"
	"strings"
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// reach keeps the bounds of the claims (see the package doc, "Bounds"):
// what the claimer knows that lets a claim start past the row versions it
// left behind. plan makes each claim's bounds; claimed and took learn from
// what came back; observe, continued, writersSeen, floorsRead and
// stragglersFound take in what the probes, the completions and the looks
// off the claims' path found. Bounds only ever leave rows out of a claim's
// view; floors and positions are exact. While the horizon is held (held),
// the looks that read every version come only as often as their cost
// allows (Tuning.BackgroundLookFactor, Tuning.FullLookFactor), so that
// none of them holds a claim up.
type reach struct {
	t Tuning
	// known: a probe has told the replay counter.
	known   bool
	rewinds int64
	// continuing are the keys to continue, oldest first, and their
	// positions.
	continuing []dialects.KeyPosition
	// anchor is when (on this replica's clock) the rows the next walk in
	// schedule order must see began to become due; zero looks from the
	// start. lowered counts the times it was moved back, so that a claim
	// sent before a move cannot move it forward again.
	anchor  time.Time
	lowered int
	// floors hold for the replay counter floorsAt; nil: none yet.
	// floorsReadAt is when they were read.
	floors       []int64
	floorsAt     int64
	floorsReadAt time.Time
	// positions are the keys' positions learnt from finished runs, for the
	// current counter; posCount numbers their updates (the oldest go
	// first). posSorted is a snapshot in key order (bytewise), made at
	// posSortedAt: a position only moves forward, so an older snapshot
	// still holds, only looser.
	positions   map[string]keyPos
	posCount    int64
	posSorted   []dialects.KeyPosition
	posSortedAt time.Time
	// nextLook is when the next look for stragglers is due (looking: one
	// runs; whole: from the start), nextWhole the next such look from the
	// start while held, nextFloors the next floors read (reading: one
	// runs), nextWalk when a claim by key may next walk the keys.
	nextLook, nextWhole, nextFloors, nextWalk time.Time
	reading, looking, whole                   bool
	// fruitless: a claim in schedule order made instead of a walk over the
	// keys found nothing since the last walk.
	fruitless bool
	// seen is the newest sequence the claimer knows of, and the gate's
	// watermark (set before each plan); walked is what they were at the
	// last walk over the keys: rows that arrived or settled since are news.
	// moreKeys: the last walk that came back took as many heads as it
	// could, so more keys wait; it holds until a walk comes back short, so
	// that a second claim beside a running walk walks as well. While the
	// horizon is not held, a walk is cheap, and either is worth one.
	seen, walked mark
	moreKeys     bool
	// blind: the gate cannot tell settled rows, so floors (which count on
	// every row up to the watermark being visible) are not used.
	blind bool
	// held: a transaction has held the database's horizon back for
	// heldAfter or longer (the janitor's look at it), so that vacuum keeps
	// every version: the walks take the narrow margin, and the claims carry
	// the keys' positions. Otherwise vacuum keeps up, the index scans skip
	// the versions cheaply, and the claims do as they always did.
	held bool
	// lastWalk is the database time of the last walk in schedule order that
	// was not cut (zero: none since the anchor moved back); late and
	// latePrev the largest lateness seen in this window of lateWindow
	// (begun at lateFrom) and the previous one; nextWide when a walk next
	// looks back with the whole lookbackMargin.
	lastWalk       time.Time
	late, latePrev time.Duration
	lateFrom       time.Time
	nextWide       time.Time
	// dbAhead is how far the database's clock (a claim's time) was ahead
	// of when the claim was planned, at the last claim that took rows: an
	// empty claim returns no time, and this estimates it.
	dbAhead time.Duration
	// claimedRows counts the rows claimed since the floors were last read,
	// lookRows since the last look for stragglers began (at lookAt; see
	// quiet).
	claimedRows, lookRows int
	lookAt                time.Time
	// writers are the open writers the last probes saw (transaction ids),
	// each with when a claim whose probe saw it first was planned.
	writers map[int64]time.Time
}

// mark is how far the claimer has seen rows arrive (the newest sequence a
// probe saw) and settle (the gate's watermark).
type mark struct{ last, settled int64 }

// after reports whether rows arrived or settled since o.
func (m mark) after(o mark) bool { return m.last > o.last || m.settled > o.settled }

func (m mark) max(o mark) mark { return mark{max(m.last, o.last), max(m.settled, o.settled)} }

// keyPos is a key's position and when it was last updated (posCount).
type keyPos struct {
	after, n int64
}

func newReach(t Tuning) reach { return reach{t: t} }

// observe takes a probe's rewind counter: a rewind sets every bound aside.
// It reports whether the counter moved (rows came back to pending: worth a
// claim).
func (r *reach) observe(p dialects.Probe) bool {
	if r.known && p.Rewinds == r.rewinds {
		return false
	}
	moved := r.known
	r.known, r.rewinds = true, p.Rewinds
	r.continuing, r.floors = nil, nil
	r.positions, r.posSorted = nil, nil
	r.nextFloors = time.Time{}
	r.lowerTo(time.Time{})
	return moved
}

// lowerTo makes the next walk in schedule order look back to t at least
// (zero: from the start), and the next claim by key walk the keys.
func (r *reach) lowerTo(t time.Time) {
	r.nextWalk = time.Time{}
	r.lookBackTo(t)
}

// lookBackTo makes the next walk in schedule order look back to t at least
// (zero: from the start); a claimer by key that found nothing in schedule
// order tries that order again rather than wait for its walk over the keys.
func (r *reach) lookBackTo(t time.Time) {
	r.fruitless = false
	if !r.anchor.IsZero() && (t.IsZero() || t.Before(r.anchor)) {
		r.anchor = t
		r.lowered++
		// The next walk takes rows of before the last one on purpose: they
		// are not late.
		r.lastWalk = time.Time{}
	}
}

// walkBy makes a claim by key walk the keys at t at the latest (a retry
// comes due then).
func (r *reach) walkBy(t time.Time) {
	if t.Before(r.nextWalk) {
		r.nextWalk = t
	}
}

// continued adds the keys whose runs ended well, for positions that hold
// for the current counter. While the horizon is not held, a key whose run
// took its last claimable row is not continued: a claim would find nothing
// there, and a row that arrives for it since is news, which makes the next
// claim walk the keys. While held, walks are rare, and it is continued all
// the same.
func (r *reach) continued(cs []Continuation) {
	for _, c := range cs {
		if r.known && c.Rewinds == r.rewinds {
			if r.held || !c.Ended {
				r.continuing = append(r.continuing, c.Pos)
			}
			r.learn(c.Pos)
		}
	}
	if extra := len(r.continuing) - r.t.MaxContinuing; extra > 0 {
		r.continuing = slices.Delete(r.continuing, 0, extra)
	}
}

// learn keeps a key's position; beyond maxPositions keys, the half least
// recently updated are forgotten.
func (r *reach) learn(p dialects.KeyPosition) {
	if r.positions == nil {
		r.positions = map[string]keyPos{}
	}
	r.posCount++
	if old, ok := r.positions[p.Key]; ok && old.after >= p.After {
		r.positions[p.Key] = keyPos{after: old.after, n: r.posCount}
		return
	}
	r.positions[p.Key] = keyPos{after: p.After, n: r.posCount}
	if len(r.positions) > r.t.MaxPositions {
		// Positions were updated posCount times in all; those updated in
		// the last maxPositions/2 times stay.
		for k, v := range r.positions {
			if v.n <= r.posCount-int64(r.t.MaxPositions/2) {
				delete(r.positions, k)
			}
		}
	}
}

// sortedPositions is the positions in key order (bytewise), made again at
// most every positionsEvery.
func (r *reach) sortedPositions(now time.Time) []dialects.KeyPosition {
	if len(r.positions) == 0 {
		return nil
	}
	if r.posSorted == nil || now.Sub(r.posSortedAt) >= r.t.PositionsEvery {
		out := make([]dialects.KeyPosition, 0, len(r.positions))
		for k, v := range r.positions {
			out = append(out, dialects.KeyPosition{Key: k, After: v.after})
		}
		slices.SortFunc(out, func(a, b dialects.KeyPosition) int { return strings.Compare(a.Key, b.Key) })
		r.posSorted, r.posSortedAt = out, now
	}
	return r.posSorted
}

// claimPlan is what one claim takes from the reach, and what it needs back.
type claimPlan struct {
	// kind is the claim's kind: the one asked for, or in schedule order
	// when a walk over the keys was asked for and is not due (fallback).
	kind         claimKind
	fallback     bool
	bounds       *dialects.Bounds
	continued    []dialects.KeyPosition
	continueOnly bool
	// full: the claim walks from the start, or, by key, walks the keys;
	// lowered is reach.lowered when it was planned.
	full    bool
	lowered int
	sentAt  time.Time
	// seen is reach.seen when a walk over the keys was planned.
	seen mark
	// writerAge is how long before the claim the oldest writer that its
	// probe saw open was first seen (see writersSeen), up to
	// maxWriterLook; 0: none, or older (left to the looks for stragglers).
	writerAge time.Duration
}

// plan fills a claim's bounds and continuations: at most heads keys, the
// oldest first.
//
// A claim by key walks the keys when its continuations leave room for
// heads and the walk's cost allows another (fullLookFactor times the last
// one's duration), or, while the horizon is not held, rows arrived or
// settled since the last walk, or that walk took every head it could.
// Otherwise, when the continuations fill it, it takes only them; when they
// do not, it takes only them as well while the horizon is not held (a walk
// in schedule order would pass over every row behind the busy heads of a
// deep backlog), and goes in schedule order while it is held, bounded by
// the lookback, which finds the rows that arrived since. A walk over the keys
// passes over every version that a long transaction keeps of the keys'
// rows (the skip scan cannot start past them), so a claimer that walked
// whenever rows arrived would, under a held snapshot, walk them at every
// claim: claims of many seconds, a backlog, longer runs, and more claims by
// key.
func (r *reach) plan(now time.Time, kind claimKind, heads int) claimPlan {
	p := claimPlan{kind: kind, lowered: r.lowered, sentAt: now}
	n := min(heads, len(r.continuing))
	p.continued = slices.Clone(r.continuing[:n])
	r.continuing = slices.Delete(r.continuing, 0, n)
	if !r.known {
		p.full = true
		return p
	}
	b := &dialects.Bounds{Rewinds: r.rewinds}
	if r.floors != nil && r.floorsAt == r.rewinds && !r.blind {
		b.Floors = r.floors
	}
	if kind == byKeyClaim {
		switch {
		case n >= heads:
			p.continueOnly = true
		case !now.Before(r.nextWalk) || !r.held && (r.moreKeys || r.seen.after(r.walked)):
			p.full, p.seen = true, r.seen
			r.fruitless = false
		case !r.held:
			// The last walk found every key it did not take busy, and no
			// row arrived since: the rows wait behind runs that this
			// replica will continue, or that other replicas run. A walk in
			// schedule order would pass over every one of them (a deep
			// backlog of few keys: hundreds of milliseconds a claim).
			p.continueOnly = true
		case r.fruitless:
			// A claim in schedule order since the last walk found nothing:
			// the rows wait behind busy heads (a deep backlog of few keys),
			// and another would pass over all of them again.
			p.continueOnly = true
		default:
			p.kind, p.fallback = scheduleClaim, true
		}
	}
	if p.kind == scheduleClaim {
		if p.full = r.anchor.IsZero(); !p.full {
			margin := r.t.LookbackMargin
			if narrow := r.held && !r.blind; narrow && now.Before(r.nextWide) {
				margin = r.margin(now)
			} else if narrow {
				r.nextWide = now.Add(r.t.WideEvery)
			}
			b.Lookback = now.Sub(r.anchor) + margin
		}
		if r.held && !r.blind && (r.floors == nil || now.Sub(r.floorsReadAt) >= r.t.PositionsAfter) {
			b.Positions = r.sortedPositions(now)
		}
	}
	p.bounds = b
	return p
}

// keysWait reports whether the last walk over the keys left keys waiting,
// and the next claim by key walks them at once (the horizon is not held).
func (r *reach) keysWait() bool { return !r.held && r.moreKeys }

// took learns how many rows a claim took, and whether it was full (it took
// as many heads or rows as it could: more wait). A claim in schedule order
// made instead of a walk that took none makes the next ones wait for the
// walk; a walk over the keys that was full makes the next claims walk again,
// while the horizon is not held, until one comes back short.
func (r *reach) took(p claimPlan, rows int, full bool) {
	r.claimedRows += rows
	r.lookRows += rows
	if p.fallback && rows == 0 {
		r.fruitless = true
	}
	switch {
	case p.kind == byKeyClaim && p.full:
		r.moreKeys = full
	case p.kind == scheduleClaim && !p.fallback:
		// The policy left claims by key (the keys are shallow): claims in
		// schedule order find the heads themselves, and a claim by key
		// later walks when rows arrive or its walk is due.
		r.moreKeys = false
	}
}

// failed puts back the continuations of a claim that did not run.
func (r *reach) failed(p claimPlan) {
	r.continuing = append(p.continued, r.continuing...)
}

// claimed learns from a claim: how far its walk looked, what a full look
// or a walk over the keys cost. waitingSince is when keyed rows began to
// wait for a writer (zero: none wait): rows of that time may commit later,
// so the next walk looks back to it.
func (r *reach) claimed(now time.Time, kind claimKind, p claimPlan, rep dialects.ClaimReport, took time.Duration, waitingSince time.Time) {
	switch {
	case rep.Empty:
		// It walked every due row it may look at and found no head (every
		// key's head busy: a deep backlog of few keys). Left where it was,
		// the anchor would make every later walk in schedule order walk
		// that backlog again, each as long as the first.
		rep.Now = p.sentAt.Add(r.dbAhead)
	case !rep.Now.IsZero():
		r.dbAhead = rep.Now.Sub(p.sentAt)
	}
	switch kind {
	case scheduleClaim:
		if p.lowered != r.lowered || rep.Now.IsZero() {
			return // the anchor moved back meanwhile, or the dialect keeps no bounds
		}
		r.noteLateness(now, rep, p.writerAge)
		to := p.sentAt
		if rep.Cut {
			to = p.sentAt.Add(-rep.Now.Sub(rep.Reach))
		}
		if from := p.sentAt.Add(-p.writerAge); from.Before(to) {
			to = from
		}
		if !waitingSince.IsZero() && waitingSince.Before(to) {
			to = waitingSince
		}
		// Forward only, but back to when an open writer was first seen: it
		// drew its values after the probe of the walk that set the anchor,
		// and may have begun before that walk.
		if to.After(r.anchor) || p.writerAge > 0 {
			r.anchor = to
		}
	case byKeyClaim:
		if p.full {
			r.nextWalk = now.Add(min(max(time.Duration(r.t.FullLookFactor)*took, r.t.MinFullLook), r.t.MaxFullLook))
			r.walked = r.walked.max(p.seen)
		}
	}
}

// writersSeen learns the writers a claim's probe saw open (nil: it could
// not tell) and returns how long before the claim was planned (sentAt) the
// oldest of them that is at most maxWriterLook old was first seen: such a
// writer drew its sequence values by then, its transaction began about
// then (its rows' scheduled_at), and it commits them behind the walks, so
// the next walk looks back to it. An older writer is passed over while it
// runs, so that one left open does not widen every walk; once a probe no
// longer sees it, the next walk looks back to when it was first seen (less
// lookbackMargin, for the time between its start and the probe that first
// saw it), once: its rows committed behind the walks since. (Left to the
// looks for stragglers, a commit that a busy disk held up for a second
// waited for the next narrow look, seconds apart while the horizon is
// held, and with it every row that committed as slowly.) A writer open
// longer than maxEndedWriterLook is still left to those looks, so that a
// walk on the claims' path never reads as much as they do. Writers no
// longer open are forgotten.
func (r *reach) writersSeen(ws []int64, sentAt time.Time) time.Duration {
	if ws == nil {
		return 0
	}
	oldest := sentAt
	for _, w := range ws {
		at, ok := r.writers[w]
		if !ok {
			if r.writers == nil {
				r.writers = map[int64]time.Time{}
			}
			r.writers[w], at = sentAt, sentAt
		}
		if at.Before(oldest) && sentAt.Sub(at) <= r.t.LookbackMargin {
			oldest = at
		}
	}
	if len(r.writers) > len(ws) {
		var ended time.Time
		for w, at := range r.writers {
			if slices.Contains(ws, w) {
				continue
			}
			delete(r.writers, w)
			if open := sentAt.Sub(at); open > r.t.LookbackMargin && open <= r.t.StragglerSpan && (ended.IsZero() || at.Before(ended)) {
				ended = at
			}
		}
		if !ended.IsZero() {
			r.lookBackTo(ended.Add(-r.t.LookbackMargin))
		}
	}
	return sentAt.Sub(oldest)
}

// lookback is how far back a walk planned now with the whole margin looks
// (the look for stragglers looks behind it).
func (r *reach) lookback(now time.Time) time.Duration {
	return now.Sub(r.anchor) + r.t.LookbackMargin
}

// margin is the narrow walks' margin: twice the largest lateness of the
// last one or two windows, plus minMargin, up to lookbackMargin.
func (r *reach) margin(now time.Time) time.Duration {
	r.rotateLate(now)
	return min(2*max(r.late, r.latePrev)+r.t.MinMargin, r.t.LookbackMargin)
}

func (r *reach) rotateLate(now time.Time) {
	switch gap := now.Sub(r.lateFrom); {
	case gap >= 2*r.t.LateWindow:
		r.latePrev, r.late, r.lateFrom = 0, 0, now
	case gap >= r.t.LateWindow:
		r.latePrev, r.late, r.lateFrom = r.late, 0, now
	}
}

// noteLateness learns from a walk how late its rows came: the earliest row
// it took became due this long before the previous walk looked (its
// transaction committed after that walk, or the walk could not take it),
// or before the oldest writer that walk's probe saw open was first seen,
// which the next walk looked back to. A walk cut at its limit did not
// look at everything due: the next one's rows are not late.
func (r *reach) noteLateness(now time.Time, rep dialects.ClaimReport, writerAge time.Duration) {
	if !r.lastWalk.IsZero() && !rep.Earliest.IsZero() {
		if late := r.lastWalk.Sub(rep.Earliest); late > 0 {
			r.rotateLate(now)
			r.late = max(r.late, late)
		}
	}
	r.lastWalk = rep.Now.Add(-writerAge)
	if rep.Cut {
		r.lastWalk = time.Time{}
	}
}

// stragglersDue says whether to look for stragglers now, and with which
// bounds (marking the look under way).
func (r *reach) stragglersDue(now time.Time) (dialects.Bounds, bool) {
	if r.looking || !r.known || r.anchor.IsZero() || now.Before(r.nextLook) || r.quiet(now, r.lookRows, r.lookAt) {
		return dialects.Bounds{}, false
	}
	r.looking, r.lookRows, r.lookAt = true, 0, now
	b := dialects.Bounds{Rewinds: r.rewinds, Lookback: r.lookback(now)}
	r.whole = !now.Before(r.nextWhole)
	if !r.whole {
		b.Within = r.t.StragglerSpan
	}
	if r.floors != nil && r.floorsAt == r.rewinds && !r.blind {
		b.Floors = r.floors
	}
	return b, true
}

// stragglersFound takes a look's result: a straggler that became due ago
// before the look was sent (at sentAt) makes the next walk look back to it.
func (r *reach) stragglersFound(now time.Time, ago time.Duration, found bool, sentAt time.Time, took time.Duration, err error) {
	r.looking = false
	next := min(max(time.Duration(r.t.BackgroundLookFactor)*took, r.t.MinStragglerLook), r.t.MaxFullLook)
	if r.whole {
		r.nextWhole = now.Add(next)
		next = r.t.MinStragglerLook // the narrow looks go on in between
	}
	r.nextLook = now.Add(next)
	if err == nil && found {
		r.lowerTo(sentAt.Add(-ago))
	}
}

// floorsDue says whether to read the floors now (and marks the read
// under way).
func (r *reach) floorsDue(now time.Time) bool {
	if r.reading || r.blind || !r.known || now.Before(r.nextFloors) || r.floors != nil && r.quiet(now, r.claimedRows, r.floorsReadAt) {
		return false
	}
	r.reading = true
	return true
}

// quiet says whether a look off the claims' path that last ran at last,
// with rows claimed since, waits for more: while the horizon is clear and
// fewer than Tuning.LookAfterRows rows were claimed, a look comes at most
// every Tuning.QuietLookEvery. A trickle leaves few versions behind and
// few rows to straggle, and a look per claim would cost the database more
// than the claims.
func (r *reach) quiet(now time.Time, rows int, last time.Time) bool {
	return !r.held && rows < r.t.LookAfterRows && now.Before(last.Add(r.t.QuietLookEvery))
}

// lastFloors are the floors read last, for the next read to start from
// (none: Groups nil). They are never changed once read.
func (r *reach) lastFloors() dialects.Floors {
	if r.floors == nil || r.blind {
		return dialects.Floors{}
	}
	return dialects.Floors{Rewinds: r.floorsAt, Groups: r.floors}
}

// floorsRead takes a floors read's result.
func (r *reach) floorsRead(now time.Time, f dialects.Floors, took time.Duration, err error) {
	r.reading = false
	if err != nil {
		if dialects.Blind(err) {
			r.blind = true
		}
		return
	}
	if f.Rewinds != r.rewinds {
		return // made before a rewind: the next read comes as soon as it may
	}
	r.nextFloors = now.Add(min(max(time.Duration(r.t.BackgroundLookFactor)*took, r.t.MinFullLook), r.t.MaxFloorsLook))
	r.floors, r.floorsAt, r.floorsReadAt = f.Groups, f.Rewinds, now
	r.claimedRows = 0
}
