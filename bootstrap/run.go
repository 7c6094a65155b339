package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/admin"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/migrations"
)

// RunOptions tune Run.
type RunOptions struct {
	// Migrate applies pending migrations before starting.
	Migrate bool
	// Started is called once the engine runs (the dev mode prints its
	// banner there).
	Started func(e *actors.Engine)
	// Signals, when set, replaces the process's SIGINT/SIGTERM (tests).
	Signals <-chan os.Signal
	// AdminListening is called with the admin page's URL once the admin
	// listener listens (the dev mode prints it; tests find a port 0 there).
	AdminListening func(url string)
	// AdminCountInterval and AdminThroughputStep shorten the admin
	// listener's sampling (tests); zero keeps the defaults.
	AdminCountInterval, AdminThroughputStep time.Duration
}

// ExitError carries a process exit code.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Run starts the admin listener, waits until the database answers, applies
// the migrations (with Migrate) or checks that the schema is current, then
// runs the engine until SIGTERM or SIGINT, drains it and returns nil (exit
// 0). A signal while it
// waits for the database also returns nil: nothing has started. A second
// signal during the drain exits at once.
func Run(ctx context.Context, l *Loaded, d dialects.Dialect, log *slog.Logger, ro RunOptions) error {
	for _, w := range l.Warnings {
		log.Warn("configuration: "+w.String(), "file", l.File)
	}
	sigs := ro.Signals
	if sigs == nil {
		ch := make(chan os.Signal, 2)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(ch)
		sigs = ch
	}
	// The destinations' settings first: a file that a sink cannot read is
	// the configuration's fault, and must not wait for the database.
	opts, err := EngineOptions(l, d, log)
	if err != nil {
		return err
	}
	metrics := admin.NewMetrics(inboxSources(l))
	opts.Observer = metrics
	opts.Dialect = metrics.CountPurges(opts.Dialect)
	consumers, err := InboxConsumers(l, d, metrics, log)
	if err != nil {
		return err
	}
	adm, err := startAdmin(l, d, metrics, log, ro, InboxHTTP(l, d, metrics, log))
	if err != nil {
		return err
	}
	defer adm.close()
	if ro.AdminListening != nil {
		ro.AdminListening(adm.URL())
	}
	if !waitForDatabase(ctx, d, log, sigs) {
		return nil
	}
	if err := checkSchema(ctx, d, log, ro.Migrate); err != nil {
		return err
	}
	e, err := actors.New(opts)
	if err != nil {
		return err
	}
	if err := e.Start(ctx); err != nil {
		return err
	}
	metrics.SetEngine(e)
	sampling, stopSampling := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSampling()
	adm.server.Start(sampling)
	if err := startConsumers(consumers, log); err != nil {
		_ = e.Stop(context.Background())
		return err
	}
	if ro.Started != nil {
		ro.Started(e)
	}
	var fatal error
	select {
	case s := <-sigs:
		log.Info("signal received; draining (a second signal exits at once)", "signal", s.String())
	case fatal = <-e.Fatal():
	case <-ctx.Done():
	}
	go func() {
		select {
		case s := <-sigs:
			log.Warn("second signal; exiting without draining", "signal", s.String())
			os.Exit(1)
		case <-time.After(time.Hour):
		}
	}()
	adm.server.Draining()
	// The inbox's consumers first: what they hold is stored and
	// acknowledged while the engine still runs.
	drain, cancelDrain := context.WithTimeout(context.Background(), time.Duration(l.Shutdown.DrainTimeoutMs)*time.Millisecond)
	stopConsumers(drain, consumers, log)
	cancelDrain()
	stopErr := e.Stop(context.Background())
	if fatal != nil {
		return &ExitError{Code: 1, Err: fatal}
	}
	if stopErr != nil {
		log.Warn("drain incomplete", "error", stopErr)
	}
	return nil
}

// Backoff of the start-up wait for the database.
const (
	startRetryFirst = 250 * time.Millisecond
	startRetryMax   = 5 * time.Second
)

// waitForDatabase pings the database until it answers, with backoff, and
// reports true; false when a signal or ctx ended the wait first. A database
// that is down when the relay starts is common (both start together under
// an orchestrator), so it is waited for, not fatal; the schema can only be
// checked or migrated once it answers. It logs once when it starts
// waiting and once when the database answers.
func waitForDatabase(ctx context.Context, d dialects.Dialect, log *slog.Logger, sigs <-chan os.Signal) bool {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A signal cancels a ping in progress too: a connection attempt can
	// take seconds.
	got := make(chan os.Signal, 1)
	stop, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case s := <-sigs:
			got <- s
			cancel()
		case <-stop:
		}
	}()
	signalled := func() bool {
		close(stop)
		<-exited
		select {
		case s := <-got:
			log.Info("signal received while waiting for the database; exiting", "signal", s.String())
			return true
		default:
			return false
		}
	}
	delay, waiting := startRetryFirst, false
	for {
		pctx, pcancel := context.WithTimeout(wctx, 10*time.Second)
		err := d.Ping(pctx)
		pcancel()
		if err == nil {
			if signalled() {
				return false
			}
			if waiting {
				log.Info("database reachable; starting")
			}
			return true
		}
		if wctx.Err() == nil && !waiting {
			log.Warn("database unreachable at start; retrying", "error", err)
			waiting = true
		}
		select {
		case <-wctx.Done():
			signalled()
			return false
		case <-time.After(delay):
		}
		delay = min(2*delay, startRetryMax)
	}
}

// checkSchema refuses to run on an outdated schema, unless asked to migrate.
func checkSchema(ctx context.Context, d dialects.Dialect, log *slog.Logger, migrate bool) error {
	if migrate {
		applied, err := migrations.Up(ctx, d)
		if err != nil {
			return &ExitError{Code: 1, Err: err}
		}
		if len(applied) > 0 {
			log.Info("migrations applied", "count", len(applied), "version", applied[len(applied)-1].Version)
		}
		return nil
	}
	st, err := migrations.StatusOf(ctx, d)
	if err != nil {
		return &ExitError{Code: 1, Err: fmt.Errorf("could not read the migration history: %w", err)}
	}
	applied, latest := 0, 0
	for _, m := range st {
		latest = max(latest, m.Version)
		if m.Applied {
			applied++
		}
	}
	switch {
	case applied == 0:
		// Nothing applied here: a first start, or a schema or table name
		// that is not where the tables are.
		n := d.Names()
		schema := n.Schema
		if schema == "" {
			schema = "the connection's default schema"
		}
		return &ExitError{Code: 1, Err: fmt.Errorf("no QueueBox migration has been applied to the table %s in %s: run `queuebox migrate up` (or `queuebox run --migrate`) to create it, or, if the tables exist elsewhere, check database.schema and database.outboxTableName", n.Outbox, schema)}
	case applied < len(st):
		return &ExitError{Code: 1, Err: fmt.Errorf("the database schema is not current (%d of %d migrations applied; this release needs version %d): run `queuebox migrate up` (or `queuebox run --migrate`) first", applied, len(st), latest)}
	}
	return nil
}
