package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/sinks"
)

// Messages of the key actors and the pool.
type (
	deliverRun   struct{ rows []claimed }
	deliveryDone struct {
		gen  int
		errs []error
	}
	// cancelClaims: the lease keeper found these claims lost.
	cancelClaims struct{ ids []uuid.UUID }
)

// flight is one Publish call in progress.
type flight struct {
	rows   []prepared
	cancel context.CancelFunc
}

// keyActor delivers the rows of one key strictly one run after another. On a
// failure that is retried it stops: the failed row is rescheduled and every
// other row it holds is released untouched, so that order holds. A dead row
// does not stop it. It has one delivery in flight at most, by design.
type keyActor struct {
	e        *Engine
	key      string
	queue    []claimed
	cur      *flight
	gen      int
	lost     map[uuid.UUID]bool
	draining bool
	done     int
	// lastActive and idleTimer detect idleness: one timer per actor at most,
	// rearmed for the rest of the period when it fires early. (protoactor's
	// own receive timeout races with the mailbox under the race detector.)
	lastActive time.Time
	idleTimer  *time.Timer
}

// idleCheck is the idle timer firing.
type idleCheck struct{}

func newKeyActor(e *Engine, key string) *keyActor {
	return &keyActor{e: e, key: key, lost: map[uuid.UUID]bool{}}
}

func (k *keyActor) Receive(ctx actor.Context) {
	var out outcomes
	switch m := ctx.Message().(type) {
	case *deliverRun:
		k.queue = append(k.queue, m.rows...)
		if k.draining {
			k.releaseQueue(&out)
		}
	case *deliveryDone:
		k.onDone(m, &out)
	case *cancelClaims:
		k.onLost(m.ids, &out)
	case *drain:
		k.draining = true
		k.releaseQueue(&out)
	case *idleCheck:
		k.idleTimer = nil
		if k.cur != nil || len(k.queue) > 0 {
			return // busy: the next idle step arms the timer again
		}
		if rest := k.e.opts.KeyIdle - time.Since(k.lastActive); rest > 0 {
			k.armIdle(ctx, rest)
			return
		}
		e, key, self, done := k.e, k.key, ctx.Self(), k.done
		// From a goroutine: the claimer may be waiting on this mailbox.
		go e.send(e.claimer, &keyIdle{key: key, pid: self, done: done})
		return
	case *actor.Stopping:
		if k.idleTimer != nil {
			k.idleTimer.Stop()
		}
		return
	case *actor.Started, *actor.Stopped, *actor.Restarting:
		return
	}
	k.next(ctx, &out)
	k.done += out.count()
	out.sendTo(ctx, k.e)
	k.lastActive = time.Now()
	if k.cur == nil && len(k.queue) == 0 && k.idleTimer == nil {
		k.armIdle(ctx, k.e.opts.KeyIdle)
	}
}

func (k *keyActor) armIdle(ctx actor.Context, after time.Duration) {
	e, self := k.e, ctx.Self()
	k.idleTimer = time.AfterFunc(after, func() { e.send(self, &idleCheck{}) })
}

// next starts the next delivery if none is running.
func (k *keyActor) next(ctx actor.Context, out *outcomes) {
	now := time.Now()
	for k.cur == nil && len(k.queue) > 0 && !k.draining {
		head := k.queue[0]
		if !head.lease.trusted(now) {
			// The lease may have passed: delivering now could race another
			// replica. Hand everything back.
			k.releaseQueue(out)
			return
		}
		p := k.e.prepare(head.Row)
		switch {
		case p.dead != nil:
			k.queue = k.queue[1:]
			out.add(k.e.deadBeforeDelivery(p))
			continue
		case p.retry != nil:
			k.queue = k.queue[1:]
			out.add(k.e.decide(p.row, p.retry))
			k.releaseQueue(out)
			return
		}
		batch := []prepared{p}
		limit := p.dest.maxBatch()
		i := 1
		for ; i < len(k.queue) && len(batch) < limit; i++ {
			q := k.e.prepare(k.queue[i].Row)
			// A batch holds plain deliveries to one destination.
			if q.dead != nil || q.retry != nil || q.dest != p.dest || !k.queue[i].lease.trusted(now) {
				break
			}
			batch = append(batch, q)
		}
		k.queue = k.queue[i:]
		k.gen++
		k.cur = k.e.startDelivery(ctx.Self(), k.gen, batch)
	}
}

func (k *keyActor) onDone(m *deliveryDone, out *outcomes) {
	if k.cur == nil || m.gen != k.gen {
		return
	}
	f := k.cur
	k.cur = nil
	f.cancel()
	stopped := false
	for i, p := range f.rows {
		err := m.errs[i]
		switch {
		case k.lost[p.row.ID]:
			delete(k.lost, p.row.ID)
			out.abandon(p.row.Claim)
		case stopped:
			if err == nil {
				out.add(k.e.decide(p.row, nil)) // it did arrive
			} else {
				out.add(release(p.row))
			}
		case err != nil && k.e.deliveryCtx.Err() != nil:
			// The replica is stopping and cancelled this delivery.
			out.add(release(p.row))
			stopped = true
		default:
			o := k.e.decide(p.row, err)
			out.add(o)
			if o.Kind == dialects.OutcomeRetry {
				stopped = true
			}
		}
	}
	if stopped {
		k.releaseQueue(out)
	}
}

func (k *keyActor) onLost(ids []uuid.UUID, out *outcomes) {
	matched := false
	for _, id := range ids {
		if k.cur != nil {
			for _, p := range k.cur.rows {
				if p.row.ID == id {
					k.lost[id] = true
					matched = true
				}
			}
		}
		for i, r := range k.queue {
			if r.ID == id {
				out.abandon(r.Claim)
				k.queue = append(k.queue[:i:i], k.queue[i+1:]...)
				matched = true
				break
			}
		}
	}

	// Cancel the delivery when every row in it is lost.
	if k.cur != nil {
		all := true
		for _, p := range k.cur.rows {
			all = all && k.lost[p.row.ID]
		}
		if all {
			k.cur.cancel()
		}
	}
	// Rows of this key behind a lost one cannot be delivered before it.
	if matched && len(k.queue) > 0 {
		k.releaseQueue(out)
	}
}

func (k *keyActor) releaseQueue(out *outcomes) {
	for _, r := range k.queue {
		out.add(release(r.Row))
	}
	k.queue = nil
}

func release(r dialects.Row) dialects.Outcome {
	return dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeRelease}
}

// deadBeforeDelivery is the outcome of a row that can never be delivered.
func (e *Engine) deadBeforeDelivery(p prepared) dialects.Outcome {
	return dialects.Outcome{Claim: p.row.Claim, Kind: dialects.OutcomeDead, Error: e.lastError(p.dead)}
}

// startDelivery publishes a batch in a goroutine that reports back to self.
func (e *Engine) startDelivery(self *actor.PID, gen int, batch []prepared) *flight {
	dctx, cancel := context.WithCancel(e.deliveryCtx)
	msgs := make([]sinks.Message, len(batch))
	for i := range batch {
		msgs[i] = batch[i].msg
	}
	h := batch[0].dest
	go func() {
		errs := publish(dctx, h, msgs)
		e.noteHealth(h, errs)
		e.send(self, &deliveryDone{gen: gen, errs: errs})
	}()
	return &flight{rows: batch, cancel: cancel}
}

// publish calls the sink, turning a missing sink, a short answer or a panic
// into errors, so that every message gets an outcome.
func publish(ctx context.Context, h *sinkHandle, msgs []sinks.Message) (errs []error) {
	defer func() {
		if r := recover(); r != nil {
			errs = sinks.Errors(len(msgs), fmt.Errorf("destination %s failed: %v", h.name, r))
		}
	}()
	s := h.get()
	if s == nil {
		return sinks.Errors(len(msgs), fmt.Errorf("destination %s is not connected", h.name))
	}
	errs = s.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		errs = append(errs, sinks.Errors(len(msgs)-len(errs), fmt.Errorf("destination %s gave no result", h.name))...)
	}
	return errs
}

// noteHealth logs a destination's change between working and failing: one
// line when deliveries start failing, one when they succeed again. A failure
// that is the row's own fault (a permanent error) says nothing about the
// destination, and neither does a cancelled delivery.
func (e *Engine) noteHealth(h *sinkHandle, errs []error) {
	var failure error
	ok := false
	for _, err := range errs {
		switch {
		case err == nil:
			ok = true
		case sinks.IsPermanent(err) || errors.Is(err, context.Canceled):
		default:
			failure = err
		}
	}
	if failure != nil && !ok {
		if h.down.CompareAndSwap(false, true) {
			e.log.Warn("destination failing; its deliveries are retried with backoff", "destination", h.name, "error", failure)
		}
	} else if ok && h.down.CompareAndSwap(true, false) {
		e.log.Info("destination delivering again", "destination", h.name)
	}
}

// outcomes collects what one message to an actor decided, to be sent to the
// completer in one message: a retry and the releases behind it travel
// together and land in one statement.
type outcomes struct {
	write    []dialects.Outcome
	abandons []dialects.Claim
}

func (o *outcomes) add(x dialects.Outcome)   { o.write = append(o.write, x) }
func (o *outcomes) abandon(c dialects.Claim) { o.abandons = append(o.abandons, c) }
func (o *outcomes) count() int               { return len(o.write) + len(o.abandons) }

func (o *outcomes) sendTo(ctx actor.Context, e *Engine) {
	if o.count() == 0 {
		return
	}
	for _, x := range o.write {
		switch x.Kind {
		case dialects.OutcomeDelivered:
			e.Stats.Delivered.Add(1)
		case dialects.OutcomeRetry:
			e.Stats.Retried.Add(1)
		case dialects.OutcomeDead:
			e.Stats.Dead.Add(1)
			e.log.Info("row dead", "id", x.ID, "reason", x.Error)
		case dialects.OutcomeRelease:
			e.Stats.Released.Add(1)
		}
	}
	ctx.Send(e.completer, &finished{outcomes: o.write, abandons: o.abandons})
}
