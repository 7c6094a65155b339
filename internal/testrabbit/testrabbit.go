// Package testrabbit gives tests a real RabbitMQ.
//
// URL is the shared server: $QUEUEBOX_TEST_AMQP_URL, or the system server on
// 127.0.0.1:5672 (guest/guest) that scripts/test.sh installs and starts.
// Tests on it must not disturb each other: each declares its own exchanges
// and queues under a unique name.
//
// Tests that break the server (a restart, connections closed from the
// server's side) must not do it under other tests' feet, so they use a
// private node: Private starts one RabbitMQ node per test binary, from the
// same installation, under its own node name, on free ports, with its data
// and logs in a temporary folder; Main stops it when the tests end. The
// fault tests of a package share it and run one at a time.
package testrabbit

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuebox/queuebox/internal/testkit"
)

// URL returns the shared server's URL, failing the test with what to do when
// nothing listens there.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("QUEUEBOX_TEST_AMQP_URL")
	if u == "" {
		u = "amqp://guest:guest@127.0.0.1:5672/"
	}
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatalf("QUEUEBOX_TEST_AMQP_URL: %v", err)
	}
	host := pu.Host
	if pu.Port() == "" {
		host = net.JoinHostPort(pu.Hostname(), "5672")
	}
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		t.Fatalf("no RabbitMQ at %s (%v): run the tests with scripts/test.sh, which installs and starts it, or set QUEUEBOX_TEST_AMQP_URL", host, err)
	}
	_ = c.Close()
	return u
}

// Node is a private RabbitMQ node.
type Node struct {
	// URL is its AMQP URL (guest/guest).
	URL  string
	Addr string // 127.0.0.1:port

	name, dir      string
	port, distPort int
	mu             sync.Mutex // one fault at a time
	cmd            *exec.Cmd
	exited         chan struct{}
}

var (
	privateMu  sync.Mutex
	private    *Node
	privateErr error
)

// Main runs the tests, stops the private node if one was started, and
// returns m's code. A TestMain that only calls Main may return: the test
// binary then exits with the code of testing.M.Run.
func Main(m interface{ Run() int }) int {
	code := m.Run()
	privateMu.Lock()
	if private != nil {
		private.stop()
		_ = os.RemoveAll(private.dir)
	}
	privateMu.Unlock()
	return code
}

// Private returns the test binary's private node, starting it on first use
// (a whole broker boots: seconds, not milliseconds). The package's TestMain
// must call Main.
func Private(t testing.TB) *Node {
	t.Helper()
	privateMu.Lock()
	defer privateMu.Unlock()
	if private == nil && privateErr == nil {
		private, privateErr = startNode()
	}
	if privateErr != nil {
		t.Fatalf("a private RabbitMQ node: %v", privateErr)
	}
	return private
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func startNode() (*Node, error) {
	server := "/usr/lib/rabbitmq/bin/rabbitmq-server"
	if _, err := os.Stat(server); err != nil {
		return nil, fmt.Errorf("%s is missing: run scripts/install-rabbitmq.sh", server)
	}
	dir, err := os.MkdirTemp("", "qb-rmq-")
	if err != nil {
		return nil, err
	}
	n := &Node{dir: dir, name: fmt.Sprintf("qbtest%d@localhost", os.Getpid())}
	if n.port, err = freePort(); err == nil {
		n.distPort, err = freePort()
	}
	if err != nil {
		return nil, err
	}
	for n.distPort == n.port {
		if n.distPort, err = freePort(); err != nil {
			return nil, err
		}
	}
	n.Addr = fmt.Sprintf("127.0.0.1:%d", n.port)
	n.URL = fmt.Sprintf("amqp://guest:guest@%s/", n.Addr)
	conf := fmt.Sprintf("listeners.tcp.local = %s\nloopback_users.guest = true\n", n.Addr)
	if err := os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "env.conf"), nil, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "enabled_plugins"), []byte("[].\n"), 0o644); err != nil {
		return nil, err
	}
	if err := n.start(); err != nil {
		n.stop()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return n, nil
}

func (n *Node) env() []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + n.dir, // the Erlang cookie lives there
		"RABBITMQ_NODENAME=" + n.name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT=" + strconv.Itoa(n.port),
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(n.distPort),
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(n.dir, "log"),
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(n.dir, "rabbitmq.conf"),
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(n.dir, "env.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(n.dir, "enabled_plugins"),
		"RABBITMQ_PID_FILE=" + filepath.Join(n.dir, "pid"),
		"ERL_EPMD_ADDRESS=127.0.0.1",
	}
}

func (n *Node) start() error {
	out, err := os.OpenFile(filepath.Join(n.dir, "server.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	_ = os.Remove(filepath.Join(n.dir, "pid"))
	cmd := exec.Command("/usr/lib/rabbitmq/bin/rabbitmq-server")
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = n.env(), n.dir, out, out
	// Pdeathsig: a test binary that dies (a -timeout panic, a kill) takes
	// its node with it; the script forwards SIGTERM to the Erlang VM.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	n.cmd, n.exited = cmd, exited
	gone := false
	err = testkit.Poll(90*time.Second, func() error {
		select {
		case <-exited:
			gone = true
			return nil
		default:
		}
		c, err := net.DialTimeout("tcp", n.Addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err
	})
	switch {
	case gone:
		return fmt.Errorf("the node exited while starting; its output:\n%s", n.tail())
	case err != nil:
		return fmt.Errorf("the node did not open %s: %v; its output:\n%s", n.Addr, err, n.tail())
	}
	return n.ready()
}

// ready waits until the node accepts an AMQP connection (the port opens a
// moment before the broker takes logins).
func (n *Node) ready() error {
	err := testkit.Poll(10*time.Second, func() error {
		c, err := amqp.Dial(n.URL)
		if err == nil {
			_ = c.Close()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("the node does not accept connections: %v", err)
	}
	return nil
}

func (n *Node) tail() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "server.out"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// stop asks the Erlang VM to stop (SIGTERM: a clean shutdown) and waits.
func (n *Node) stop() {
	if n.cmd == nil {
		return
	}
	if b, err := os.ReadFile(filepath.Join(n.dir, "pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
	}
	select {
	case <-n.exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		<-n.exited
	}
	n.cmd = nil
}

// Stop stops the node (a clean shutdown, as a restart by an operator).
func (n *Node) Stop(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stop()
}

// Start starts the stopped node again on the same port with the same data:
// durable exchanges and queues, and persistent messages, survive.
func (n *Node) Start(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return
	}
	if err := n.start(); err != nil {
		t.Fatalf("start the private RabbitMQ node again: %v", err)
	}
}

// Restart stops the node and starts it again.
func (n *Node) Restart(t testing.TB) {
	t.Helper()
	n.Stop(t)
	n.Start(t)
}

// CloseConnections closes every client connection from the server's side,
// as `rabbitmqctl close_all_connections` does for an operator.
func (n *Node) CloseConnections(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/lib/rabbitmq/bin/rabbitmqctl", "-n", n.name, "close_all_connections", "test: connections closed by the server")
	cmd.Env = n.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl close_all_connections: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Closed ") {
		t.Fatalf("rabbitmqctl close_all_connections said:\n%s", out)
	}
}

// Queue is a durable topic exchange and a durable queue bound to it with one
// binding key, both under a unique name, removed when the test ends. Get
// reads what reached the queue, reconnecting after a fault.
type Queue struct {
	URL, Exchange, Name string

	mu        sync.Mutex
	exchanges []string // declared by Declare, removed with the queue
	conn      *amqp.Connection
	ch        *amqp.Channel
	got       []amqp.Delivery
}

var seq struct {
	sync.Mutex
	n int
}

// Unique returns a name no other test of this run uses.
func Unique(prefix string) string {
	seq.Lock()
	defer seq.Unlock()
	seq.n++
	return fmt.Sprintf("%s-%d-%d-%d", prefix, os.Getpid(), time.Now().UnixNano()%1e6, seq.n)
}

// NewQueue declares a queue bound to a new exchange with bindingKey.
func NewQueue(t testing.TB, amqpURL, bindingKey string) *Queue {
	t.Helper()
	q := &Queue{URL: amqpURL, Exchange: Unique("qbt-x"), Name: Unique("qbt-q")}
	q.Declare(t, q.Exchange, bindingKey)
	t.Cleanup(func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.conn != nil {
			_ = q.conn.Close()
		}
		c, err := amqp.Dial(q.URL)
		if err != nil {
			return
		}
		defer c.Close()
		if ch, err := c.Channel(); err == nil {
			_, _ = ch.QueueDelete(q.Name, false, false, false)
			for _, x := range q.exchanges {
				_ = ch.ExchangeDelete(x, false, false)
			}
		}
	})
	return q
}

// Declare declares exchange (durable, topic) and binds the queue to it.
func (q *Queue) Declare(t testing.TB, exchange, bindingKey string) {
	t.Helper()
	c, err := amqp.Dial(q.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, bindingKey, exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	q.exchanges = append(q.exchanges, exchange)
	q.mu.Unlock()
}

// Get returns every message the queue has received so far, in order.
func (q *Queue) Get() []amqp.Delivery {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.drain(); err != nil {
		if q.conn != nil {
			_ = q.conn.Close()
		}
		q.conn, q.ch = nil, nil
	}
	return append([]amqp.Delivery(nil), q.got...)
}

func (q *Queue) drain() error {
	if q.conn == nil || q.conn.IsClosed() {
		c, err := amqp.Dial(q.URL)
		if err != nil {
			return err
		}
		ch, err := c.Channel()
		if err != nil {
			_ = c.Close()
			return err
		}
		q.conn, q.ch = c, ch
	}
	for {
		d, ok, err := q.ch.Get(q.Name, false)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		// Acknowledge only once recorded: a fault between the two loses
		// nothing (the broker redelivers, and the record shows it twice).
		q.got = append(q.got, d)
		if err := d.Ack(false); err != nil {
			return err
		}
	}
}

// DurableQueue declares a durable queue named after prefix on the server at
// url (with args), deleted when the test ends.
func DurableQueue(t testing.TB, url, prefix string, args amqp.Table) string {
	t.Helper()
	name := Unique(prefix)
	DeclareQueue(t, url, name, args)
	return name
}

// DeclareQueue declares the durable queue name on the server at url (with
// args), deleted when the test ends: for a test that needs the name before
// the queue exists.
func DeclareQueue(t testing.TB, url, name string, args amqp.Table) {
	t.Helper()
	ch := Channel(t, url)
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, err := amqp.Dial(url); err == nil {
			if ch, err := c.Channel(); err == nil {
				_, _ = ch.QueueDelete(name, false, false, false)
			}
			c.Close()
		}
	})
}

// Channel opens a connection and a channel to the server at url, closed
// when the test ends.
func Channel(t testing.TB, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}
