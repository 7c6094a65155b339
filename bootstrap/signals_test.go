package bootstrap

import (
	"context"
	"errors"
	"os"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/pgcluster"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testlog"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// The first signal ends Stop, the second Abort, each with the signal as its
// cause; Release ends the handler's goroutine, and may be called twice.
func TestStopSignalsStopThenAbort(t *testing.T) {
	t.Parallel()
	ch := make(chan os.Signal, 2)
	s := watchSignals(ch)
	if s.Signal() != nil || s.Stop.Err() != nil || s.Abort.Err() != nil {
		t.Fatal("a context ended before any signal")
	}
	ch <- syscall.SIGTERM
	<-s.Stop.Done()
	if s.Signal() != syscall.SIGTERM || signalOf(s.Stop) != syscall.SIGTERM {
		t.Fatalf("the first signal is %v, want SIGTERM", s.Signal())
	}
	if s.Abort.Err() != nil {
		t.Fatal("the first signal ended Abort")
	}
	ch <- syscall.SIGINT
	<-s.Abort.Done()
	if signalOf(s.Abort) != syscall.SIGINT || s.Signal() != syscall.SIGTERM {
		t.Fatalf("Abort's signal %v, Stop's %v; want SIGINT and SIGTERM", signalOf(s.Abort), s.Signal())
	}
	s.Release()
	s.Release()
	select {
	case <-s.done:
	default:
		t.Fatal("the handler's goroutine still runs after Release")
	}
	if signalOf(context.Background()) != nil {
		t.Fatal("a context that no signal ended has a signal")
	}
}

// Release before any signal ends the handler without ending either
// context.
func TestStopSignalsRelease(t *testing.T) {
	t.Parallel()
	s := watchSignals(make(chan os.Signal, 2))
	s.Release()
	<-s.done
	if s.Stop.Err() != nil || s.Abort.Err() != nil {
		t.Fatal("Release ended a context")
	}
}

// No goroutine of Run's outlives its return, whichever way it ends: after
// a drain, after a second signal cut the drain short, and after a signal
// while it waited for the database. (Not parallel: the tests count the
// process's goroutines.)
func TestRunLeavesNoGoroutineBehind(t *testing.T) {
	t.Run("drained", func(t *testing.T) {
		sigs := make(chan os.Signal, 2)
		// The receiver sends SIGTERM as the first row arrives: its
		// delivery is in flight when the drain begins.
		recv := testrecv.New(t, func(*testrecv.Request) (int, string, map[string]string) {
			sendSignal(sigs, syscall.SIGTERM)
			return 204, "", nil
		})
		l, d := runConfig(t, testdb.Database(t), recv.URL)
		logs := &testlog.Buffer{}
		err := runCounted(t, l, d, sigs, logs, func(*actors.Engine) {
			if err := d.OutboxInsert(context.Background(), []dialects.NewRow{testkit.Row("order.created")}); err != nil {
				t.Error(err)
			}
		})
		if err != nil {
			t.Fatalf("Run: %v\n%s", err, logs.String())
		}
		if n := deliveredRows(t, d); n != 1 {
			t.Fatalf("%d rows delivered after the drain, want 1\n%s", n, logs.String())
		}
	})

	t.Run("second signal", func(t *testing.T) {
		sigs := make(chan os.Signal, 2)
		logs := &testlog.Buffer{}
		release := make(chan struct{})
		// The receiver holds the delivery: the first SIGTERM starts a drain
		// that waits for it (5 s at most), the second cuts it short.
		recv := testrecv.New(t, func(*testrecv.Request) (int, string, map[string]string) {
			sendSignal(sigs, syscall.SIGTERM)
			if err := testkit.Poll(0, func() error {
				if !strings.Contains(logs.String(), "signal received; draining") {
					return errors.New("not draining yet")
				}
				return nil
			}); err != nil {
				t.Error(err)
			}
			sendSignal(sigs, syscall.SIGINT)
			<-release
			return 204, "", nil
		})
		t.Cleanup(func() { close(release) })
		l, d := runConfig(t, testdb.Database(t), recv.URL)
		err := runCountedExcept(t, l, d, sigs, logs, func(*actors.Engine) {
			if err := d.OutboxInsert(context.Background(), []dialects.NewRow{testkit.Row("order.created")}); err != nil {
				t.Error(err)
			}
		},
			// actors.Engine.Stop, with its context ended, returns without
			// waiting for the goroutines its actors started and do not
			// track (a claim's, the outcome write of the cancelled
			// delivery): they end a moment later, which the settling check
			// below sees.
			[]string{"github.com/queuebox/queuebox/actors."},
			// The receiver's handler, held until the test ends.
			goleak.IgnoreAnyFunction("github.com/queuebox/queuebox/internal/testrecv.(*Receiver).serve"))
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != 1 || !strings.Contains(err.Error(), "the drain was cut short (a second signal, interrupt)") {
			t.Fatalf("Run after a second signal: %v (want an exit code of 1)\n%s", err, logs.String())
		}
		if !strings.Contains(logs.String(), "second signal; exiting without draining") {
			t.Errorf("the log does not say that the second signal cut the drain short:\n%s", logs.String())
		}
		if n := deliveredRows(t, d); n != 0 {
			t.Errorf("%d rows delivered although the receiver never answered", n)
		}
	})

	t.Run("waiting for the database", func(t *testing.T) {
		// A port nothing listens on: a cluster started and stopped frees one.
		cluster, err := pgcluster.Start(context.Background(), pgcluster.Options{TestSettings: true, Prefix: "queuebox-test-down-"})
		if err != nil {
			t.Fatal(err)
		}
		cluster.Stop()
		l, d := runConfig(t, cluster.URL(), "http://127.0.0.1:1")
		sigs := make(chan os.Signal, 2)
		logs := &testlog.Buffer{}
		var pings atomic.Int64
		// SIGTERM with the second ping: Run is waiting, with backoff.
		counted := countedPings{Dialect: d, n: &pings, each: func(n int64) {
			if n == 2 {
				sendSignal(sigs, syscall.SIGTERM)
			}
		}}
		if err := runCounted(t, l, counted, sigs, logs, func(*actors.Engine) { t.Error("the engine started") }); err != nil {
			t.Fatalf("Run: %v\n%s", err, logs.String())
		}
		if !strings.Contains(logs.String(), "signal received while waiting for the database; exiting") {
			t.Errorf("logs:\n%s", logs.String())
		}
	})
}

// runCounted runs Run on the test's goroutine with the signals the test
// sends, then checks that nothing Run started still runs: at once for a
// goroutine that QueueBox's code started, and after a short settling poll
// for those of the libraries (an HTTP connection closed, a socket) whose
// ends follow a close asynchronously. ignore adds goroutines that are the
// test's own.
func runCounted(t *testing.T, l *Loaded, d dialects.Dialect, sigs chan os.Signal, logs *testlog.Buffer, started func(*actors.Engine), ignore ...goleak.Option) error {
	t.Helper()
	return runCountedExcept(t, l, d, sigs, logs, started, nil, ignore...)
}

// runCountedExcept is runCounted that lets the goroutines that a function
// whose name starts with one of late started outlive Run for a moment.
func runCountedExcept(t *testing.T, l *Loaded, d dialects.Dialect, sigs chan os.Signal, logs *testlog.Buffer, started func(*actors.Engine), late []string, ignore ...goleak.Option) error {
	t.Helper()
	stop := watchSignals(sigs)
	before := goroutineIDs()
	ignore = append(ignore, goleak.IgnoreCurrent(),
		// The dialect's pools are the test's; Run does not close them.
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
		goleak.IgnoreAnyFunction("github.com/jackc/puddle/v2.(*Pool[...]).createIdleResources"),
		goleak.IgnoreAnyFunction("github.com/jackc/puddle/v2.(*Pool[...]).initResourceValue.func1"),
		// protoactor's dead-letter throttle: a timer the actor system
		// starts when a message reaches a stopped actor (common in a drain
		// cut short), which ends by itself within its period of a second.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
	err := Run(stop.Stop, l, d, logs.Logger(), RunOptions{Migrate: true, Abort: stop.Abort, Started: started})
	// A goroutine that closed its done channel as its last act may still
	// be on its way out when Run returns: give those a moment, not a leak.
	var left []string
	_ = testkit.Poll(time.Second, func() error {
		if left = ourGoroutines(before, late); len(left) > 0 {
			return errors.New("goroutines left")
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("%d goroutines that Run started still run after it returned:\n\n%s", len(left), strings.Join(left, "\n\n"))
	}
	stop.Release()
	if err := goleak.Find(ignore...); err != nil {
		t.Errorf("goroutines left once Run returned and closes settled: %v", err)
	}
	return err
}

// sendSignal hands Run a signal without waiting: a handler of the test's
// receiver sends it, and must not block when the buffer is full.
func sendSignal(sigs chan os.Signal, s os.Signal) {
	select {
	case sigs <- s:
	default:
	}
}

// deliveredRows counts the delivered rows.
func deliveredRows(t *testing.T, d dialects.Dialect) int64 {
	t.Helper()
	st, err := d.OutboxStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Rows[dialects.Delivered]
}

var goroutineHeader = regexp.MustCompile(`^goroutine (\d+) `)

// goroutineStacks returns the stack of every goroutine by its id.
func goroutineStacks() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if m := goroutineHeader.FindStringSubmatch(g); m != nil {
			out[m[1]] = g
		}
	}
	return out
}

func goroutineIDs() map[string]bool {
	ids := map[string]bool{}
	for id := range goroutineStacks() {
		ids[id] = true
	}
	return ids
}

// ourGoroutines returns the stacks of the goroutines, not in before and
// not started by a function whose name starts with one of late, that
// QueueBox's code (not a test's) started.
func ourGoroutines(before map[string]bool, late []string) []string {
	var out []string
next:
	for id, stack := range goroutineStacks() {
		if before[id] {
			continue
		}
		for _, f := range late {
			if strings.Contains(stack, "\ncreated by "+f) {
				continue next
			}
		}
		// The last two lines: "created by F in goroutine N" and F's file.
		lines := strings.Split(strings.TrimSpace(stack), "\n")
		if len(lines) < 2 || !strings.HasPrefix(lines[len(lines)-2], "created by ") {
			continue
		}
		creator, file := lines[len(lines)-2], lines[len(lines)-1]
		if strings.Contains(creator, "github.com/queuebox/queuebox/") && !strings.Contains(file, "_test.go:") &&
			!strings.Contains(creator, "/internal/test") {
			out = append(out, stack)
		}
	}
	return out
}
