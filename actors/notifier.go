package actors

import (
	"errors"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/queuebox/queuebox/dialects"
)

// notifier is the Notifier: it LISTENs for inserts and wakes the claimer, so
// that a new row does not wait for the next poll. A wake while a claim runs
// makes the claimer claim again as soon as it returns.
type notifier struct {
	dialect dialects.Dialect
	claimer *actor.PID
	// poll is the claimer's poll interval, for the log line when the
	// database has no notifications.
	poll time.Duration
	log  *slog.Logger
	bg   *background
}

func (n *notifier) Receive(ctx actor.Context) { runLoop(ctx, n.bg, n.listen) }

// listen is the Notifier's loop.
func (n *notifier) listen(root *actor.RootContext) {
	poke := func() { root.Send(n.claimer, &wake{}) }
	backoff := 100 * time.Millisecond
	for n.bg.ctx.Err() == nil {
		err := n.dialect.Listen(n.bg.ctx, poke)
		if errors.Is(err, dialects.ErrNotSupported) {
			n.log.Info("this database has no notifications; polling", "every", n.poll)
			return
		}
		if n.bg.ctx.Err() != nil {
			return
		}
		n.log.Warn("notifications lost; polling until they are back", "error", err)
		select {
		case <-n.bg.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
		poke() // rows may have arrived while we were away
	}
}
