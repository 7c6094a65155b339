package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// The second SIGTERM of `queuebox run` cuts the drain short: a delivery the
// receiver holds does not keep the process, which exits 1 at once with one
// line that says what happened, and the row is not recorded as delivered
// (it goes back to pending when its lease passes).
func TestSecondSIGTERMCutsTheDrainShort(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	recv := testrecv.New(t, func(*testrecv.Request) (int, string, map[string]string) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-release
		return 204, "", nil
	})
	t.Cleanup(func() { close(release) })
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
destinations: { hook: { type: http, url: %q } }
routes: [ { topicPattern: "#", destination: hook } ]
shutdown: { drainTimeoutMs: 60000 }
admin: { listen: "127.0.0.1:0" }
`, dbURL, recv.URL+"/hook"))
	if _, stderr, code := run(t, "migrate", "up", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	d := openPostgres(t, dbURL)
	if err := d.OutboxInsert(context.Background(), []dialects.NewRow{testkit.Row("order.created")}); err != nil {
		t.Fatal(err)
	}
	relay, done, logs := startRun(t, cfg)
	select {
	case <-arrived:
	case err := <-done:
		t.Fatalf("the relay ended (%v) before it delivered:\n%s", err, logs.String())
	case <-time.After(testkit.Wait):
		t.Fatalf("no delivery arrived:\n%s", logs.String())
	}

	_ = relay.Process.Signal(syscall.SIGTERM)
	logs.WaitFor(t, "signal received; draining")
	cut := time.Now()
	_ = relay.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-done:
	case <-time.After(testkit.Wait):
		t.Fatalf("the relay still drains after the second SIGTERM, with a drain timeout of a minute:\n%s", logs.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("the relay exited with %v after a second SIGTERM, want exit 1:\n%s", err, logs.String())
	}
	t.Logf("exited %s after the second signal", time.Since(cut).Round(time.Millisecond))
	out := logs.String()
	for _, want := range []string{"second signal; exiting without draining",
		"queuebox: the drain was cut short (a second signal, terminated): the rows still in flight go back to pending when their leases pass"} {
		if !strings.Contains(out, want) {
			t.Errorf("the relay's stderr lacks %q:\n%s", want, out)
		}
	}
	if st, err := d.OutboxStats(context.Background()); err != nil || st.Rows[dialects.Delivered] != 0 {
		t.Errorf("after the drain was cut short: %v %v; want the row not delivered", st.Rows, err)
	}
}
