package actors

import (
	"context"
	"errors"
	"log/slog"

	"github.com/queuebox/queuebox/actors/internal/claimplan"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/clock"
)

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
	tune claimplan.Tuning
	// budget is the last budget told; off: the database cannot tell
	// (ErrNotSupported) or will not (ErrNotPermitted), and the budget stays.
	budget int
	off    bool
}

// loop looks at once, then every Tuning.BudgetLookEvery, until the engine
// stops or the database says it cannot tell.
func (w *relayWatcher) loop() {
	w.budget = w.tune.StatementsAlone
	for {
		if w.look(); w.off {
			return
		}
		if !clock.Sleep(w.bg, w.clock, w.tune.BudgetLookEvery) {
			return
		}
	}
}

func (w *relayWatcher) look() {
	if w.off {
		return
	}
	ctx, cancel := context.WithTimeout(w.bg, w.tune.BudgetLookEvery)
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
	want := w.tune.StatementsAlone
	if n > 0 {
		want = w.tune.StatementsShared
	}
	w.stats.OtherRelays.Store(int64(n))
	if want == w.budget {
		return
	}
	w.budget = want
	w.tell(want)
	if n > 0 {
		w.log.Info("other relays share the database server: one claim and one completion at a time", "their_sessions", n)
	} else {
		w.log.Info("no other relay on the database server: two claims and two completions at a time")
	}
}
