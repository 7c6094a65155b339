package actors

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/clock"
)

// The statement budget is how many claim statements, and how many
// completion statements, a replica runs at once. Alone on its database
// server a replica overlaps two of each (one in the database while the
// other's rows are dispatched, or its outcomes gather), as two
// claim-complete loops beat one. Relays that share a server run one of each:
// n relays then keep n claims and n completions running, never fewer than
// one relay alone, rather than 2n statements that wait on each other's pages
// and for the server's cores. SKIP LOCKED keeps concurrent claims from
// taking the same rows either way.
const (
	budgetAlone  = 2
	budgetShared = 1
)

// budgetLookEvery is how often a replica counts the other relays' sessions:
// a read of the server's session list, which costs next to nothing, but is
// a transaction; a relay that joins is counted within this long.
const budgetLookEvery = 5 * time.Second

// relayWatcher counts the other relays' sessions on the database server and
// tells the claimer and the completer the budget when it changes, in a loop
// of the engine's background.
type relayWatcher struct {
	dialect dialects.Relay
	clock   clock.Clock
	stats   *Stats
	log     *slog.Logger
	bg      context.Context
	// tell sends the budget to the actors that keep one.
	tell func(statements int)
	// budget is the last budget told; off: the database cannot tell
	// (ErrNotSupported) or will not (ErrNotPermitted), and the budget stays.
	budget int
	off    bool
}

// loop looks at once, then every budgetLookEvery, until the engine stops or
// the database says it cannot tell.
func (w *relayWatcher) loop() {
	w.budget = budgetAlone
	for {
		if w.look(); w.off {
			return
		}
		if !clock.Sleep(w.bg, w.clock, budgetLookEvery) {
			return
		}
	}
}

func (w *relayWatcher) look() {
	if w.off {
		return
	}
	ctx, cancel := context.WithTimeout(w.bg, budgetLookEvery)
	n, err := w.dialect.OtherRelays(ctx)
	cancel()
	switch {
	case dialects.Blind(err):
		// The database cannot tell, or will not: the budget stays.
		w.off = true
		if errors.Is(err, dialects.ErrNotPermitted) {
			w.log.Warn("cannot count the other relays on the database server, so this replica runs two claims and two completions at a time even beside others; grant the permission the error names",
				"error", err)
		}
		return
	case err != nil:
		return // the claims and completions report an unreachable database
	}
	want := budgetAlone
	if n > 0 {
		want = budgetShared
	}
	w.stats.OtherRelays.Store(int64(n))
	if want == w.budget {
		return
	}
	w.budget = want
	w.tell(want)
	if want == budgetShared {
		w.log.Info("other relays share the database server: one claim and one completion at a time", "their_sessions", n)
	} else {
		w.log.Info("no other relay on the database server: two claims and two completions at a time")
	}
}
