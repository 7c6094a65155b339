package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/admin"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/internal/backoff"
	"github.com/queuebox/queuebox/migrations"
)

// RunOptions tune Run.
type RunOptions struct {
	// Migrate applies pending migrations before starting.
	Migrate bool
	// Started is called once the engine runs (the dev mode prints its
	// banner there).
	Started func(e *actors.Engine)
	// Abort, when it ends during the drain, cuts the drain short (the
	// second signal: see StopSignals); nil lets every drain run its course.
	Abort context.Context
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

// Run is `queuebox run` for a file of one outbox, on the dialect d the
// caller opened (and closes): RunOutboxes with that dialect.
func Run(ctx context.Context, l *Loaded, d dialects.Dialect, log *slog.Logger, ro RunOptions) error {
	names := l.OutboxNames()
	if len(names) != 1 {
		return fmt.Errorf("Run serves a file of one outbox; this one has %d: use RunOutboxes", len(names))
	}
	return run(ctx, l, map[string]dialects.Dialect{names[0]: d}, log, ro)
}

// RunOutboxes is `queuebox run`: it opens the database of every outbox of
// the file, runs them, and closes the pools once Run has returned.
func RunOutboxes(ctx context.Context, l *Loaded, log *slog.Logger, ro RunOptions) error {
	ds := map[string]dialects.Dialect{}
	defer func() {
		for _, d := range ds {
			d.Close()
		}
	}()
	for _, v := range l.OutboxViews() {
		d, err := OpenDialect(context.WithoutCancel(ctx), v)
		if err != nil {
			if l.ManyOutboxes() {
				return fmt.Errorf("outbox %s: %w", v.OutboxName, err)
			}
			return err
		}
		ds[v.OutboxName] = d
	}
	return run(ctx, l, ds, log, ro)
}

// run runs the outboxes of l on their dialects. It starts the admin
// listener, then each outbox on its own (outboxRun): it waits until the
// outbox's database answers, applies the migrations (with Migrate) or
// checks that the schema is current, then runs its engine. The
// destinations are shared by every outbox's engine. It runs until ctx ends
// (the first signal), drains and returns nil (exit 0). ctx ending while an
// outbox waits for its database stops that wait at once. ro.Abort ending
// during the drain (the second signal) cuts it short: run returns an
// ExitError of code 1 once everything has stopped, and the rows still in
// flight go back to pending when their leases pass.
//
// A file of one outbox keeps the failures of a single relay: a schema that
// is not current, a wake-up source that cannot start or an engine that
// crashed ends run with an error. With several outboxes, such a failure is
// its outbox's alone: the outbox is logged, reported on /readyz, the page
// and the metrics, and started again after a back-off, while the others
// run on (a database that goes away while its engine runs is the engine's
// to retry, as always).
//
// Tracing is set up first, from the OTEL_* environment (off when none is
// set): the sinks and the inbox sources take its tracer, and the spans
// still buffered are flushed once everything has stopped.
//
// run returns its errors, never exits the process, and leaves no goroutine
// of its own running when it returns (after a drain cut short, goroutines
// of the engines' may still end for a moment: actors.Engine.Stop does not
// wait for a claim or an outcome write in progress then). The dialects are
// the caller's: run does not close their pools.
func run(ctx context.Context, l *Loaded, ds map[string]dialects.Dialect, log *slog.Logger, ro RunOptions) error {
	for _, w := range l.Warnings {
		log.Warn("configuration: "+w.String(), "file", l.File)
	}
	abort := ro.Abort
	if abort == nil {
		abort = context.WithoutCancel(ctx)
	}
	// What runs until the drain must not end with ctx: the drain needs it.
	life := context.WithoutCancel(ctx)
	// Tracing before the sinks and the inbox, which take its tracer; its
	// last spans are flushed once everything has stopped.
	stopTracing, err := startTracing(ctx, l, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	// The destinations' settings first: a file that a sink cannot read is
	// the configuration's fault, and must not wait for a database.
	shared, err := SharedDestinations(l)
	if err != nil {
		return err
	}
	defer shared.Close()
	alone := !l.ManyOutboxes()
	root := admin.NewMetricsFor(inboxSources(l), l.OutboxNames()[0])
	root.SetBuildInfo(Version, Commit)
	var runs []*outboxRun
	var servers []*admin.Server
	for _, v := range l.OutboxViews() {
		d := ds[v.OutboxName]
		olog := log
		if !alone {
			olog = log.With("outbox", v.OutboxName)
		}
		m := root.ForOutbox(v.OutboxName)
		o := &outboxRun{name: v.OutboxName, l: v, d: d, log: olog, metrics: m, alone: alone, migrate: ro.Migrate}
		o.opts = engineOptions(v, m.CountPurges(d), olog)
		o.opts.Shared, o.opts.Observer = shared, m
		o.setState(admin.OutboxState{State: "starting"})
		o.server = adminServer(v, d, m, olog, ro, o.State)
		m.SetUp(func() bool { return o.State().Running })
		runs = append(runs, o)
		servers = append(servers, o.server)
	}
	// The inbox stores into the database of its outbox.
	inboxRun := runs[0]
	for _, o := range runs {
		if o.name == l.InboxOutbox() {
			inboxRun = o
		}
	}
	consumers, err := InboxConsumers(l, inboxRun.d, root, log)
	if err != nil {
		return err
	}
	adm, err := startAdmin(l, admin.NewRelay(servers, l.Admin.Ready == "all"), log, InboxHTTP(l, inboxRun.d, root, log))
	if err != nil {
		return err
	}
	defer adm.close()
	if ro.AdminListening != nil {
		ro.AdminListening(adm.URL())
	}
	// The inbox's consumers start once its outbox's engine runs; the drain
	// stops those that started.
	var consumersMu sync.Mutex
	consumersOn, draining := false, false
	inboxRun.firstStart = func(e *actors.Engine) error {
		consumersMu.Lock()
		defer consumersMu.Unlock()
		if draining {
			return nil
		}
		if err := startConsumers(consumers, log); err != nil {
			return err
		}
		consumersOn = true
		if ro.Started != nil {
			ro.Started(e)
		}
		return nil
	}
	stop := make(chan struct{})
	failed := make(chan error, len(runs))
	var wg sync.WaitGroup
	for _, o := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o.supervise(ctx, abort, life, stop, failed)
		}()
	}
	var fatal error
	select {
	case <-ctx.Done():
		if s := signalOf(ctx); s != nil {
			log.Info("signal received; draining (a second signal exits at once)", "signal", s.String())
		} else {
			log.Info("stopping; draining", "cause", context.Cause(ctx))
		}
	case fatal = <-failed:
	}
	consumersMu.Lock()
	draining = true
	started := consumersOn
	consumersMu.Unlock()
	if !started {
		consumers = nil
	}
	cut, stopErr := drain(abort, time.Duration(l.Shutdown.DrainTimeoutMs)*time.Millisecond, adm, consumers, func() error {
		close(stop)
		wg.Wait()
		for _, o := range runs {
			if err := o.stopErr; err != nil {
				return err
			}
		}
		return nil
	}, log)
	if fatal == nil && ctx.Err() == nil {
		// An outbox failed alone, and said why; none is left to wait for.
		select {
		case fatal = <-failed:
		default:
		}
	}
	switch {
	case cut:
		why := fmt.Sprint(context.Cause(abort))
		if s := signalOf(abort); s != nil {
			why = "a second signal, " + s.String()
		}
		return &ExitError{Code: 1, Err: fmt.Errorf("the drain was cut short (%s): the rows still in flight go back to pending when their leases pass", why)}
	case fatal != nil:
		return fatal
	case stopErr != nil:
		log.Warn("drain incomplete", "error", stopErr)
	}
	return nil
}

// drain stops a running replica in order: /readyz answers 503; the inbox's
// consumers store and acknowledge what they hold while the engines still
// run; the engines (stopEngines) stop claiming, release the rows they have not started,
// lets the deliveries in flight finish (up to drainTimeout), writes their
// outcomes and shuts its actors down. abort ending cuts all of it short;
// drain logs that at once, reports it (cut), and returns only once
// everything has stopped.
func drain(abort context.Context, drainTimeout time.Duration, adm *adminListener, consumers []inbox.Consumer, stopEngines func() error, log *slog.Logger) (cut bool, err error) {
	adm.server.Draining()
	drained := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-abort.Done():
		case <-drained:
			if !cut {
				return
			}
		}
		if s := signalOf(abort); s != nil {
			log.Warn("second signal; exiting without draining", "signal", s.String())
		} else {
			log.Warn("drain cut short", "cause", context.Cause(abort))
		}
	}()
	consumersCtx, cancel := context.WithTimeout(abort, drainTimeout)
	stopConsumers(consumersCtx, consumers, log)
	cancel()
	err = stopEngines()
	cut = abort.Err() != nil
	close(drained)
	<-watched
	return cut, err
}

// Backoff of the start-up wait for the database.
const (
	startRetryFirst = 250 * time.Millisecond
	startRetryMax   = 5 * time.Second
)

// waitForDatabase pings the database until it answers, with backoff, and
// reports true; false when ctx ended the wait first (a ping in progress
// too: a connection attempt can take seconds). A database that is down
// when the relay starts is common (both start together under an
// orchestrator), so it is waited for, not fatal; the schema can only be
// checked or migrated once it answers. It logs once when it starts waiting
// and once when the database answers.
func waitForDatabase(ctx context.Context, d dialects.Dialect, log *slog.Logger) bool {
	delays := backoff.Capped{First: startRetryFirst, Max: startRetryMax}
	stopped := func() bool {
		if s := signalOf(ctx); s != nil {
			log.Info("signal received while waiting for the database; exiting", "signal", s.String())
		} else {
			log.Info("stopped while waiting for the database; exiting", "cause", context.Cause(ctx))
		}
		return false
	}
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := d.Ping(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return stopped()
		case err == nil:
			if delays.Failures() > 0 {
				log.Info("database reachable; starting")
			}
			return true
		case delays.Failures() == 0:
			log.Warn("database unreachable at start; retrying", "error", err)
		}
		t := time.NewTimer(delays.Next())
		select {
		case <-ctx.Done():
			t.Stop()
			return stopped()
		case <-t.C:
		}
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
