package bootstrap

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/admin"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/backoff"
)

// outboxRun is one outbox of a running relay, under its own supervision
// (supervise): it waits for its database, checks or migrates its schema,
// starts its wake-ups and its engine, and starts them again when they fail,
// without touching the other outboxes. Its engine shares the relay's
// destinations (actors.SharedDestinations).
type outboxRun struct {
	name    string
	l       *Loaded
	d       dialects.Dialect
	log     *slog.Logger
	metrics *admin.Metrics
	server  *admin.Server
	opts    actors.Options
	// alone: the file has this outbox only, and its failures are the
	// relay's (run returns them), as they always were.
	alone, migrate bool
	// firstStart is called once, when the engine first runs (the inbox's
	// consumers start there); nil for none.
	firstStart func(*actors.Engine) error
	started    bool

	state  atomic.Pointer[admin.OutboxState]
	engine atomic.Pointer[actors.Engine]
	// stopErr is what stopping the engine at the drain returned.
	stopErr error
}

// The back-off between two starts of an outbox that failed (a schema that
// is not current, a wake-up source or engine that could not start, an
// engine that crashed).
const (
	restartFirst = time.Second
	restartMax   = time.Minute
)

// State is where the outbox stands, for /readyz, /api/stats, the page and
// queuebox_outbox_up: running only while its engine's last claim reached
// the database.
func (o *outboxRun) State() admin.OutboxState {
	st := *o.state.Load()
	if e := o.engine.Load(); st.Running && e != nil && !e.Ready() {
		st = admin.OutboxState{State: stateUnreachable}
	}
	return st
}

func (o *outboxRun) setState(st admin.OutboxState) { o.state.Store(&st) }

// The states of an outbox, as /readyz and the page show them.
const (
	stateWaiting = "waiting for its database"
	stateSchema  = "checking its schema"
	stateRunning = "running"
	// stateUnreachable: the engine runs, and its claims fail: it retries
	// until the database answers.
	stateUnreachable = "its database does not answer; claims retry"
	stateFailed      = "failed; starting again"
	stateRestarting  = "engine crashed; starting again"
	stateStopping    = "stopping"
)

// supervise runs the outbox until stop is closed (the drain), then stops
// its engine. A start that fails, or an engine that crashes, is sent to
// failed when the outbox is alone (the relay stops, as a relay of one
// outbox always did); otherwise it is logged and the outbox starts again
// after a back-off. ctx ending while the outbox waits ends supervise.
func (o *outboxRun) supervise(ctx, abort, life context.Context, stop <-chan struct{}, failed chan<- error) {
	delays := backoff.Capped{First: restartFirst, Max: restartMax}
	for {
		e, stopWakeups, err := o.start(ctx, abort, life)
		switch {
		case err != nil && o.alone:
			failed <- err
			return
		case err != nil:
			wait := delays.Next()
			o.setState(admin.OutboxState{State: stateFailed, Error: err.Error()})
			o.log.Error("outbox could not start; it starts again after a back-off, and the other outboxes run on", "error", err, "retryIn", wait)
			if !o.pause(ctx, stop, wait) {
				return
			}
			continue
		case e == nil:
			return // ctx ended while the outbox waited for its database
		}
		select {
		case <-stop:
			o.setState(admin.OutboxState{State: stateStopping})
			o.stopErr = e.Stop(abort)
			o.metrics.SetEngine(nil)
			o.engine.Store(nil)
			stopWakeups()
			return
		case ferr := <-e.Fatal():
			if o.alone {
				failed <- &ExitError{Code: 1, Err: ferr}
				<-stop
				o.stopErr = e.Stop(abort)
				stopWakeups()
				return
			}
			wait := delays.Next()
			o.setState(admin.OutboxState{State: stateRestarting, Error: ferr.Error()})
			o.log.Error("outbox's engine crashed; it starts again after a back-off (its claims go back to pending when their leases pass), and the other outboxes run on", "error", ferr, "retryIn", wait)
			_ = e.Stop(abort)
			o.metrics.SetEngine(nil)
			o.engine.Store(nil)
			stopWakeups()
			if !o.pause(ctx, stop, wait) {
				return
			}
		}
	}
}

// pause waits d, and reports false when the relay stops meanwhile.
func (o *outboxRun) pause(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

// start waits until the database answers, checks or migrates the schema,
// and starts the wake-ups and the engine. It returns no engine and no
// error when ctx ended while it waited.
func (o *outboxRun) start(ctx, abort, life context.Context) (*actors.Engine, func(), error) {
	o.setState(admin.OutboxState{State: stateWaiting})
	if !waitForDatabase(ctx, o.d, o.log) {
		return nil, nil, nil
	}
	o.setState(admin.OutboxState{State: stateSchema})
	// A migration is not cut short by the first signal (the engine then
	// starts and drains at once), only by the second.
	if err := checkSchema(abort, o.d, o.log, o.migrate); err != nil {
		return nil, nil, err
	}
	wakeups, stopWakeups, err := startWakeups(life, o.l, o.d, o.log, o.metrics.SetWakeups)
	if err != nil {
		return nil, nil, err
	}
	opts := o.opts
	opts.Wakeups = wakeups
	e, err := actors.New(opts)
	if err != nil {
		stopWakeups()
		return nil, nil, err
	}
	if err := e.Start(life); err != nil {
		stopWakeups()
		return nil, nil, err
	}
	o.metrics.SetEngine(e)
	o.engine.Store(e)
	o.server.Start(life)
	o.setState(admin.OutboxState{Running: true, State: stateRunning})
	if !o.started && o.firstStart != nil {
		o.started = true
		if err := o.firstStart(e); err != nil {
			if o.alone {
				_ = e.Stop(abort)
				stopWakeups()
				return nil, nil, err
			}
			o.log.Error("the inbox's sources could not start; the outbox runs without them", "error", err)
		}
	}
	return e, stopWakeups, nil
}
