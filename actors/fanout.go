package actors

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/queuebox/queuebox/actors/internal/upkeep"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/routing"
)

// Fan-out: a row whose route sends it to several destinations is delivered
// to each of them as a unit, in the unit's lane (its destination and the
// row's key), so that each destination keeps the key's order on its own
// and one that fails holds back none of the others. The claimer splits
// the rows (splitClaim), the key actors of the lanes and the pool deliver
// the units as they deliver rows, and the completer gathers each row's
// units into the row's one outcome (fanIn): delivered, with a copy
// (dialects.Copy) for each destination whose delivery did not end well.
// The copies path (copies.go) delivers the copies.

// unit is one destination's part of a fan-out row, as it travels with the
// row's claim: the route found when the row was claimed (its filter is not
// run again), the destination, and the observer of the pair.
type unit struct {
	route *routing.Route
	dest  string
	obs   RouteObserver
}

// unitEndKind says how a unit ended.
type unitEndKind uint8

const (
	// unitDelivered: the destination accepted the row.
	unitDelivered unitEndKind = iota + 1
	// unitCopied: the delivery did not end well (copy says how).
	unitCopied
	// unitReleased: handed back untouched (the lane stopped behind an
	// earlier row, the replica drains, the lease is not trusted).
	unitReleased
	// unitLost: the row's claim was lost.
	unitLost
	// unitRowDead: the row itself cannot be delivered anywhere (its payload
	// or headers); copy.Error says why.
	unitRowDead
)

// unitEnd is how one unit of a fan-out row ended, as the delivery path
// sends it to the completer.
type unitEnd struct {
	claim dialects.Claim
	end   unitEndKind
	// copy is the destination's copy (unitCopied), its CopyBehind
	// (unitReleased), or the reason (unitRowDead).
	copy    dialects.Copy
	attempt *dialects.Attempt
}

// unitEndOf turns the outcome a unit's delivery decided into its end: a
// failure becomes its destination's copy, with the attempt the copy
// counts from.
func unitEndOf(p *prepared, o dialects.Outcome) unitEnd {
	u := unitEnd{claim: o.Claim, attempt: o.Attempt, copy: dialects.Copy{Destination: p.unit.dest, Attempt: p.row.Attempt, Delay: o.Delay, Error: o.Error}}
	switch o.Kind {
	case dialects.OutcomeDelivered:
		u.end = unitDelivered
	case dialects.OutcomeRetry:
		u.end, u.copy.Kind, u.copy.Attempt = unitCopied, dialects.CopyRetry, p.row.Attempt+1
	case dialects.OutcomeDefer:
		u.end, u.copy.Kind = unitCopied, dialects.CopyDefer
	default:
		u.end, u.copy.Kind = unitCopied, dialects.CopyDead
		if p.rowDead {
			u.end = unitRowDead
		}
	}
	return u
}

// fanRow is a fan-out row on its way: the claimer makes it when it splits
// the row into units and hands it to the completer, which alone reads and
// writes it from then on.
type fanRow struct {
	claim dialects.Claim
	key   string
	// seq is the row's sequence, rewinds the rewind counter its claim's
	// bounds were made at: where its key stands once it is written.
	seq     int64
	rewinds int64
	// waiting counts the units that have not ended.
	waiting int
	// copies and attempts are what the row's outcome writes.
	copies   []dialects.Copy
	attempts []dialects.Attempt
	// tried: a unit was delivered, or its delivery tried or held;
	// released: a unit was handed back untouched; lost: the claim was lost.
	tried, released, lost bool
	// dead, when set, is why the whole row is dead.
	dead string
}

// ended reports whether every unit of the row has ended.
func (f *fanRow) ended() bool { return f.waiting == 0 }

// note counts one unit's end.
func (f *fanRow) note(u unitEnd) {
	f.waiting--
	if u.attempt != nil {
		f.attempts = append(f.attempts, *u.attempt)
	}
	switch u.end {
	case unitDelivered:
		f.tried = true
	case unitCopied:
		f.tried = true
		f.copies = append(f.copies, u.copy)
	case unitReleased:
		f.released = true
		f.copies = append(f.copies, u.copy)
	case unitLost:
		f.lost = true
	case unitRowDead:
		if f.dead == "" {
			f.dead = u.copy.Error
		}
	}
}

// outcome is the row's one outcome once every unit has ended; false when
// nothing is written (the claim was lost). A row none of whose units was
// tried, and one of which was released, goes back to pending as it was.
func (f *fanRow) outcome() (dialects.Outcome, bool) {
	o := dialects.Outcome{Claim: f.claim}
	switch {
	case f.lost:
		return o, false
	case f.dead != "":
		o.Kind, o.Error = dialects.OutcomeDead, f.dead
	case f.released && !f.tried:
		o.Kind = dialects.OutcomeRelease
	default:
		o.Kind, o.Copies, o.Attempts = dialects.OutcomeDelivered, f.copies, f.attempts
	}
	return o, true
}

// fanIn gathers the units of the fan-out rows in flight into one outcome
// per row, and hands the outcomes out in each key's sequence order: a
// row's outcome waits for those of the earlier rows of its key that this
// replica claimed, so that a replica that stops between two leaves its
// key's undelivered rows in order behind its delivered ones. It is the
// completer's.
type fanIn struct {
	// rows are by claim: a row this replica claimed again may still have
	// units of its earlier claim in flight.
	rows map[dialects.Claim]*fanRow
	// keys holds each key's rows in flight, in sequence order, and runs
	// what the key's rows in flight tell of where the key stands.
	keys map[string][]*fanRow
	runs map[string]*fanRun
}

// fanRun follows the fan-out rows of a key from the moment the key has
// some in flight until it has none again, as runState does a key actor's
// run: if every row was written delivered or dead, and all came from
// claims made at one rewind counter, the key's position is told to the
// claimer (a continuation), which claims its next rows at once.
type fanRun struct {
	rewinds int64
	broken  bool
	last    *fanRow
}

func newFanIn() *fanIn {
	return &fanIn{rows: map[dialects.Claim]*fanRow{}, keys: map[string][]*fanRow{}, runs: map[string]*fanRun{}}
}

// fanOut is what fanIn hands out: outcomes to write, claims lost, where
// keys stand, and whether rows went back to pending as they were (rewind:
// they keep their old schedule, behind what the claims have looked at, so
// the rewind counter moves once they are written; see claimplan, "Bounds").
type fanOut struct {
	outcomes  []dialects.Outcome
	abandons  []dialects.Claim
	continued []continuation
	rewind    bool
}

// add starts following rows (in sequence order per key); rows whose units
// all ended already (every lane was blocked) come out at once.
func (fi *fanIn) add(rows []*fanRow, out *fanOut) {
	for _, f := range rows {
		fi.rows[f.claim] = f
		if f.key == "" {
			continue
		}
		fi.keys[f.key] = append(fi.keys[f.key], f)
		if run := fi.runs[f.key]; run == nil {
			fi.runs[f.key] = &fanRun{rewinds: f.rewinds}
		} else if run.rewinds != f.rewinds {
			run.broken = true
		}
	}
	for _, f := range rows {
		if f.ended() {
			fi.emit(f, out)
		}
	}
}

// end counts the ends of units and hands out the rows that may be written.
func (fi *fanIn) end(units []unitEnd, out *fanOut) {
	for _, u := range units {
		f := fi.rows[u.claim]
		if f == nil {
			continue
		}
		f.note(u)
		if f.ended() {
			fi.emit(f, out)
		}
	}
}

// emit hands out an ended row, unless an earlier row of its key has not
// ended; then the rows of the key that waited for it.
func (fi *fanIn) emit(f *fanRow, out *fanOut) {
	if f.key == "" {
		fi.finish(f, out)
		return
	}
	q := fi.keys[f.key]
	if len(q) == 0 || q[0] != f {
		return // an earlier row has not ended, or f came out with one
	}
	run := fi.runs[f.key]
	i := 0
	for i < len(q) && q[i].ended() {
		if !fi.finish(q[i], out) {
			run.broken = true
		}
		run.last = q[i]
		q[i] = nil
		i++
	}
	if i < len(q) {
		fi.keys[f.key] = q[i:]
		return
	}
	delete(fi.keys, f.key)
	delete(fi.runs, f.key)
	if !run.broken {
		out.continued = append(out.continued, continuation{pos: dialects.KeyPosition{Key: f.key, After: run.last.seq},
			rewinds: run.rewinds, last: run.last.claim})
	}
}

// finish hands out a row's outcome, and reports whether the row ended well
// (delivered or dead: its key may go on past it). A row delivered with
// copies did not: the claim that continues a key takes its next row
// without looking back, and could take it before the copies commit (two
// flushes of the completer may run at once), so that the next row's pass
// would not see the lanes they block.
func (fi *fanIn) finish(f *fanRow, out *fanOut) bool {
	delete(fi.rows, f.claim)
	o, ok := f.outcome()
	if !ok {
		out.abandons = append(out.abandons, f.claim)
		return false
	}
	out.outcomes = append(out.outcomes, o)
	out.rewind = out.rewind || o.Kind == dialects.OutcomeRelease
	return o.Kind == dialects.OutcomeDelivered && len(o.Copies) == 0 || o.Kind == dialects.OutcomeDead
}

// laneRun is the rows one claim hands to one actor: a key's (lane.Key), a
// fan-out lane's (lane.Destination too), or the pool's (the zero lane).
type laneRun struct {
	lane dialects.Lane
	run  []claimed
	// pid is the actor's, once the claimer knows it.
	pid *actor.PID
}

// splitClaim splits a claim's rows, sorted by key then sequence, into the
// runs of the actors that deliver them, when the router has fan-out routes.
// A key's rows travel in lanes, a unit per destination, when one of them
// goes to several destinations or one of its lanes is blocked (copies of
// the key wait for that destination): then each lane keeps the key's order
// for its destination. A unit of a blocked lane becomes its CopyBehind at
// once. Other keys' rows go to their key actor as they are; unkeyed rows
// go to the pool, a fan-out one as a unit per destination. It returns the
// fan-out rows too, for the completer.
func (d *deliverer) splitClaim(rows []dialects.Row, l *upkeep.Lease, blocked []dialects.Lane) ([]laneRun, []*fanRow) {
	var block map[dialects.Lane]bool
	if len(blocked) > 0 {
		block = make(map[dialects.Lane]bool, len(blocked))
		for _, b := range blocked {
			block[b] = true
		}
	}
	var runs []laneRun
	var fans []*fanRow
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j].Key == rows[i].Key {
			j++
		}
		key := rows[i].Key
		routes := make([]*routing.Route, j-i)
		errs := make([]error, j-i)
		laned := false
		for k := range rows[i:j] {
			routes[k], errs[k] = d.routeOf(&rows[i+k])
			if rt := routes[k]; rt != nil && key != "" {
				laned = laned || rt.FanOut() || blockedAny(block, rt, key)
			}
		}
		switch {
		case key == "":
			runs = append(runs, d.splitUnkeyed(rows[i:j], routes, l, &fans))
		case !laned:
			run := make([]claimed, 0, j-i)
			for k, r := range rows[i:j] {
				run = append(run, claimed{Row: r, lease: l, route: routes[k]})
			}
			runs = append(runs, laneRun{lane: dialects.Lane{Key: key}, run: run})
		default:
			first := len(runs)
			for k, r := range rows[i:j] {
				f := &fanRow{claim: r.Claim, key: key, seq: r.Sequence, rewinds: l.Rewinds()}
				fans = append(fans, f)
				rt := routes[k]
				if rt == nil {
					f.dead = d.unroutable(r, errs[k])
					continue
				}
				for _, dest := range rt.Targets() {
					lane := dialects.Lane{Destination: dest, Key: key}
					if block[lane] {
						f.copies = append(f.copies, dialects.Copy{Destination: dest, Kind: dialects.CopyBehind, Attempt: r.Attempt})
						continue
					}
					f.waiting++
					n := first
					for n < len(runs) && runs[n].lane != lane {
						n++
					}
					if n == len(runs) {
						runs = append(runs, laneRun{lane: lane})
					}
					runs[n].run = append(runs[n].run, claimed{Row: r, lease: l, unit: d.unitOf(rt, dest)})
				}
			}
		}
		i = j
	}
	return runs, fans
}

// splitUnkeyed is the pool's run of the unkeyed rows of a claim: the rows
// to one destination as they are, and the units of fan-out rows grouped by
// destination, so that a sink that takes several messages at once gets
// them together (unkeyed rows have no order to keep).
func (d *deliverer) splitUnkeyed(rows []dialects.Row, routes []*routing.Route, l *upkeep.Lease, fans *[]*fanRow) laneRun {
	pool := laneRun{run: make([]claimed, 0, len(rows))}
	var byDest map[string][]claimed
	var dests []string
	for k, r := range rows {
		rt := routes[k]
		if rt == nil || !rt.FanOut() {
			pool.run = append(pool.run, claimed{Row: r, lease: l, route: rt})
			continue
		}
		*fans = append(*fans, &fanRow{claim: r.Claim, waiting: len(rt.Destinations)})
		if byDest == nil {
			byDest = map[string][]claimed{}
		}
		for _, dest := range rt.Destinations {
			if byDest[dest] == nil {
				dests = append(dests, dest)
			}
			byDest[dest] = append(byDest[dest], claimed{Row: r, lease: l, unit: d.unitOf(rt, dest)})
		}
	}
	for _, dest := range dests {
		pool.run = append(pool.run, byDest[dest]...)
	}
	return pool
}

// blockedAny reports whether one of the route's lanes for key is blocked.
func blockedAny(block map[dialects.Lane]bool, rt *routing.Route, key string) bool {
	if block == nil {
		return false
	}
	for _, dest := range rt.Targets() {
		if block[dialects.Lane{Destination: dest, Key: key}] {
			return true
		}
	}
	return false
}

// routeOf finds a row's route as prepare does (nil: none); an error says
// why the row cannot be routed at all.
func (d *deliverer) routeOf(r *dialects.Row) (*routing.Route, error) {
	if d.router.Filters() {
		rt, _, err := d.routeFiltered(r)
		return rt, err
	}
	return d.router.Match(r.Topic), nil
}

// unroutable is the last_error of a row of a lane that no route takes, and
// counts it dead.
func (d *deliverer) unroutable(r dialects.Row, err error) string {
	if err == nil {
		err = fmt.Errorf("no route matches topic %q", r.Topic)
	}
	msg := d.policy.lastError(err)
	d.stats.Dead.Add(1)
	d.routes.unrouted.Finished(Dead, 0, 0)
	d.log.Info("row dead", "id", r.ID, "reason", msg)
	return msg
}

// unitOf is the unit of a row for dest on route rt (shared by the rows of
// the route: it never changes).
func (d *deliverer) unitOf(rt *routing.Route, dest string) *unit { return d.routes.unit(rt, dest) }
