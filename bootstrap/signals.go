package bootstrap

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// StopSignals is the process's one handler of SIGINT and SIGTERM, for the
// commands that run until they are stopped (run, dev, bench). It turns the
// signals into two contexts that Run and Dev take as they take any other:
// the first signal ends Stop (the relay drains), the second ends Abort (the
// drain is cut short, and Run returns an ExitError of code 1). The cause of
// either is the signal, so that the logs can name it.
//
// A command catches the signals before it reads its configuration: a
// SIGTERM while it starts must stop it cleanly (exit 0), not kill it by the
// signal's default action.
type StopSignals struct {
	Stop, Abort context.Context

	ch          chan os.Signal
	stop, abort context.CancelCauseFunc
	quit, done  chan struct{}
	release     sync.Once
}

// CatchStopSignals starts catching SIGINT and SIGTERM; Release ends it.
func CatchStopSignals() *StopSignals {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	return watchSignals(ch)
}

// watchSignals is CatchStopSignals on a channel of the caller's: tests send
// their signals to it.
func watchSignals(ch chan os.Signal) *StopSignals {
	s := &StopSignals{ch: ch, quit: make(chan struct{}), done: make(chan struct{})}
	s.Stop, s.stop = context.WithCancelCause(context.Background())
	s.Abort, s.abort = context.WithCancelCause(context.Background())
	go s.watch()
	return s
}

func (s *StopSignals) watch() {
	defer close(s.done)
	for _, cancel := range []context.CancelCauseFunc{s.stop, s.abort} {
		select {
		case sig := <-s.ch:
			cancel(signalled{sig})
		case <-s.quit:
			return
		}
	}
}

// Signal is the first signal, or nil while none has come.
func (s *StopSignals) Signal() os.Signal { return signalOf(s.Stop) }

// Release stops catching the signals and waits until the handler's
// goroutine has ended. A signal after it takes its default action: it ends
// the process at once (bench releases at the first signal, since the
// clean-up it then runs cannot be cut short). It is safe to call more than
// once, and from any goroutine.
func (s *StopSignals) Release() {
	s.release.Do(func() {
		signal.Stop(s.ch)
		close(s.quit)
		<-s.done
	})
}

// signalled is the cause of a context that a signal ended.
type signalled struct{ os.Signal }

func (s signalled) Error() string { return "signal " + s.Signal.String() }

// signalOf is the signal that ended ctx, or nil when ctx is alive or ended
// for another reason.
func signalOf(ctx context.Context) os.Signal {
	if s, ok := context.Cause(ctx).(signalled); ok {
		return s.Signal
	}
	return nil
}
