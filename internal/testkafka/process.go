package testkafka

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testkit"
)

// ProcessOptions shape the cluster of NewProcess.
type ProcessOptions struct {
	Brokers    int      // default 3, as New
	Partitions int      // of Topics (default: kfake's, 10)
	Topics     []string // created at the first start
}

// NewProcess starts kfake as a process of its own (the command in
// ./kfake, built once per test binary), for the tests of the queuebox
// binary: Stop sends it SIGTERM and waits for it to exit, Start runs it
// again on the same ports with its topics and records (kept in a folder of
// the test). The process is killed when the test ends, and exits by itself
// if the test binary dies. A package that calls it removes the built
// command from its TestMain with RemoveCommand.
//
// With $QUEUEBOX_TEST_KAFKA_BROKERS set it attaches to that cluster, as
// New does, creating Topics there; Stop and Start then fail the test.
func NewProcess(t testing.TB, o ProcessOptions) *Cluster {
	t.Helper()
	if ext := os.Getenv("QUEUEBOX_TEST_KAFKA_BROKERS"); ext != "" {
		c := &Cluster{Brokers: strings.Split(ext, ",")}
		for _, topic := range o.Topics {
			c.CreateTopic(t, topic, max(o.Partitions, 1))
		}
		return c
	}
	if o.Brokers == 0 {
		o.Brokers = 3
	}
	args := []string{"-watch-stdin", "-brokers", strconv.Itoa(o.Brokers), "-data-dir", t.TempDir()}
	if o.Partitions > 0 {
		args = append(args, "-partitions", strconv.Itoa(o.Partitions))
	}
	if len(o.Topics) > 0 {
		args = append(args, "-topics", strings.Join(o.Topics, ","))
	}
	p := &process{path: CommandPath(t), args: args}
	c := &Cluster{proc: p}
	t.Cleanup(p.kill)
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	c.Brokers = p.brokers
	return c
}

// process is a running (or stopped) kfake command.
type process struct {
	path    string
	args    []string // all but -ports
	brokers []string // of the first start; later starts listen there again

	mu     sync.Mutex
	cmd    *exec.Cmd     // nil when stopped
	exited chan struct{} // closed when cmd has exited
	err    error         // cmd.Wait's, once exited is closed
	stderr *syncBuffer
}

// start runs the command and waits for its line of addresses.
func (p *process) start() error {
	args := p.args
	if p.brokers != nil {
		var ports []string
		for _, a := range p.brokers {
			ports = append(ports, a[strings.LastIndex(a, ":")+1:])
		}
		args = append(append([]string(nil), args...), "-ports", strings.Join(ports, ","))
	}
	cmd := exec.Command(p.path, args...)
	// The pipe is never written: its end, when the test binary dies,
	// tells the command to exit (-watch-stdin).
	if _, err := cmd.StdinPipe(); err != nil {
		return err
	}
	ready := &firstLine{line: make(chan string, 1)}
	cmd.Stdout = ready
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kfake: %v", err)
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.exited, p.stderr = cmd, exited, stderr
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(exited)
	}()

	var line string
	select {
	case line = <-ready.line:
	case <-exited:
		log, err := p.reap()
		return fmt.Errorf("kfake exited before it was ready: %v\n%s", err, log)
	case <-time.After(time.Minute):
		p.kill()
		return fmt.Errorf("kfake did not print its addresses within a minute\n%s", stderr)
	}
	var out struct{ Brokers []string }
	if err := json.Unmarshal([]byte(line), &out); err != nil || len(out.Brokers) == 0 {
		p.kill()
		return fmt.Errorf("kfake printed %q: %v", line, err)
	}
	if p.brokers == nil {
		p.brokers = out.Brokers
	} else if strings.Join(out.Brokers, ",") != strings.Join(p.brokers, ",") {
		p.kill()
		return fmt.Errorf("kfake came back on %v, not %v", out.Brokers, p.brokers)
	}
	return nil
}

// stop sends SIGTERM and waits for a clean exit.
func (p *process) stop() error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		p.kill()
		return errors.New("kfake did not exit within 30 s of SIGTERM; killed")
	}
	if log, err := p.reap(); err != nil {
		return fmt.Errorf("kfake exited with %v after SIGTERM\n%s", err, log)
	}
	return nil
}

// kill kills the process, if it runs, and waits for it.
func (p *process) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
	p.reap()
}

// reap forgets the exited process and returns its stderr and how it
// ended.
func (p *process) reap() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	log, err := p.stderr.String(), p.err
	p.cmd, p.err = nil, nil
	return log, err
}

// restart starts the stopped process again; the ports of the last run may
// linger a moment.
func (p *process) restart() error {
	return testkit.Poll(5*time.Second, p.start)
}

func (p *process) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// firstLine is a stdout that hands its first line over and drops the rest.
type firstLine struct {
	buf  []byte
	line chan string // gets the first line, once
	done bool
}

func (w *firstLine) Write(b []byte) (int, error) {
	if !w.done {
		w.buf = append(w.buf, b...)
		if i := bytes.IndexByte(w.buf, '\n'); i >= 0 {
			w.done = true
			w.line <- string(w.buf[:i])
			w.buf = nil
		}
	}
	return len(b), nil
}

// syncBuffer is a stderr that can be read while the process writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var command struct {
	once sync.Once
	path string
	err  error
}

// CommandPath builds the kfake command the first time it is called and
// returns where it is; a build that failed fails every test that asks.
func CommandPath(t testing.TB) string {
	t.Helper()
	command.once.Do(func() {
		dir, err := os.MkdirTemp("", "queuebox-kfake-")
		if err != nil {
			command.err = err
			return
		}
		command.path = filepath.Join(dir, "kfake")
		if out, err := exec.Command("go", "build", "-o", command.path, "github.com/queuebox/queuebox/internal/testkafka/kfake").CombinedOutput(); err != nil {
			command.err = fmt.Errorf("go build kfake: %v\n%s", err, out)
		}
	})
	if command.err != nil {
		t.Fatal(command.err)
	}
	return command.path
}

// RemoveCommand deletes the command if one was built (from TestMain,
// after the tests).
func RemoveCommand() {
	if command.path != "" {
		_ = os.RemoveAll(filepath.Dir(command.path))
	}
}
