package actors

import (
	"errors"
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// notifier is the Notifier's loop: it LISTENs for inserts and wakes the
// claimer. A wake while a claim
// runs makes the claimer claim again as soon as it returns.
func (e *Engine) notifier() {
	defer e.bg.Done()
	poke := func() { e.send(e.claimer, &wake{}) }
	backoff := 100 * time.Millisecond
	for e.bgCtx.Err() == nil {
		err := e.opts.Dialect.Listen(e.bgCtx, poke)
		if errors.Is(err, dialects.ErrNotSupported) {
			e.log.Info("this database has no notifications; polling", "every", e.opts.PollInterval)
			return
		}
		if e.bgCtx.Err() != nil {
			return
		}
		e.log.Warn("notifications lost; polling until they are back", "error", err)
		select {
		case <-e.bgCtx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
		poke() // rows may have arrived while we were away
	}
}
