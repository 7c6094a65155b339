package actors

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// statementBudget is how many claim statements, and how many completion statements,
// a replica runs at once. Alone on its database server a replica overlaps
// two of each (one in the database while the other's rows are dispatched,
// or its outcomes gather), as two claim-complete loops beat one. Relays
// that share a server run one of each: n relays then keep n claims and n
// completions running, never fewer than one relay alone, rather than 2n
// statements that wait on each other's pages and for the server's cores.
// SKIP LOCKED keeps concurrent claims from taking the same rows either way.
type statementBudget struct {
	n atomic.Int32
}

// The budgets.
const (
	budgetAlone  = 2
	budgetShared = 1
)

// lookEvery is how often a replica counts the other relays' sessions: a
// read of the server's session list, which costs next to nothing; an idle
// replica (which runs no claim the count could pace) looks every
// idleLookEvery, so that idle it costs its database next to nothing.
const (
	lookEvery     = time.Second
	idleLookEvery = 5 * time.Second
)

func newStatementBudget() *statementBudget {
	s := &statementBudget{}
	s.n.Store(budgetAlone)
	return s
}

// statements is how many claims (or completions) may run at once.
func (s *statementBudget) statements() int { return int(s.n.Load()) }

// relayWatcher counts the other relays' sessions on the database server and
// sets the budget from it, in a loop of the engine's background.
type relayWatcher struct {
	budget  *statementBudget
	dialect dialects.Relay
	stats   *Stats
	log     *slog.Logger
	bg      context.Context
	// off: the database cannot tell (ErrNotSupported) or will not
	// (ErrNotPermitted); the budget stays.
	off bool
}

// loop looks at once, then every lookEvery, until the engine stops or the
// database says it cannot tell.
func (w *relayWatcher) loop() {
	t := time.NewTicker(lookEvery)
	defer t.Stop()
	var last time.Time
	for {
		if !w.stats.Idle.Load() || time.Since(last) >= idleLookEvery {
			last = time.Now()
			if w.look(); w.off {
				return
			}
		}
		select {
		case <-w.bg.Done():
			return
		case <-t.C:
		}
	}
}

func (w *relayWatcher) look() {
	if w.off {
		return
	}
	ctx, cancel := context.WithTimeout(w.bg, lookEvery)
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
	want := int32(budgetAlone)
	if n > 0 {
		want = budgetShared
	}
	// The budget first: whoever reads the count may rely on the budget.
	changed := w.budget.n.Swap(want) != want
	w.stats.OtherRelays.Store(int64(n))
	if !changed {
		return
	}
	if want == budgetShared {
		w.log.Info("other relays share the database server: one claim and one completion at a time", "their_sessions", n)
	} else {
		w.log.Info("no other relay on the database server: two claims and two completions at a time")
	}
}
