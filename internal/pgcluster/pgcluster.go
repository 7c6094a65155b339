// Package pgcluster starts a throwaway PostgreSQL cluster from the server
// binaries installed on the machine: initdb into a temporary folder, a free
// loopback port, and removal of everything on Stop. It backs `queuebox dev`
// and the tests.
//
// PostgreSQL refuses to run as root; when QueueBox runs as root, the cluster
// runs as the "postgres" user that the distribution's package creates. The
// server is started in its own process group with a parent-death signal, so
// that a killed parent does not leave it running.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cluster is a running throwaway cluster.
type Cluster struct {
	Dir  string
	Port int
	cmd  *exec.Cmd
	done chan struct{}
	bin  string
	args []string
	cred *syscall.Credential
	log  *os.File
}

// Options tune Start.
type Options struct {
	// TestSettings turns durability off (fsync, synchronous_commit): for
	// tests only.
	TestSettings bool
	// Prefix names the temporary folder.
	Prefix string
	// Log receives the server's output; nil discards it.
	Log *os.File
	// WALLevel is the server's wal_level. Empty means logical, so that
	// relays on the cluster can listen for wake-ups, with room for many
	// replicas' temporary slots; "replica" starts a server without logical
	// replication (the relays then probe), as many managed services are.
	WALLevel string
	// Settings are more server settings, name=value, given last: they win
	// over the ones above.
	Settings []string
}

// ErrNoServer means no PostgreSQL server binaries were found.
var ErrNoServer = errors.New("no PostgreSQL server binaries found (initdb, postgres): install the distribution's PostgreSQL server package (scripts/install-postgres.sh does it on Debian and Ubuntu), or set QUEUEBOX_PG_BINDIR to the folder that holds them")

// BinDir finds the folder of initdb and postgres: $QUEUEBOX_PG_BINDIR,
// then the newest /usr/lib/postgresql/*/bin, then PATH.
func BinDir() (string, error) {
	if d := os.Getenv("QUEUEBOX_PG_BINDIR"); d != "" {
		for _, b := range []string{"initdb", "postgres"} {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				return "", fmt.Errorf("QUEUEBOX_PG_BINDIR is %s, which holds no %s: set it to the folder of initdb and postgres, or unset it", d, b)
			}
		}
		return d, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Slice(matches, func(i, j int) bool {
		return versionOf(matches[i]) > versionOf(matches[j])
	})
	if len(matches) > 0 {
		return filepath.Dir(matches[0]), nil
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	return "", ErrNoServer
}

func versionOf(path string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return v
}

// URL is the connection URL of the cluster's "postgres" database.
func (c *Cluster) URL() string { return c.URLFor("postgres") }

// URLFor is the connection URL of database db.
func (c *Cluster) URLFor(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// Start creates and starts a cluster, and waits until it accepts connections.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = "queuebox-pg-"
	}
	RemoveStale(prefix)
	// A short path: the socket path must stay under about 107 bytes.
	dir, err := os.MkdirTemp("/tmp", prefix)
	if err != nil {
		return nil, err
	}
	// The owner file keeps the folder from RemoveStale while this process
	// lives, even when its server is stopped on purpose (a restart test).
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cred, err := credential(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	data := filepath.Join(dir, "data")
	var out bytes.Buffer
	for attempt := 1; ; attempt++ {
		out.Reset()
		initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync", "--no-instructions")
		initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		initdb.Stdout, initdb.Stderr = &out, &out
		err := initdb.Run()
		if err == nil {
			break
		}
		_ = os.RemoveAll(data)
		if attempt == 3 {
			_ = os.RemoveAll(dir)
			text := strings.TrimSpace(out.String())
			if len(text) > 800 {
				text = "..." + text[len(text)-800:]
			}
			return nil, fmt.Errorf("initdb failed: %v: %s", err, text)
		}
		time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
	}
	c := &Cluster{Dir: dir, done: make(chan struct{})}
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		c.Port = port
		args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", dir,
			"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200", "-c", "shared_buffers=128MB"}
		args = append(args, walArgs(opts.WALLevel)...)
		if opts.TestSettings {
			args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
		}
		for _, set := range opts.Settings {
			args = append(args, "-c", set)
		}
		c.bin, c.args, c.cred, c.log = bin, args, cred, opts.Log
		var logBuf bytes.Buffer
		if err := c.launch(&logBuf); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		if err := c.waitReady(ctx); err != nil {
			c.Stop()
			if strings.Contains(logBuf.String(), "Address already in use") {
				c.done = make(chan struct{})
				continue
			}
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("postgres did not start: %v: %s", err, strings.TrimSpace(logBuf.String()))
		}
		return c, nil
	}
	_ = os.RemoveAll(dir)
	return nil, errors.New("postgres could not find a free port")
}

// walArgs are the server settings for a wal_level (see Options.WALLevel).
// The relays of each outbox hold one WAL sender and one slot; tests run
// many outboxes at once, more than the defaults of 10 allow.
func walArgs(level string) []string {
	if level == "" {
		level = "logical"
	}
	args := []string{"-c", "wal_level=" + level}
	if level == "minimal" {
		return append(args, "-c", "max_wal_senders=0")
	}
	return append(args, "-c", "max_wal_senders=64", "-c", "max_replication_slots=64")
}

// launch starts the server process and a goroutine that notices its end.
func (c *Cluster) launch(logBuf *bytes.Buffer) error {
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), c.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}
	if c.log != nil {
		cmd.Stdout, cmd.Stderr = c.log, c.log
	} else {
		cmd.Stdout, cmd.Stderr = logBuf, logBuf
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	c.cmd = cmd
	done := c.done
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return nil
}

// Restart starts the server again after Kill, on the same folder and port
// (crash recovery runs), and waits until it accepts connections.
func (c *Cluster) Restart(ctx context.Context) error {
	c.done = make(chan struct{})
	var logBuf bytes.Buffer
	if err := c.launch(&logBuf); err != nil {
		return err
	}
	if err := c.waitReady(ctx); err != nil {
		return fmt.Errorf("postgres did not restart: %v: %s", err, strings.TrimSpace(logBuf.String()))
	}
	return nil
}

func (c *Cluster) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	sock := filepath.Join(c.Dir, fmt.Sprintf(".s.PGSQL.%d", c.Port))
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			return errors.New("the server exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if _, err := os.Stat(sock); err != nil {
			continue
		}
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.Port), time.Second)
		if err == nil {
			_ = conn.Close()
			// The socket exists before recovery ends; the pid file's last
			// line says "ready" once connections are accepted.
			if b, err := os.ReadFile(filepath.Join(c.Dir, "data", "postmaster.pid")); err == nil && bytes.Contains(b, []byte("ready")) {
				return nil
			}
		}
	}
	return errors.New("timed out after 60s")
}

// Stop shuts the server down (fast mode) and removes the folder.
func (c *Cluster) Stop() {
	if c.cmd != nil && c.cmd.Process != nil {
		_ = c.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-c.done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.done
		}
	}
	_ = os.RemoveAll(c.Dir)
}

// Kill stops the server at once, as a crash would (SIGKILL to the whole
// process group), leaving the folder in place for Restart.
func (c *Cluster) Kill() {
	if c.cmd != nil && c.cmd.Process != nil {
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	}
}

// credential returns the user to run PostgreSQL as, and hands dir to it.
func credential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, errors.New(`PostgreSQL refuses to run as root and there is no "postgres" user: install the distribution's PostgreSQL server package, which creates it`)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// alive tells whether a process runs: EPERM means it does, as another user.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// RemoveStale removes folders of earlier clusters with this prefix whose
// server is no longer running (a parent that was killed could not clean up).
func RemoveStale(prefix string) {
	dirs, _ := filepath.Glob(filepath.Join("/tmp", prefix+"*"))
	for _, d := range dirs {
		ownerEnded := false
		if b, err := os.ReadFile(filepath.Join(d, "owner")); err == nil {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if pid > 0 && alive(pid) {
				continue // its process still runs
			}
			// An empty owner file is one being written: not ended.
			ownerEnded = pid > 0
		}
		pidFile := filepath.Join(d, "data", "postmaster.pid")
		b, err := os.ReadFile(pidFile)
		if err != nil {
			// No pid file: the server stopped (it died with its owner,
			// which ended) or initdb never finished; a folder without an
			// owner may be one that another process is just making.
			if fi, err := os.Stat(d); err == nil && (ownerEnded || time.Since(fi.ModTime()) > time.Hour) {
				_ = os.RemoveAll(d)
			}
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
		if pid > 0 && alive(pid) {
			continue
		}
		_ = os.RemoveAll(d)
	}
}

// PID is the server's (postmaster's) process id; 0 when it is not running.
func (c *Cluster) PID() int {
	if c.cmd == nil || c.cmd.Process == nil {
		return 0
	}
	return c.cmd.Process.Pid
}
