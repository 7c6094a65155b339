// Package testnats gives tests a real NATS server with JetStream: the
// server's own Go module, in-process, on a random loopback port, with its
// store in the test's temporary folder. $QUEUEBOX_TEST_NATS_URL points the
// same tests at an external server instead (the fault tests then skip).
//
// Importing this package compiles the whole NATS server, a long build: only
// the tests that need it import it, each in its own package.
package testnats

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/internal/testkit"
)

// Server is a running server.
type Server struct {
	URL string

	mu   sync.Mutex
	srv  *server.Server
	opts *server.Options
	// conn is what Connect logs in with (an operator-mode server's own
	// user).
	conn []natsgo.Option
}

// Start starts a server for the test, shut down when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	if u := os.Getenv("QUEUEBOX_TEST_NATS_URL"); u != "" {
		return &Server{URL: u}
	}
	return start(t, &server.Options{JetStream: true, StoreDir: t.TempDir()})
}

// StartDenying starts a server whose one user may publish anything but
// the subjects in deny (JetStream API requests among them); URL carries
// the user's name and password, and Connect logs in as that user.
func StartDenying(t testing.TB, deny ...string) *Server {
	t.Helper()
	if os.Getenv("QUEUEBOX_TEST_NATS_URL") != "" {
		t.Skip("this test needs a server with a user of its own; QUEUEBOX_TEST_NATS_URL points elsewhere")
	}
	user := &server.User{Username: "qb", Password: "qb-secret", Permissions: &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: deny},
	}}
	s := start(t, &server.Options{JetStream: true, StoreDir: t.TempDir(), Users: []*server.User{user}})
	s.URL = fmt.Sprintf("nats://qb:qb-secret@127.0.0.1:%d", s.opts.Port)
	return s
}

// start starts an in-process server with opts, on loopback and a random
// port.
func start(t testing.TB, opts *server.Options) *Server {
	t.Helper()
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", server.RANDOM_PORT, true, true
	s := &Server{opts: opts}
	if err := s.run(); err != nil {
		t.Fatal(err)
	}
	// Later starts reuse the port the first one got.
	s.opts.Port = s.srv.Addr().(*net.TCPAddr).Port
	s.URL = fmt.Sprintf("nats://127.0.0.1:%d", s.opts.Port)
	t.Cleanup(s.shutdown)
	return s
}

func (s *Server) run() error {
	srv, err := server.NewServer(s.opts)
	if err != nil {
		return err
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("the NATS server did not get ready")
	}
	s.srv = srv
	return nil
}

func (s *Server) shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		s.srv = nil
	}
}

func (s *Server) inProcess(t testing.TB) {
	t.Helper()
	if s.opts == nil {
		t.Skip("this test steers the in-process server; QUEUEBOX_TEST_NATS_URL points elsewhere")
	}
}

// Stop shuts the server down.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.inProcess(t)
	s.shutdown()
}

// Start starts the stopped server again on its port, with its store.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	s.inProcess(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return
	}
	// The old socket may linger a moment: try until the port is free.
	if err := testkit.Poll(5*time.Second, s.run); err != nil {
		t.Fatalf("the NATS server did not start again: %v", err)
	}
}

// Disconnect closes, from the server's side, every client connection whose
// name is name, waiting (up to 10 s) for one to exist: a client that was
// disconnected a moment ago may still be reconnecting.
func (s *Server) Disconnect(t testing.TB, name string) {
	t.Helper()
	s.inProcess(t)
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	err := testkit.Poll(10*time.Second, func() error {
		cz, err := srv.Connz(&server.ConnzOptions{Limit: 10000})
		if err != nil {
			return err
		}
		n := 0
		for _, c := range cz.Conns {
			if c.Name == name {
				if err := srv.DisconnectClientByID(c.Cid); err != nil {
					return err
				}
				n++
			}
		}
		if n == 0 {
			return fmt.Errorf("no connection named %q to close", name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Connect opens a client connection for the test's own use (creating
// streams, reading them), closed when the test ends.
func (s *Server) Connect(t testing.TB) *natsgo.Conn {
	t.Helper()
	opts := append([]natsgo.Option{natsgo.MaxReconnects(-1), natsgo.ReconnectWait(200 * time.Millisecond)}, s.conn...)
	nc, err := natsgo.Connect(s.URL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Stream is a JetStream stream and a reader of everything in it.
type Stream struct {
	Name string
	js   jetstream.JetStream
	mu   sync.Mutex
	next uint64
	got  []*jetstream.RawStreamMsg
}

// NewStream creates a file-backed stream over subjects with a duplicate
// window of ten minutes.
func (s *Server) NewStream(t testing.TB, name string, subjects ...string) *Stream {
	t.Helper()
	return s.NewStreamConfig(t, jetstream.StreamConfig{Name: name, Subjects: subjects, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute})
}

// NewStreamConfig creates the stream cfg describes, deleted when the test
// ends.
func (s *Server) NewStreamConfig(t testing.TB, cfg jetstream.StreamConfig) *Stream {
	t.Helper()
	js, err := jetstream.New(s.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatalf("create stream %s: %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, cfg.Name)
	})
	return &Stream{Name: cfg.Name, js: js, next: 1}
}

// Messages returns every message the stream holds, in stream order. While
// the server is away it returns what it read before.
func (st *Stream) Messages() []*jetstream.RawStreamMsg {
	st.mu.Lock()
	defer st.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	str, err := st.js.Stream(ctx, st.Name)
	if err == nil {
		var info *jetstream.StreamInfo
		if info, err = str.Info(ctx); err == nil {
			for ; st.next <= info.State.LastSeq; st.next++ {
				m, err := str.GetMsg(ctx, st.next)
				if err != nil {
					break
				}
				st.got = append(st.got, m)
			}
		}
	}
	return append([]*jetstream.RawStreamMsg(nil), st.got...)
}

var seq struct {
	sync.Mutex
	n int
}

// Unique returns a name (for a stream, or a subject token) no other test of
// this run uses.
func Unique(prefix string) string {
	seq.Lock()
	defer seq.Unlock()
	seq.n++
	return fmt.Sprintf("%s_%d_%d_%d", prefix, os.Getpid(), time.Now().UnixNano()%1e6, seq.n)
}
