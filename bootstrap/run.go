package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/queuebox/queuebox/actors"
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
}

// ExitError carries a process exit code.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Run runs the engine until SIGTERM or SIGINT, then drains and returns nil
// (exit 0). A second signal exits at once.
func Run(ctx context.Context, l *Loaded, d dialects.Dialect, log *slog.Logger, ro RunOptions) error {
	if err := checkSchema(ctx, d, log, ro.Migrate); err != nil {
		return err
	}
	opts, err := EngineOptions(l, d, log)
	if err != nil {
		return err
	}
	e, err := actors.New(opts)
	if err != nil {
		return err
	}
	sigs := ro.Signals
	if sigs == nil {
		ch := make(chan os.Signal, 2)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(ch)
		sigs = ch
	}
	if err := e.Start(ctx); err != nil {
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
	stopErr := e.Stop(context.Background())
	if fatal != nil {
		return &ExitError{Code: 1, Err: fatal}
	}
	if stopErr != nil {
		log.Warn("drain incomplete", "error", stopErr)
	}
	return nil
}

// checkSchema refuses to run on an outdated schema, unless asked to migrate.
// An unreachable database is not fatal: the engine waits for it.
func checkSchema(ctx context.Context, d dialects.Dialect, log *slog.Logger, migrate bool) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := d.Ping(pctx); err != nil {
		log.Warn("database unreachable at start; the relay will keep trying", "error", err)
		return nil
	}
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
	current, err := migrations.Current(ctx, d)
	if err != nil {
		return &ExitError{Code: 1, Err: fmt.Errorf("could not read the migration history: %w", err)}
	}
	if !current {
		return &ExitError{Code: 1, Err: errors.New("the database schema is not current: run `queuebox migrate up` (or `queuebox run --migrate`) first")}
	}
	return nil
}
