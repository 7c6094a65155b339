package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/clock"
)

// keyActor delivers the rows of one key strictly one Publish after another,
// through an ordered deliveryQueue (delivery.go): on a failure that is
// retried it stops, the failed row is rescheduled and every other row it
// holds is released untouched, so that order holds. A dead row does not stop
// it. What is its own is its life: the claimer spawns it on the key's first
// row, and it asks the claimer to stop it once it has been idle for
// engine.keyIdleMs, so that memory follows the active keys.
type keyActor struct {
	deliveryQueue
	// lane is the key's (Lane.Key), or a fan-out lane's: a destination's
	// view of the key, whose actor delivers units of fan-out rows.
	lane    dialects.Lane
	claimer *actor.PID
	// done counts the rows it has finished, so that the claimer can tell
	// whether it sent more since this actor said it was idle.
	done      int
	idleAfter time.Duration
	// lastActive and idleTimer detect idleness: one timer per actor at most,
	// rearmed for the rest of the period when it fires early. (protoactor's
	// own receive timeout races with the mailbox under the race detector.)
	lastActive time.Time
	idleTimer  clock.Timer
	clock      clock.Clock
}

// idleCheck is the idle timer firing.
type idleCheck struct{}

func newKeyActor(d *deliverer, lane dialects.Lane, claimer *actor.PID, idleAfter time.Duration, c clock.Clock) *keyActor {
	q := newDeliveryQueue(d, true, 1)
	q.key, q.lane = lane.Key, lane.Destination != ""
	return &keyActor{deliveryQueue: q, lane: lane, claimer: claimer, idleAfter: idleAfter, clock: c}
}

func (k *keyActor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *idleCheck:
		k.onIdleCheck(ctx)
		return
	case *actor.Stopping:
		if k.idleTimer != nil {
			k.idleTimer.Stop()
		}
		return
	}
	n, ok := k.step(ctx)
	if !ok {
		return
	}
	k.done += n
	k.lastActive = k.clock.Now()
	if k.idle() && k.idleTimer == nil {
		k.armIdle(ctx, k.idleAfter)
	}
}

func (k *keyActor) onIdleCheck(ctx actor.Context) {
	k.idleTimer = nil
	if !k.idle() {
		return // busy: the next idle step arms the timer again
	}
	if rest := k.idleAfter - clock.Since(k.clock, k.lastActive); rest > 0 {
		k.armIdle(ctx, rest)
		return
	}
	root, claimer, msg := ctx.ActorSystem().Root, k.claimer, &keyIdle{lane: k.lane, pid: ctx.Self(), done: k.done}
	// From a goroutine: the claimer may be waiting on this mailbox.
	go root.Send(claimer, msg)
}

func (k *keyActor) armIdle(ctx actor.Context, after time.Duration) {
	root, self := ctx.ActorSystem().Root, ctx.Self()
	k.idleTimer = k.clock.AfterFunc(after, func() { root.Send(self, &idleCheck{}) })
}
