package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testbin"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testlog"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// loopbackPort returns a loopback port where nothing listens (for an
// admin.listen that the health check must be able to name).
func loopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// runEnv runs the binary with env added to the test's environment.
func runEnv(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(testbin.Path(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// `queuebox healthcheck` exits 0 against a ready relay and 1 against one
// that is not running, with a message that says which; it sends the token
// the relay's environment gives admin.token, and says so when it has none
// or the wrong one.
func TestHealthcheckExitsZeroWhenReadyAndOneWhenStopped(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary against a relay")
	}
	t.Parallel()
	dbURL := testdb.Database(t)
	recv := testrecv.New(t, nil)
	port := loopbackPort(t)
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", port)
	cfg := writeConfig(t, fmt.Sprintf(`database:
  url: %s
shutdown:
  drainTimeoutMs: 5000
destinations:
  hook: { type: http, url: "%s/events" }
routes:
  - { topicPattern: "#", destination: hook }
admin:
  listen: 127.0.0.1:%d
  token: ${QB_HC_TOKEN}
log: { format: json, level: info }
`, dbURL, recv.URL, port))
	env := []string{"QB_HC_TOKEN=hc-token-1"}
	if out, stderr, code := runEnv(t, env, "migrate", "up", "--config", cfg); code != 0 {
		t.Fatalf("migrate up: %d %s %s", code, out, stderr)
	}
	healthcheck := func(env ...string) (string, string, int) {
		return runEnv(t, env, "healthcheck", "--config", cfg)
	}

	// Nothing runs yet.
	if out, stderr, code := healthcheck(env...); code != 1 || !strings.Contains(stderr, "nothing listens at "+readyz) {
		t.Fatalf("before the relay: exit %d, stdout %q, stderr %q; want 1 and nothing listens at %s", code, out, stderr, readyz)
	}

	logs := &testlog.Buffer{}
	relay := exec.Command(testbin.Path(t), "run", "--config", cfg)
	relay.Env = append(os.Environ(), env...)
	relay.Stderr = logs
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- relay.Wait() }()
	t.Cleanup(func() { _ = relay.Process.Kill() })

	// Ready once the relay has started; until then the check fails.
	var stdout string
	testkit.Eventually(t, "healthcheck exits 0", 30*time.Second, func() error {
		out, stderr, code := healthcheck(env...)
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, stderr)
		}
		stdout = out
		return nil
	})
	if want := "ready (" + readyz + " answered 200)"; strings.TrimSpace(stdout) != want {
		t.Errorf("a ready relay: stdout %q, want %q", stdout, want)
	}

	// The token comes from the environment, as the relay's does.
	if _, stderr, code := healthcheck(); code != 1 || !strings.Contains(stderr, "wants the admin token") || !strings.Contains(stderr, "QB_HC_TOKEN is not set") {
		t.Errorf("without the token's variable: exit %d, stderr %q; want 1, naming QB_HC_TOKEN", code, stderr)
	}
	if _, stderr, code := healthcheck("QB_HC_TOKEN=wrong"); code != 1 || !strings.Contains(stderr, "refused the token") {
		t.Errorf("with a wrong token: exit %d, stderr %q; want 1 and refused the token", code, stderr)
	}

	if err := relay.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the relay exited with %v after SIGTERM:\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the relay did not stop within 30 s of SIGTERM:\n%s", logs.String())
	}
	out, stderr, code := healthcheck(env...)
	if code != 1 || !strings.Contains(stderr, "not ready: nothing listens at "+readyz) || out != "" {
		t.Errorf("a stopped relay: exit %d, stdout %q, stderr %q; want 1 and nothing listens at %s", code, out, stderr, readyz)
	}
	if strings.Contains(stderr, "goroutine ") || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
		t.Errorf("the failure is not one line: %q", stderr)
	}
}

// A relay that runs but is not ready (its database does not answer) fails
// the check with the relay's own reason; a configuration whose admin
// listener has no fixed port, or that cannot be read, fails it too, with
// code 1 (Docker reserves 2).
func TestHealthcheckSaysWhyARelayIsNotReady(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	t.Parallel()
	recv := testrecv.New(t, nil)
	port := loopbackPort(t)
	cfg := writeConfig(t, fmt.Sprintf(`database:
  url: postgres://postgres@127.0.0.1:%d/postgres?connect_timeout=2
destinations:
  hook: { type: http, url: "%s/events" }
routes:
  - { topicPattern: "#", destination: hook }
admin: { listen: "127.0.0.1:%d" }
`, loopbackPort(t), recv.URL, port))
	relay, done, logs := startRun(t, cfg)
	testkit.Eventually(t, "the admin listener listens", 30*time.Second, func() error {
		if !strings.Contains(logs.String(), "admin listening") {
			return errors.New("not yet")
		}
		return nil
	})
	_, stderr, code := run(t, "healthcheck", "--config", cfg)
	if code != 1 || !strings.Contains(stderr, "not ready: the database does not answer") || !strings.Contains(stderr, "answered 503") {
		t.Errorf("a relay waiting for its database: exit %d, stderr %q; want 1 and the relay's reason", code, stderr)
	}
	_ = relay.Process.Signal(syscall.SIGTERM)
	<-done

	zero := writeConfig(t, fmt.Sprintf(`database: { url: "postgres://postgres@127.0.0.1:1/postgres" }
destinations:
  hook: { type: http, url: "%s/events" }
routes:
  - { topicPattern: "#", destination: hook }
admin: { listen: "127.0.0.1:0" }
`, recv.URL))
	if _, stderr, code := run(t, "healthcheck", "--config", zero); code != 1 || !strings.Contains(stderr, "has port 0") {
		t.Errorf("admin.listen with port 0: exit %d, stderr %q; want 1 and has port 0", code, stderr)
	}
	if _, stderr, code := run(t, "healthcheck", "--config", cfg+".missing"); code != 1 || !strings.Contains(stderr, "does not exist") {
		t.Errorf("a missing file: exit %d, stderr %q; want 1 and does not exist", code, stderr)
	}
	if _, stderr, code := run(t, "healthcheck", "--config", cfg, "--timeout", "0s"); code != 2 || !strings.Contains(stderr, "--timeout: 0s is not positive") {
		t.Errorf("--timeout 0s: exit %d, stderr %q; want 2 (a usage error)", code, stderr)
	}
}
