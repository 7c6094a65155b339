package actors

import (
	"context"
	"errors"
	"fmt"
	"github.com/queuebox/queuebox/actors/internal/destctl"
	"github.com/queuebox/queuebox/actors/internal/upkeep"
	"github.com/queuebox/queuebox/internal/clock"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
)

// The delivery path, shared by the key actors and the unordered pool. Each
// holds a deliveryQueue: rows wait in it, leave it in batches (one Publish
// each, run by a goroutine that reports back), and end as outcomes sent to
// the completer. The two differ only in ordering: a key actor's queue is
// ordered (one Publish at a time; a row that is retried, lost, or outside
// its trust window stops it, and the rows behind go back to pending
// untouched), the pool's is not (many Publish calls at once; each row's
// outcome stands alone).

// Messages of the key actors and the pool.
type (
	// deliverRun: rows to deliver, in sequence order for a key actor.
	deliverRun struct{ rows []claimed }
	// deliveryDone: a Publish returned, one error (or nil) per row; or it
	// never started: notStarted (the replica drains, the lease is no
	// longer trusted, the claims were lost), or held (the destination was
	// paused, or its circuit opened, while the delivery waited for a
	// permit; its rows are deferred for delay).
	deliveryDone struct {
		gen  int
		errs []error
		took time.Duration
		// started is when the Publish started; answers what the
		// destination answered (nil when the attempt history is off).
		started    time.Time
		answers    *sinks.Answers
		notStarted bool
		held       destctl.HoldReason
		delay      time.Duration
	}
)

// deliverer is what every key actor and the pool deliver with: the routes,
// the destinations' sinks, the outcome policy, the completer that writes the
// outcomes, and the counters. The engine supervisor builds one; it is never
// changed afterwards, so the actors share it without locks.
type deliverer struct {
	router    *routing.Router
	sinks     map[string]*destctl.Handle
	policy    outcomePolicy
	completer *actor.PID
	// ctx is the parent of every Publish; the engine cancels it when the
	// drain timeout passes.
	ctx    context.Context
	log    *slog.Logger
	stats  *Stats
	obs    Observer
	routes routeObservers
	// history: the outcomes carry their attempts (attempts.go);
	// allDeliveries: a first try that succeeded too.
	history       bool
	allDeliveries bool
	clock         clock.Clock
}

// deliveryQueue is the rows one actor holds: waiting (queue), being
// published (flights), and those whose claim was lost mid-flight.
type deliveryQueue struct {
	d *deliverer
	// ordered: the rows are one key's, in sequence order (see above).
	ordered bool
	// key is the key of an ordered queue. run follows its current run,
	// for the position the claimer continues the key from.
	key        string
	run        runState
	maxFlights int
	queue      []claimed
	flights    map[int]*flight
	gen        int
	// lost counts, per claim, the rows in flight whose claim was lost (the
	// units of a fan-out row share its claim).
	lost     map[dialects.Claim]int
	draining bool
	// lane: the queue is a fan-out lane's (a destination's view of a key),
	// whose rows' outcomes are their fan-out rows': it tells the claimer
	// no position.
	lane bool

	// flightsTo counts the flights per destination (the pool lets a
	// destination with a flow control take half of its Publish calls).
	flightsTo map[*destctl.Handle]int
	// parked holds, per destination, the pool's rows that wait for one of
	// those Publish calls: prepared, in the order they came, counted in
	// the destination's flow as queued. They start, in that order, as the
	// destination's flights end.
	parked  map[*destctl.Handle][]parkedRow
	nParked int
	// queuedIn is the flow the rows of this ordered queue wait behind,
	// queuedN how many of them it counts (countQueued).
	queuedIn *destctl.Flow
	queuedN  int
}

// runState follows one run of a key: from the first rows it receives while
// idle to the moment it is idle again. A run that ends with every row
// delivered or dead tells the claimer where the key stands (a
// continuation); one that stopped (a retry, a release, a lost claim), or
// whose rows came from claims made at different replay counters, tells
// nothing: the key's next head is found by the claims' walks.
type runState struct {
	last    dialects.Claim
	lastSeq int64
	rewinds int64
	started bool
	broken  bool
}

// continuation is where a key stands after a run that ended well, and the
// replay counter that position holds for.
type continuation struct {
	pos     dialects.KeyPosition
	rewinds int64
	// last is the claim of the run's last row: if its outcome turns out
	// lost, the position is not the key's.
	last dialects.Claim
}

// claimed is a row with the lease of its claim; with unit set, it is one
// destination's part of a fan-out row (fanout.go). route, when set, is
// the row's route, found when it was claimed (with fan-out routes, the
// claimer routes every row): prepare does not look for it again.
type claimed struct {
	dialects.Row
	lease *upkeep.Lease
	unit  *unit
	route *routing.Route
}

// flight is one Publish call in progress: waiting for the destination's
// permits (flow.go), then publishing.
type flight struct {
	rows   []prepared
	leases []*upkeep.Lease
	cancel context.CancelFunc
	// probe: the delivery is its destination's circuit probe (one row).
	probe bool
	// state goes from flightWaiting to flightPublishing (the publish
	// goroutine), or to flightCancelled (a drain, which ends only the
	// deliveries that have not started).
	state atomic.Int32
}

// parkedRow is a row of the pool that waits for a Publish call to its
// destination.
type parkedRow struct {
	p     prepared
	lease *upkeep.Lease
}

const (
	flightWaiting int32 = iota
	flightPublishing
	flightCancelled
)

func newDeliveryQueue(d *deliverer, ordered bool, maxFlights int) deliveryQueue {
	return deliveryQueue{d: d, ordered: ordered, maxFlights: maxFlights, flights: map[int]*flight{}, lost: map[dialects.Claim]int{},
		flightsTo: map[*destctl.Handle]int{}, parked: map[*destctl.Handle][]parkedRow{}}
}

// step handles one of the delivery messages, starts what can start, and
// sends the outcomes to the completer. It returns how many rows ended
// (outcomes and abandoned claims), and false when the message was not a
// delivery message (it did nothing then).
func (q *deliveryQueue) step(ctx actor.Context) (int, bool) {
	var out outcomes
	switch m := ctx.Message().(type) {
	case *deliverRun:
		q.noteRun(m.rows)
		q.queue = append(q.queue, m.rows...)
		if q.draining {
			out.rewind = true
			q.releaseQueue(&out)
		}
	case *deliveryDone:
		q.onDone(m, &out)
	case *upkeep.CancelClaims:
		q.onLost(m.Claims, &out)
	case *drain:
		q.draining = true
		out.rewind = len(q.queue) > 0 || q.nParked > 0
		q.releaseQueue(&out)
		for _, f := range q.flights {
			if f.state.CompareAndSwap(flightWaiting, flightCancelled) {
				f.cancel()
			}
		}
	default:
		return 0, false
	}
	q.startDeliveries(ctx, &out)
	q.endRun(&out)
	q.d.send(ctx, &out)
	return out.count(), true
}

// noteRun starts a run when rows arrive at an idle ordered queue.
func (q *deliveryQueue) noteRun(rows []claimed) {
	if !q.ordered || len(rows) == 0 {
		return
	}
	if q.idle() && !q.run.started {
		q.run = runState{started: true, rewinds: rows[0].lease.Rewinds()}
	}
	for _, r := range rows {
		if r.lease.Rewinds() != q.run.rewinds {
			q.run.broken = true
		}
	}
}

// endRun follows what this step decided, and when the run has ended well,
// hands the key's position to the completer with the outcomes.
func (q *deliveryQueue) endRun(out *outcomes) {
	if !q.ordered || !q.run.started {
		return
	}
	if out.stopped {
		q.run.broken = true
	}
	if out.lastSeq > q.run.lastSeq {
		q.run.lastSeq, q.run.last = out.lastSeq, out.last
	}
	if !q.idle() {
		return
	}
	if !q.run.broken && q.run.lastSeq > 0 && !q.draining && !q.lane {
		out.continued = &continuation{pos: dialects.KeyPosition{Key: q.key, After: q.run.lastSeq}, rewinds: q.run.rewinds, last: q.run.last}
	}
	q.run = runState{}
}

// idle reports whether the queue holds nothing.
func (q *deliveryQueue) idle() bool {
	return len(q.flights) == 0 && len(q.queue) == 0 && q.nParked == 0
}

// startDeliveries starts Publish calls while there is room for one: for
// the pool's parked rows first (the oldest of each destination that has
// room again), then for the rows in the queue.
func (q *deliveryQueue) startDeliveries(ctx actor.Context, out *outcomes) {
	for len(q.flights) < q.maxFlights && !q.draining {
		now := q.d.clock.Now()
		p, l, ok := q.unpark()
		if ok {
			if !l.Trusted(p.row.ID, now) {
				q.d.release(out, p.row, p.unit)
				out.rewind = true
				continue
			}
		} else if len(q.queue) > 0 {
			head := q.pop()
			if !head.lease.Trusted(head.ID, now) {
				// The lease may have passed: delivering now could race another
				// replica. Hand the row back.
				q.d.release(out, head.Row, head.unit)
				out.rewind = true
				q.stopIfOrdered(out)
				continue
			}
			p, l = q.d.prepareClaimed(&head), head.lease
			switch {
			case p.dead != nil:
				q.d.record(out, &p, q.d.policy.dead(p.row, p.dead), 0)
				continue
			case p.retry != nil:
				if q.d.finish(out, &p, p.retry, 0, nil, destctl.BreakerView{}) == dialects.OutcomeRetry {
					q.stopIfOrdered(out)
				}
				continue
			}
		} else {
			break
		}
		run, own := 1, 0
		if q.ordered {
			run, own = 1+len(q.queue), q.queuedN
		}
		adm := p.dest.Admit(now, run, own)
		if adm.Held != destctl.NotHeld {
			q.d.deferRow(out, &p, adm.Held, adm.Delay)
			q.stopIfOrdered(out)
			continue
		}
		if !q.ordered && p.dest.Flow() != nil && q.flightsTo[p.dest] >= q.share() {
			// The pool's other destinations keep half its Publish calls:
			// the row waits for one of this destination's to end.
			if adm.Probe {
				p.dest.ProbeAbandoned()
			}
			q.park(p, l)
			continue
		}
		batch, leases := q.batch(p, l, now, adm.Probe)
		if f := p.dest.Flow(); f != nil {
			f.Enter(len(batch))
		}
		q.publish(ctx, batch, leases, adm.Probe)
	}
	q.countQueued()
}

// share is how many of the pool's Publish calls one destination with a
// flow control may hold: half, so that the others keep the rest.
func (q *deliveryQueue) share() int { return max(1, q.maxFlights/2) }

// park keeps a row of the pool until its destination has a Publish call to
// spare; it counts as waiting in the destination's flow meanwhile.
func (q *deliveryQueue) park(p prepared, l *upkeep.Lease) {
	q.parked[p.dest] = append(q.parked[p.dest], parkedRow{p: p, lease: l})
	q.nParked++
	p.dest.Flow().Queued.Add(1)
}

// unpark takes the oldest parked row of a destination that has a Publish
// call to spare again, if there is one.
func (q *deliveryQueue) unpark() (prepared, *upkeep.Lease, bool) {
	if q.nParked == 0 {
		return prepared{}, nil, false
	}
	for h, rows := range q.parked {
		if q.flightsTo[h] >= q.share() {
			continue
		}
		r := rows[0]
		rows[0] = parkedRow{}
		if len(rows) == 1 {
			delete(q.parked, h)
		} else {
			q.parked[h] = rows[1:]
		}
		q.nParked--
		h.Flow().Queued.Add(-1)
		return r.p, r.lease, true
	}
	return prepared{}, nil, false
}

// countQueued tells a destination's flow control how many rows of this
// ordered queue wait behind its delivery to that destination: they hold
// credit as long as it waits, so they count against the rows it lets wait
// (flow.room).
func (q *deliveryQueue) countQueued() {
	if !q.ordered {
		return
	}
	var f *destctl.Flow
	n := 0
	for _, fl := range q.flights {
		if fl.rows[0].dest.Flow() != nil && len(q.queue) > 0 {
			f, n = fl.rows[0].dest.Flow(), len(q.queue)
		}
	}
	if f != q.queuedIn && q.queuedIn != nil {
		q.queuedIn.Queued.Add(-int64(q.queuedN))
		q.queuedN = 0
	}
	q.queuedIn = f
	if f != nil {
		f.Queued.Add(int64(n - q.queuedN))
		q.queuedN = n
	}
}

// batch takes the rows behind first that can go in the same Publish: plain
// deliveries to the same destination, inside their trust window, up to the
// sink's batch size (one row for the circuit's probe). It returns the
// leases of the rows too.
func (q *deliveryQueue) batch(first prepared, l *upkeep.Lease, now time.Time, probe bool) ([]prepared, []*upkeep.Lease) {
	batch, leases := []prepared{first}, []*upkeep.Lease{l}
	limit := first.dest.MaxBatch()
	if probe {
		limit = 1
	}
	for len(batch) < limit && len(q.queue) > 0 {
		next := q.queue[0]
		if !next.lease.Trusted(next.ID, now) {
			break
		}
		p := q.d.prepareClaimed(&next)
		if p.dead != nil || p.retry != nil || p.dest != first.dest {
			break
		}
		batch, leases = append(batch, p), append(leases, next.lease)
		q.pop()
	}
	return batch, leases
}

// pop takes the queue's first row. The slot is cleared, and an empty queue
// lets go of its array: a reslice alone would keep every row a key ever
// queued (payloads included) alive until the next append.
func (q *deliveryQueue) pop() claimed {
	head := q.queue[0]
	q.queue[0] = claimed{}
	q.queue = q.queue[1:]
	if len(q.queue) == 0 {
		q.queue = nil
	}
	return head
}

// publish starts one delivery in a goroutine that reports back to this
// actor, so that no actor ever waits on a destination.
func (q *deliveryQueue) publish(ctx actor.Context, batch []prepared, leases []*upkeep.Lease, probe bool) {
	q.gen++
	fctx, cancel := context.WithCancel(q.d.ctx)
	f := &flight{rows: batch, leases: leases, cancel: cancel, probe: probe}
	q.flights[q.gen] = f
	q.flightsTo[batch[0].dest]++
	msgs := make([]sinks.Message, len(batch))
	for i := range batch {
		msgs[i] = batch[i].msg
	}
	h, gen, log := batch[0].dest, q.gen, q.d.log
	root, self := ctx.ActorSystem().Root, ctx.Self()
	var answers *sinks.Answers
	if q.d.history {
		answers = sinks.NewAnswers(msgs, q.d.policy.maxErrorBytes)
		fctx = sinks.WithAnswers(fctx, answers)
	}
	go func() {
		done := deliver(fctx, h, f, msgs, probe, log)
		done.answers = answers
		done.gen = gen
		root.Send(self, done)
	}()
}

// deliver waits for the destination's permits (when it has a flow
// control), checks that the delivery may still start (the destination was
// not paused meanwhile, nor its circuit opened, the lease is still trusted,
// the replica does not drain), publishes, and tells the destination's
// health how it went. It runs in the flight's goroutine.
func deliver(ctx context.Context, h *destctl.Handle, f *flight, msgs []sinks.Message, probe bool, log *slog.Logger) *deliveryDone {
	notStarted := func(held destctl.HoldReason, delay time.Duration) *deliveryDone {
		if probe {
			h.ProbeAbandoned()
		}
		return &deliveryDone{notStarted: held == destctl.NotHeld, held: held, delay: delay}
	}
	if h.Flow() != nil {
		release, err := h.Flow().Acquire(ctx, len(msgs))
		if err != nil {
			if errors.Is(err, destctl.ErrHeld) {
				if r, d := h.HeldNow(h.Clock().Now(), probe); r != destctl.NotHeld {
					return notStarted(r, d)
				}
				return notStarted(destctl.HeldPaused, destctl.MinDeferral) // paused and resumed meanwhile
			}
			return notStarted(destctl.NotHeld, 0)
		}
		defer release()
	}
	if !f.state.CompareAndSwap(flightWaiting, flightPublishing) {
		return notStarted(destctl.NotHeld, 0) // a drain came first
	}
	now := h.Clock().Now()
	if r, d := h.HeldNow(now, probe); r != destctl.NotHeld {
		return notStarted(r, d)
	}
	for i, l := range f.leases {
		if !l.Trusted(f.rows[i].row.ID, now) {
			return notStarted(destctl.NotHeld, 0) // it waited too long for a permit
		}
	}
	errs := publish(ctx, h, msgs)
	took := clock.Since(h.Clock(), now)
	if h.Flow() != nil {
		h.Flow().NoteTook(took)
	}
	h.NoteHealth(errs, now.Sub(h.Origin()), now.Add(took).Sub(h.Origin()), probe, log)
	return &deliveryDone{errs: errs, took: took, started: now}
}

// onDone turns a Publish's results into outcomes.
func (q *deliveryQueue) onDone(m *deliveryDone, out *outcomes) {
	f := q.flights[m.gen]
	if f == nil {
		return
	}
	delete(q.flights, m.gen)
	f.cancel()
	if q.flightsTo[f.rows[0].dest]--; q.flightsTo[f.rows[0].dest] <= 0 {
		delete(q.flightsTo, f.rows[0].dest)
	}
	if m.notStarted || m.held != destctl.NotHeld {
		q.unstarted(f, m, out)
		return
	}
	stopped := false
	var breaker *destctl.BreakerView // what the breaker says of a failure, read once
	for i := range f.rows {
		p, err := &f.rows[i], m.errs[i]
		switch {
		case q.takeLost(p.row.Claim):
			out.abandon(p.row.Claim, p.unit)
		case stopped:
			// An ordered batch stopped at an earlier row: a row that
			// arrived all the same is delivered, the others go back.
			if err == nil {
				q.d.finish(out, p, nil, m.took, q.d.attemptOf(p, m, i, f.probe), destctl.BreakerView{})
			} else {
				q.d.release(out, p.row, p.unit)
			}
		case err != nil && q.d.ctx.Err() != nil:
			// The replica is stopping and cancelled this delivery.
			q.d.release(out, p.row, p.unit)
			out.rewind = true
			stopped = q.ordered
		default:
			var b destctl.BreakerView
			if err != nil {
				if breaker == nil {
					v := p.dest.BreakerView(f.probe, q.d.clock.Now())
					breaker = &v
				}
				b = *breaker
			}
			if k := q.d.finish(out, p, err, m.took, q.d.attemptOf(p, m, i, f.probe), b); k == dialects.OutcomeRetry || k == dialects.OutcomeDefer {
				stopped = q.ordered
			}
		}
	}
	if stopped {
		q.releaseQueue(out)
	}
}

// unstarted ends the rows of a delivery that never started: lost ones are
// abandoned, the others deferred when the destination is held (for an
// ordered queue only the first: the rows behind it cannot pass it), else
// released.
func (q *deliveryQueue) unstarted(f *flight, m *deliveryDone, out *outcomes) {
	for i := range f.rows {
		p := &f.rows[i]
		switch {
		case q.takeLost(p.row.Claim):
			out.abandon(p.row.Claim, p.unit)
		case m.held != destctl.NotHeld && (i == 0 || !q.ordered):
			q.d.deferRow(out, p, m.held, m.delay)
		default:
			q.d.release(out, p.row, p.unit)
			// Not behind a deferred head (the replica stops, or the lease
			// is no longer trusted): the row keeps its old schedule, and no
			// one continues its key.
			out.rewind = out.rewind || m.held == destctl.NotHeld
		}
	}
	q.stopIfOrdered(out)
}

// onLost gives up the rows whose claims the database no longer holds:
// waiting ones at once, in-flight ones when their Publish returns (nothing
// is written for them). A Publish whose rows are all lost is cancelled.
func (q *deliveryQueue) onLost(claims []dialects.Claim, out *outcomes) {
	set := make(map[dialects.Claim]bool, len(claims))
	for _, c := range claims {
		set[c] = true
	}
	matched := false
	kept := q.queue[:0]
	for _, r := range q.queue {
		if set[r.Claim] {
			out.abandon(r.Claim, r.unit)
			matched = true
		} else {
			kept = append(kept, r)
		}
	}
	clear(q.queue[len(kept):])
	q.queue = kept
	for h, rows := range q.parked {
		keep := rows[:0]
		for _, r := range rows {
			if set[r.p.row.Claim] {
				out.abandon(r.p.row.Claim, r.p.unit)
				matched = true
				q.nParked--
				h.Flow().Queued.Add(-1)
			} else {
				keep = append(keep, r)
			}
		}
		clear(rows[len(keep):])
		if len(keep) == 0 {
			delete(q.parked, h)
		} else {
			q.parked[h] = keep
		}
	}
	for _, f := range q.flights {
		all := true
		for _, p := range f.rows {
			if set[p.row.Claim] {
				q.lost[p.row.Claim]++
				matched = true
			}
			all = all && q.lost[p.row.Claim] > 0
		}
		if all {
			f.cancel()
		}
	}
	// The rows of a key behind a lost one cannot be delivered before it.
	if matched {
		q.stopIfOrdered(out)
	}
}

// takeLost reports whether a row in flight under claim c was lost, and
// counts it as handled.
func (q *deliveryQueue) takeLost(c dialects.Claim) bool {
	n := q.lost[c]
	if n == 0 {
		return false
	}
	if n == 1 {
		delete(q.lost, c)
	} else {
		q.lost[c] = n - 1
	}
	return true
}

// stopIfOrdered releases every waiting row of an ordered queue: the row
// that stopped it must come first.
func (q *deliveryQueue) stopIfOrdered(out *outcomes) {
	if q.ordered {
		q.releaseQueue(out)
	}
}

// releaseQueue releases every row that waits: in the queue, and parked.
func (q *deliveryQueue) releaseQueue(out *outcomes) {
	for _, r := range q.queue {
		q.d.release(out, r.Row, r.unit)
	}
	q.queue = nil
	for h, rows := range q.parked {
		for _, r := range rows {
			q.d.release(out, r.p.row, r.p.unit)
		}
		h.Flow().Queued.Add(-int64(len(rows)))
		delete(q.parked, h)
	}
	q.nParked = 0
}

// publish calls the sink, turning a missing sink, a short answer or a panic
// into errors, so that every message gets an outcome.
func publish(ctx context.Context, h *destctl.Handle, msgs []sinks.Message) (errs []error) {
	defer func() {
		if r := recover(); r != nil {
			errs = sinks.Errors(len(msgs), fmt.Errorf("destination %s failed: %v", h.Name(), r))
		}
	}()
	s := h.Sink()
	if s == nil {
		return sinks.Errors(len(msgs), fmt.Errorf("destination %s is not connected", h.Name()))
	}
	errs = s.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		errs = append(errs, sinks.Errors(len(msgs)-len(errs), fmt.Errorf("destination %s gave no result", h.Name()))...)
	}
	return errs
}

// outcomes collects what one message to an actor decided, to be sent to the
// completer in one message: a retry and the releases behind it travel
// together and land in one statement.
type outcomes struct {
	write    []dialects.Outcome
	abandons []dialects.Claim
	// units are the ends of fan-out rows' units (fanout.go).
	units    []unitEnd
	released int
	// lastSeq and last are the delivered or dead row with the largest
	// sequence; stopped says a row was retried, released or lost.
	lastSeq int64
	last    dialects.Claim
	stopped bool
	// continued is where the key stands when its run ended well.
	continued *continuation
	// rewind: rows went back to pending that no one else will continue
	// (a stopping replica's, or past their trust window); the completer
	// moves the rewind counter once they are written (see claimplan, "Bounds").
	rewind bool
}

func (o *outcomes) abandon(c dialects.Claim, u *unit) {
	if u != nil {
		o.units = append(o.units, unitEnd{claim: c, end: unitLost, copy: dialects.Copy{Destination: u.dest}})
	} else {
		o.abandons = append(o.abandons, c)
	}
	o.stopped = true
}
func (o *outcomes) count() int { return len(o.write) + len(o.abandons) + len(o.units) }

// finish decides the outcome of a delivery that returned err after publish
// (0: the row never reached the sink), with what the destination's breaker
// says of a failure (b), and records it, with its attempt for the history
// (nil: none).
func (d *deliverer) finish(out *outcomes, p *prepared, err error, publish time.Duration, att *dialects.Attempt, b destctl.BreakerView) dialects.OutcomeKind {
	o := d.policy.decide(p.row, err, b)
	if att != nil {
		// A failure the breaker does not count (OutcomeDefer) is recorded
		// as such: the row's attempt stays, and its next try has the same
		// number.
		att.Error, att.Uncounted = o.Error, o.Kind == dialects.OutcomeDefer
		o.Attempt = att
	}
	d.record(out, p, o, publish)
	return o.Kind
}

// record adds a delivery's outcome, and tells the counters and the observer.
func (d *deliverer) record(out *outcomes, p *prepared, o dialects.Outcome, publish time.Duration) {
	if p.unit != nil {
		out.units = append(out.units, unitEndOf(p, o))
	} else {
		out.write = append(out.write, o)
	}
	var latency time.Duration
	var kind DeliveryOutcome
	switch o.Kind {
	case dialects.OutcomeDelivered:
		d.stats.Delivered.Add(1)
		kind, latency = Delivered, clock.Since(d.clock, p.row.CreatedAt)
	case dialects.OutcomeRetry, dialects.OutcomeDefer:
		// A deferred delivery here failed (finish): the breaker did not
		// count it, but it failed all the same, and is tried again.
		d.stats.Retried.Add(1)
		kind = Retried
		out.stopped = true
	case dialects.OutcomeDead:
		d.stats.Dead.Add(1)
		kind = Dead
		switch {
		case p.unit != nil:
			d.log.Info("delivery dead", "id", o.ID, "destination", p.unit.dest, "reason", o.Error)
		case p.row.CopyOf != nil:
			d.log.Info("copy dead", "id", o.ID, "row", p.row.CopyOf.RowID, "destination", p.row.CopyOf.Destination, "reason", o.Error)
		default:
			d.log.Info("row dead", "id", o.ID, "reason", o.Error)
		}
	}
	if (o.Kind == dialects.OutcomeDelivered || o.Kind == dialects.OutcomeDead) && p.unit == nil {
		if p.row.Sequence > out.lastSeq {
			out.lastSeq, out.last = p.row.Sequence, p.row.Claim
		}
	}
	p.obs.Finished(kind, publish, latency)
}

// deferRow hands a row back to pending for delay, attempt unchanged: its
// destination is held (why).
func (d *deliverer) deferRow(out *outcomes, p *prepared, why destctl.HoldReason, delay time.Duration) {
	o := dialects.Outcome{Claim: p.row.Claim, Kind: dialects.OutcomeDefer, Delay: delay}
	if p.unit != nil {
		out.units = append(out.units, unitEndOf(p, o))
	} else {
		out.write = append(out.write, o)
	}
	out.stopped = true
	p.dest.Deferred(why)
	d.stats.Deferred.Add(1)
}

// release hands a row back to pending untouched; a unit of a fan-out row
// ends released (fanout.go).
func (d *deliverer) release(out *outcomes, r dialects.Row, u *unit) {
	out.stopped = true
	if u != nil {
		out.units = append(out.units, unitEnd{claim: r.Claim, end: unitReleased, copy: dialects.Copy{Destination: u.dest, Kind: dialects.CopyBehind, Attempt: r.Attempt}})
		return
	}
	out.write = append(out.write, release(r))
	out.released++
}

// send sends the collected outcomes to the completer.
func (d *deliverer) send(ctx actor.Context, out *outcomes) {
	if out.count() == 0 {
		return
	}
	if out.released > 0 {
		d.obs.Released(out.released)
		d.stats.Released.Add(int64(out.released))
	}
	ctx.Send(d.completer, &finished{outcomes: out.write, abandons: out.abandons, units: out.units, continued: out.continued, rewind: out.rewind})
}
