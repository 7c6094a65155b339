package bootstrap

import (
	"context"
	"log/slog"
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
)

// startWakeups opens the relay's wake-up source for database.wakeups: a
// logical-replication listener on PostgreSQL where the server allows it,
// probes otherwise. With `logical` and a server that cannot provide it,
// the start fails with the missing setting or grant. stop ends the
// listener; its temporary slot goes with its connection. onStatus hears
// every change of state (the metrics and the page).
func startWakeups(ctx context.Context, l *Loaded, d dialects.Dialect, log *slog.Logger, onStatus func(dialects.WakeupStatus)) (w dialects.Wakeups, stop func(), err error) {
	mode := dialects.WakeupMode(l.Database.Wakeups)
	pd, ok := d.(*postgres.Dialect)
	if !ok {
		w = dialects.NoWakeups(mode, "this database has no logical replication: the relay probes")
		log.Info("wake-ups: probing", "reason", w.Status().Reason)
		if onStatus != nil {
			onStatus(w.Status())
		}
		return w, func() {}, nil
	}
	// An unreachable server could hold the replication connection's set-up
	// for long; the relay would rather probe and let the listener retry.
	setup, cancel := context.WithTimeout(ctx, 30*time.Second)
	lst, err := pd.Wakeups(setup, postgres.WakeupOptions{Mode: mode, Logger: log, OnStatus: onStatus})
	cancel()
	if err != nil {
		return nil, nil, err
	}
	if onStatus != nil {
		onStatus(lst.Status())
	}
	run, end := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = lst.Run(run)
	}()
	return lst, func() { end(); <-done }, nil
}
