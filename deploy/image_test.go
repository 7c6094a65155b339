package deploy

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// podmanArgs go before every podman command: runc as the runtime and
// cgroupfs as the cgroup manager run on hosts where podman's defaults
// (crun, systemd) refuse the cgroups, as on hybrid cgroup v1 machines.
var podmanArgs = []string{"--runtime", "runc", "--cgroup-manager", "cgroupfs"}

// runArgs are the options of every container the test runs: the host's
// network (the test PostgreSQL and the receiver listen on its loopback),
// explicit limits (some runtimes refuse to set their defaults), and no
// health-check timer (podman would ask systemd for one; the test runs the
// check itself).
var runArgs = []string{"--network", "host", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "--health-interval", "disable"}

// podman runs podman and returns its stdout; a failure carries its stderr.
func podman(args ...string) (string, error) {
	cmd := exec.Command("podman", append(slices.Clone(podmanArgs), args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("podman %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// buildImage builds the image as `make image` does, under a name of the
// test's own, removed when the test ends.
func buildImage(t *testing.T, version, commit string) string {
	t.Helper()
	name := fmt.Sprintf("localhost/queuebox-test:%d-%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	cmd := exec.Command("../scripts/build-image.sh")
	cmd.Env = append(os.Environ(), "IMAGE="+name, "VERSION="+version, "COMMIT="+commit)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/build-image.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if _, err := podman("rmi", "--force", name); err != nil {
			t.Errorf("remove the test image: %v", err)
		}
	})
	return name
}

// imageFiles lists the regular files of the image's file system with
// their modes and owners, from a container created (not started) from it.
func imageFiles(t *testing.T, image string) map[string]*tar.Header {
	t.Helper()
	id, err := podman("create", image)
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	defer func() { _, _ = podman("rm", "--force", id) }()
	cmd := exec.Command("podman", append(slices.Clone(podmanArgs), "export", id)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	files := map[string]*tar.Header{}
	tr := tar.NewReader(stdout)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read the exported file system: %v", err)
		}
		if h.Typeflag != tar.TypeDir {
			files[strings.TrimPrefix(h.Name, "./")] = h
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("podman export: %v", err)
	}
	return files
}

// The image holds the static binary, the CA bundle and a user, nothing
// else; it runs as that user, not root, with the binary as its entrypoint,
// the version in its labels and the health check in its configuration.
// Run with the host's network against the test PostgreSQL, it migrates,
// becomes ready, delivers rows to a receiver, passes its own health check,
// and on SIGTERM in the middle of a batch drains and exits 0 with nothing
// left claimed: every row the receiver accepted is recorded delivered, and
// the rest are back to pending.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the container image")
	}
	const version, commit = "v0.0.0-imagetest", "abc1234"
	image := buildImage(t, version, commit)

	t.Run("contents", func(t *testing.T) {
		out, err := podman("image", "inspect", image)
		if err != nil {
			t.Fatal(err)
		}
		var insp []struct {
			Config struct {
				User       string
				Entrypoint []string
				Cmd        []string
				Labels     map[string]string
				StopSignal string
			}
			Healthcheck struct{ Test []string }
		}
		if err := json.Unmarshal([]byte(out), &insp); err != nil || len(insp) != 1 {
			t.Fatalf("podman image inspect: %v\n%s", err, out)
		}
		c := insp[0].Config
		if c.User != "65532:65532" {
			t.Errorf("the image runs as %q, want 65532:65532 (not root)", c.User)
		}
		if !slices.Equal(c.Entrypoint, []string{"/queuebox"}) || !slices.Equal(c.Cmd, []string{"run", "--config", "/etc/queuebox/queuebox.yaml"}) {
			t.Errorf("entrypoint %q, command %q", c.Entrypoint, c.Cmd)
		}
		if c.Labels["org.opencontainers.image.version"] != version || c.Labels["org.opencontainers.image.revision"] != commit {
			t.Errorf("labels %v: want version %s and revision %s", c.Labels, version, commit)
		}
		if c.StopSignal != "SIGTERM" {
			t.Errorf("stop signal %q, want SIGTERM (the drain)", c.StopSignal)
		}
		if want := []string{"CMD", "/queuebox", "healthcheck", "--config", "/etc/queuebox/queuebox.yaml"}; !slices.Equal(insp[0].Healthcheck.Test, want) {
			t.Errorf("health check %q, want %q", insp[0].Healthcheck.Test, want)
		}

		files := imageFiles(t, image)
		var names []string
		for n := range files {
			names = append(names, n)
		}
		sort.Strings(names)
		want := []string{"etc/group", "etc/passwd", "etc/ssl/certs/ca-certificates.crt", "queuebox"}
		if !slices.Equal(names, want) {
			t.Errorf("the image's files are %q, want only %q (no shell, nothing else)", names, want)
		}
		if h := files["queuebox"]; h == nil || h.Mode&0o111 == 0 || h.Mode&0o222 != 0 || h.Uid != 0 {
			t.Errorf("/queuebox: %+v; want executable, read-only, owned by root (its user cannot change it)", h)
		}
		if h := files["etc/ssl/certs/ca-certificates.crt"]; h == nil || h.Size < 10_000 {
			t.Errorf("the CA bundle: %+v", h)
		}

		// The binary is the one built for the image, and runs there.
		out, err = podman(append(append([]string{"run", "--rm"}, runArgs...), image, "version")...)
		if err != nil || !strings.HasPrefix(out, "queuebox "+version+"\ncommit "+commit+"\n") {
			t.Errorf("queuebox version in the image: %v\n%s", err, out)
		}
	})

	t.Run("runs", func(t *testing.T) { runImage(t, image) })
}

func runImage(t *testing.T, image string) {
	dbURL := testdb.Database(t)
	recv := testrecv.New(t, nil)
	recv.SetDelay(100 * time.Millisecond) // deliveries stay in flight long enough for the stop to land among them
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adminPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	// The database URL and the admin token come from the environment, as
	// they would from a secret store.
	cfg := filepath.Join(t.TempDir(), "queuebox.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`database:
  url: ${QB_TEST_DATABASE_URL}
  maxConnections: 5
outbox:
  batchSize: 20
  maxInFlight: 60
engine:
  unorderedConcurrency: 8
shutdown:
  drainTimeoutMs: 10000
destinations:
  hook: { type: http, url: "%s/events/{{ topic }}" }
routes:
  - { topicPattern: "#", destination: hook }
admin:
  listen: 127.0.0.1:%d
  token: ${QB_TEST_ADMIN_TOKEN}
log: { format: json, level: info }
`, recv.URL, adminPort)), 0o644); err != nil {
		t.Fatal(err)
	}
	const token = "image-test-token"
	container := func(args ...string) []string {
		return append(append(append([]string{"run"}, runArgs...),
			"--volume", cfg+":/etc/queuebox/queuebox.yaml:ro",
			"--env", "QB_TEST_DATABASE_URL="+dbURL, "--env", "QB_TEST_ADMIN_TOKEN="+token), args...)
	}

	// migrate, from the image itself.
	if out, err := podman(container("--rm", image, "migrate", "up", "--config", "/etc/queuebox/queuebox.yaml")...); err != nil || !strings.Contains(out, "applied V1 ") {
		t.Fatalf("migrate up in the image: %v\n%s", err, out)
	}

	name := fmt.Sprintf("queuebox-test-%d-%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	if _, err := podman(container("--detach", "--name", name, image)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = podman("rm", "--force", "--time", "0", name) })
	// The relay logs to stderr, which podman logs gives on its own.
	logs := func() string {
		out, err := exec.Command("podman", append(slices.Clone(podmanArgs), "logs", name)...).CombinedOutput()
		if err != nil {
			return fmt.Sprintf("podman logs: %v\n%s", err, out)
		}
		return string(out)
	}

	// Ready, as an orchestrator would ask: /readyz with the token.
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", adminPort)
	if err := testkit.Poll(time.Minute, func() error {
		req, _ := http.NewRequest(http.MethodGet, readyz, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(res.Body)
			return fmt.Errorf("%d %s", res.StatusCode, b)
		}
		return nil
	}); err != nil {
		t.Fatalf("the container never became ready (%v); its log:\n%s", err, logs())
	}
	// The image's own health check, `queuebox healthcheck` inside it.
	if out, err := podman("healthcheck", "run", name); err != nil {
		t.Errorf("the image's health check on a ready relay: %v %s", err, out)
	}

	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	insert := func(n int, topic string) {
		t.Helper()
		if _, err := conn.Exec(context.Background(), `INSERT INTO public.outbox (topic, key, payload)
			SELECT $1, CASE WHEN i % 3 = 0 THEN NULL ELSE 'k' || (i % 10) END, jsonb_build_object('i', i) FROM generate_series(1, $2) AS i`, topic, n); err != nil {
			t.Fatal(err)
		}
	}
	insert(1, "first.row")
	recv.WaitDelivered(t, 1, 30*time.Second)

	// A batch that takes seconds to deliver, stopped once part of it is
	// through: some deliveries are in flight, some rows claimed and not
	// started.
	insert(300, "batch.row")
	recv.WaitDelivered(t, 25, time.Minute)
	if _, err := podman("stop", "--time", "30", name); err != nil {
		t.Fatalf("podman stop: %v\n%s", err, logs())
	}
	state, err := podman("inspect", "--format", "{{.State.ExitCode}} {{.State.Status}}", name)
	if err != nil {
		t.Fatal(err)
	}
	log := logs()
	if strings.TrimSpace(state) != "0 exited" || !strings.Contains(log, `"msg":"stopped"`) {
		t.Errorf("after SIGTERM the container is %q; want exit 0 after the drain. Its log:\n%s", state, log)
	}

	counts := map[dialects.State]int{}
	delivered := map[string]bool{}
	rows, err := conn.Query(context.Background(), `SELECT id::text, state, claim_token IS NOT NULL FROM public.outbox`)
	if err != nil {
		t.Fatal(err)
	}
	claimed := 0
	for rows.Next() {
		var id, st string
		var hasToken bool
		if err := rows.Scan(&id, &st, &hasToken); err != nil {
			t.Fatal(err)
		}
		counts[dialects.State(st)]++
		if st == string(dialects.Delivered) {
			delivered[id] = true
		}
		if hasToken {
			claimed++
		}
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if counts[dialects.Processing] != 0 || claimed != 0 {
		t.Errorf("after the drain %d rows are processing and %d hold a claim token; want none (%v)", counts[dialects.Processing], claimed, counts)
	}
	if counts[dialects.Pending] == 0 {
		t.Errorf("every row was delivered before the stop (%v): the stop did not land in the middle of the batch", counts)
	}
	if counts[dialects.Pending]+counts[dialects.Delivered] != 301 {
		t.Errorf("rows per state %v; want 301 delivered or pending", counts)
	}
	for _, r := range recv.Requests() {
		if r.Status < 300 && !delivered[r.ID] {
			t.Errorf("the receiver accepted row %s, which the table does not hold as delivered: it would be sent again", r.ID)
		}
	}
	t.Logf("stopped after %d deliveries: %v", recv.Delivered(), counts)
}
