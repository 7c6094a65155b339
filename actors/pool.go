package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
)

// pool delivers unkeyed rows concurrently, at most
// engine.unorderedConcurrency Publish calls at once. Unkeyed rows take part
// in no order, so each row's outcome stands alone.
type pool struct {
	e        *Engine
	queue    []claimed
	flights  map[int]*flight
	gen      int
	lost     map[uuid.UUID]bool
	draining bool
}

func newPool(e *Engine) *pool {
	return &pool{e: e, flights: map[int]*flight{}, lost: map[uuid.UUID]bool{}}
}

func (p *pool) Receive(ctx actor.Context) {
	var out outcomes
	switch m := ctx.Message().(type) {
	case *deliverRun:
		p.queue = append(p.queue, m.rows...)
		if p.draining {
			p.releaseQueue(&out)
		}
	case *deliveryDone:
		p.onDone(m, &out)
	case *cancelClaims:
		p.onLost(m.ids, &out)
	case *drain:
		p.draining = true
		p.releaseQueue(&out)
	}
	p.next(ctx, &out)
	out.sendTo(ctx, p.e)
}

func (p *pool) next(ctx actor.Context, out *outcomes) {
	for len(p.flights) < p.e.opts.UnorderedConcurrency && len(p.queue) > 0 && !p.draining {
		head := p.queue[0]
		if !head.lease.trusted(time.Now()) {
			p.queue = p.queue[1:]
			out.add(release(head.Row))
			continue
		}
		first := p.e.prepare(head.Row)
		p.queue = p.queue[1:]
		if first.dead != nil {
			out.add(p.e.deadBeforeDelivery(first))
			continue
		}
		if first.retry != nil {
			out.add(p.e.decide(first.row, first.retry))
			continue
		}
		batch := []prepared{first}
		limit := first.dest.maxBatch()
		for len(batch) < limit && len(p.queue) > 0 {
			q := p.e.prepare(p.queue[0].Row)
			if q.dead != nil || q.retry != nil || q.dest != first.dest || !p.queue[0].lease.trusted(time.Now()) {
				break
			}
			batch = append(batch, q)
			p.queue = p.queue[1:]
		}
		p.gen++
		p.flights[p.gen] = p.e.startDelivery(ctx.Self(), p.gen, batch)
	}
}

func (p *pool) onDone(m *deliveryDone, out *outcomes) {
	f := p.flights[m.gen]
	if f == nil {
		return
	}
	delete(p.flights, m.gen)
	f.cancel()
	for i, r := range f.rows {
		err := m.errs[i]
		switch {
		case p.lost[r.row.ID]:
			delete(p.lost, r.row.ID)
			out.abandon(r.row.Claim)
		case err != nil && p.e.deliveryCtx.Err() != nil:
			out.add(release(r.row))
		default:
			out.add(p.e.decide(r.row, err))
		}
	}
}

func (p *pool) onLost(ids []uuid.UUID, out *outcomes) {
	set := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	kept := p.queue[:0]
	for _, r := range p.queue {
		if set[r.ID] {
			out.abandon(r.Claim)
		} else {
			kept = append(kept, r)
		}
	}
	p.queue = kept
	for _, f := range p.flights {
		all := true
		for _, r := range f.rows {
			if set[r.row.ID] {
				p.lost[r.row.ID] = true
			}
			all = all && p.lost[r.row.ID]
		}
		if all {
			f.cancel()
		}
	}
}

func (p *pool) releaseQueue(out *outcomes) {
	for _, r := range p.queue {
		out.add(release(r.Row))
	}
	p.queue = nil
}
