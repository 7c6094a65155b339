package actors

import "github.com/asynkron/protoactor-go/actor"

// pool is the unordered pool: it delivers the rows that have no key, up to
// engine.unorderedConcurrency Publish calls at once, through an unordered
// deliveryQueue (delivery.go). Unkeyed rows take part in no order, so each
// row's outcome stands alone: nothing a row does stops the others.
type pool struct{ deliveryQueue }

func newPool(d *deliverer, concurrency int) *pool {
	return &pool{newDeliveryQueue(d, false, concurrency)}
}

func (p *pool) Receive(ctx actor.Context) { p.step(ctx) }
