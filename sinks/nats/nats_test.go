package nats

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testnats"
	"github.com/queuebox/queuebox/sinks"
	"github.com/queuebox/queuebox/sinks/sinktest"
)

func newSink(t testing.TB, cfg Config) *Sink { return sinktest.Open(t, New, cfg) }

func delivery(id string, h natsgo.Header, body []byte) sinktest.Delivery {
	d := sinktest.Delivery{ID: id, Key: h.Get("X-Key"), Headers: map[string]string{}, Body: body}
	for k, v := range h {
		d.Headers[k] = v[0]
	}
	return d
}

func downSink(t *testing.T, js bool) (sinks.Sink, string) {
	addr := sinktest.ClosedAddress(t)
	return newSink(t, Config{URL: "nats://" + addr, Subject: sinktest.Template(t, "x"), JetStream: js, Timeout: 5 * time.Second}), addr
}

// JetStream: each case has its own stream over <prefix>.r1 on one server;
// the fault cases get a server of their own, stopped and started on the
// same port with the same store.
func TestConformanceJetStream(t *testing.T) {
	shared := testnats.Start(t)
	sinktest.Run(t, sinktest.Harness{
		Features: sinktest.Features{Observable: true, Templated: true, Unroutable: true, Refuses: true, Dedupes: true,
			Restart: true, CloseConnections: true, Down: true},
		Open: func(t *testing.T, faults bool) *sinktest.Target {
			srv := shared
			if faults {
				srv = testnats.Start(t)
			}
			prefix := testnats.Unique("qbt")
			st := srv.NewStream(t, prefix, prefix+".r1")
			fullStream(t, srv, prefix+"_FULL", prefix+".full")
			name := testnats.Unique("sink")
			s := newSink(t, Config{URL: srv.URL, Subject: sinktest.Template(t, prefix+".{{ headers.Route }}"), JetStream: true, Timeout: 5 * time.Second, Name: name})
			return &sinktest.Target{
				Sink: s, Route: "r1", Unroutable: "nowhere", Refused: "full",
				Received: func() []sinktest.Delivery {
					ms := st.Messages()
					out := make([]sinktest.Delivery, len(ms))
					for i, m := range ms {
						out[i] = delivery(m.Header.Get(jetstream.MsgIDHeader), m.Header, m.Data)
					}
					return out
				},
				Stop:             func(t *testing.T) { srv.Stop(t) },
				Start:            func(t *testing.T) { srv.Start(t) },
				CloseConnections: func(t *testing.T) { srv.Disconnect(t, name) },
				Down:             func(t *testing.T) (sinks.Sink, string) { return downSink(t, true) },
			}
		},
	})
}

// Core NATS: a subscriber on <prefix>.r1. Nothing refuses a subject and
// nothing survives a restart for a subscriber that was away: core NATS
// promises no more than reaching the server, so those cases do not apply.
func TestConformanceCore(t *testing.T) {
	shared := testnats.Start(t)
	sinktest.Run(t, sinktest.Harness{
		Features: sinktest.Features{Observable: true, Templated: true, CloseConnections: true, Down: true},
		Open: func(t *testing.T, faults bool) *sinktest.Target {
			prefix := testnats.Unique("qbt")
			var mu sync.Mutex
			var got []sinktest.Delivery
			nc := shared.Connect(t)
			sub, err := nc.Subscribe(prefix+".r1", func(m *natsgo.Msg) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, delivery(m.Header.Get(jetstream.MsgIDHeader), m.Header, m.Data))
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.SetPendingLimits(-1, -1); err != nil {
				t.Fatal(err)
			}
			// The server must know the subscription before anything is
			// published: core NATS drops what nobody listens to.
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			name := testnats.Unique("sink")
			s := newSink(t, Config{URL: shared.URL, Subject: sinktest.Template(t, prefix+".{{ headers.Route }}"), Timeout: 5 * time.Second, Name: name})
			return &sinktest.Target{
				Sink: s, Route: "r1",
				Received: func() []sinktest.Delivery {
					mu.Lock()
					defer mu.Unlock()
					return append([]sinktest.Delivery(nil), got...)
				},
				CloseConnections: func(t *testing.T) { shared.Disconnect(t, name) },
				Down:             func(t *testing.T) (sinks.Sink, string) { return downSink(t, false) },
			}
		},
	})
}

// A value a subject cannot hold (white space, the wildcards * and >) can
// never be delivered; the error names it. So does a missing column.
func TestForbiddenSubjectValues(t *testing.T) {
	t.Parallel()
	srv := testnats.Start(t)
	s := newSink(t, Config{URL: srv.URL, Subject: sinktest.Template(t, "events.{{ aggregateType }}.{{ key }}"), JetStream: true})
	for key, want := range map[string]string{
		"cust 42": `"cust 42"`, "cust*": `"cust*"`, "a>": `"a>"`, "line\nbreak": `"line\nbreak"`,
		".lead": "empty token", "trail.": "empty token", "a..b": "empty token",
	} {
		m := sinktest.Message(&sinktest.Target{}, key, 0)
		err := s.Publish(context.Background(), []sinks.Message{m})[0]
		if !sinks.IsPermanent(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("key %q: %v, want a permanent error that says %s", key, err, want)
		}
	}
	m := sinktest.Message(&sinktest.Target{}, "k", 0)
	m.AggregateType = nil
	if err := s.Publish(context.Background(), []sinks.Message{m})[0]; !sinks.IsPermanent(err) || !strings.Contains(err.Error(), "aggregate_type") {
		t.Errorf("a row without aggregate_type: %v", err)
	}
}

// The templated subject reaches the stream that captures it, and the
// message id travels as Nats-Msg-Id.
func TestTemplatedSubjectAndMsgID(t *testing.T) {
	t.Parallel()
	srv := testnats.Start(t)
	prefix := testnats.Unique("ev")
	st := srv.NewStream(t, prefix, prefix+".order.>")
	s := newSink(t, Config{URL: srv.URL, Subject: sinktest.Template(t, prefix+".{{ aggregateType }}.{{ topic }}"), JetStream: true})
	m := sinktest.Message(&sinktest.Target{}, "k", 0)
	if err := s.Publish(context.Background(), []sinks.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	ms := st.Messages()
	if len(ms) != 1 || ms[0].Subject != prefix+".order.order.created" || ms[0].Header.Get("Nats-Msg-Id") != m.ID {
		t.Fatalf("stream holds %d messages: %+v", len(ms), ms)
	}
}

func TestCredentialsFile(t *testing.T) {
	if _, err := New(Config{URL: "nats://127.0.0.1:4222", Subject: sinktest.Template(t, "x"), CredentialsFile: filepath.Join(t.TempDir(), "none.creds")}); err == nil || !strings.Contains(err.Error(), "credentialsFile") {
		t.Errorf("a missing credentials file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.creds")
	if err := os.WriteFile(bad, []byte("not a creds file"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := testnats.Start(t)
	s, err := New(Config{URL: srv.URL, Subject: sinktest.Template(t, "x"), CredentialsFile: bad, Timeout: 2 * time.Second})
	if err == nil {
		defer s.Close()
		if err := s.Publish(context.Background(), []sinks.Message{sinktest.Message(&sinktest.Target{}, "k", 0)})[0]; err == nil {
			t.Error("a publish with an unreadable credentials file succeeded")
		}
	}
}

// Against a server in operator mode (JWT users, memory resolver), a valid
// credentials file logs the sink in and a row reaches the stream; without
// the file, or with a well-formed file for a user of an account the server
// does not trust, New still succeeds (the connection keeps trying in the
// background) and every Publish fails at once with the server's
// authorization refusal in its error.
func TestCredentialsFileLogsIn(t *testing.T) {
	t.Parallel()
	srv := testnats.StartOperator(t)
	prefix := testnats.Unique("qbt")
	st := srv.NewStream(t, prefix, prefix+".>")
	subject := sinktest.Template(t, prefix+".{{ topic }}")

	s := newSink(t, Config{URL: srv.URL, Subject: subject, JetStream: true, CredentialsFile: srv.Creds(t, "queuebox"), Timeout: 5 * time.Second})
	m := sinktest.Message(&sinktest.Target{}, "k", 0)
	if err := s.Publish(context.Background(), []sinks.Message{m})[0]; err != nil {
		t.Fatalf("a publish with valid credentials: %v", err)
	}
	if ms := st.Messages(); len(ms) != 1 || ms[0].Header.Get(jetstream.MsgIDHeader) != m.ID || string(ms[0].Data) != string(m.Body) {
		t.Fatalf("the stream holds %+v; want the row", ms)
	}

	for name, file := range map[string]string{"no credentials file": "", "another operator's user": testnats.UntrustedCreds(t, "stranger")} {
		s := newSink(t, Config{URL: srv.URL, Subject: subject, JetStream: true, CredentialsFile: file, Timeout: 2 * time.Second})
		// The first connect is in the background: wait for its refusal.
		var err error
		_ = testkit.Poll(10*time.Second, func() error { // the checks below say what the refusal lacked
			err = s.Publish(context.Background(), []sinks.Message{sinktest.Message(&sinktest.Target{}, "k", 1)})[0]
			if err == nil {
				t.Fatalf("%s: a publish succeeded", name)
			}
			if !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
				return err
			}
			return nil
		})
		t.Logf("%s: %v", name, err)
		if msg := err.Error(); !strings.Contains(strings.ToLower(msg), "authorization violation") || !strings.Contains(msg, "not connected") ||
			!strings.Contains(msg, strings.TrimPrefix(srv.URL, "nats://")) {
			t.Errorf("%s: %v; want not connected, with the server's authorization refusal and address", name, err)
		}
	}
	if n := len(st.Messages()); n != 1 {
		t.Fatalf("the stream holds %d messages; the refused sinks published some", n)
	}
}

func TestNewRejectsBadURL(t *testing.T) {
	for _, u := range []string{"http://localhost:4222", "nats://", "nonsense"} {
		if _, err := New(Config{URL: u, Subject: sinktest.Template(t, "x")}); err == nil || !strings.Contains(err.Error(), "url") {
			t.Errorf("%q: %v", u, err)
		}
	}
}

// BenchmarkPublish: 100,000 messages over 1,000 keys to an in-process
// server (on the same cores), into a file-backed stream with JetStream, or
// to a subject with one subscriber with core NATS; runs of up to 10.
func BenchmarkPublish(b *testing.B) {
	srv := testnats.Start(b)
	for _, js := range []bool{true, false} {
		name := map[bool]string{true: "jetstream", false: "core"}[js]
		b.Run(name, func(b *testing.B) {
			subject := testnats.Unique("bench")
			if js {
				srv.NewStream(b, subject, subject)
			} else {
				sub, err := srv.Connect(b).Subscribe(subject, func(*natsgo.Msg) {})
				if err != nil {
					b.Fatal(err)
				}
				_ = sub.SetPendingLimits(-1, -1)
			}
			s := newSink(b, Config{URL: srv.URL, Subject: sinktest.Template(b, subject), JetStream: js})
			sinktest.Throughput(b, &sinktest.Target{Sink: s}, 1000, 100, 10)
		})
	}
}

// BenchmarkPublishTopicsTakeTurns: JetStream as BenchmarkPublish, with
// three topics taking turns within each key, so that the subject changes
// from one message of a key to the next (the bench's nats scenario).
func BenchmarkPublishTopicsTakeTurns(b *testing.B) {
	srv := testnats.Start(b)
	prefix := testnats.Unique("bench")
	srv.NewStream(b, prefix, prefix+".>")
	s := newSink(b, Config{URL: srv.URL, Subject: sinktest.Template(b, prefix+".{{ topic }}"), JetStream: true})
	sinktest.Throughput(b, &sinktest.Target{Sink: s}, 1000, 50, 10, "order.created", "order.paid", "order.shipped")
}

// fullStream makes a stream over subject that holds one message and refuses
// new ones.
func fullStream(t *testing.T, srv *testnats.Server, name, subject string) {
	t.Helper()
	srv.NewStreamConfig(t, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage,
		MaxMsgs: 1, Discard: jetstream.DiscardNew})
	// A JetStream publish, which returns once the stream has stored the
	// message: a core publish could still be on its way when the sink's
	// message arrives, and that one would find room.
	js, err := jetstream.New(srv.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, subject, []byte("{}")); err != nil {
		t.Fatalf("fill stream %s: %v", name, err)
	}
}

// A key's run to one stream is published without waiting; when a message
// fails and one behind it is stored all the same (here a subject at its
// own limit, and another that is not), the one behind is reported failed,
// and its retry, which the duplicate window would drop, is stored again
// after the failed one: the key's last copies are in order.
func TestStoredBehindAFailureIsStoredAgainInOrder(t *testing.T) {
	srv := testnats.Start(t)
	prefix := testnats.Unique("qbt")
	cfg := jetstream.StreamConfig{Name: prefix, Subjects: []string{prefix + ".>"}, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute,
		MaxMsgsPerSubject: 2, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true, MaxMsgs: -1, MaxBytes: -1}
	st := srv.NewStreamConfig(t, cfg)
	s := newSink(t, Config{URL: srv.URL, Subject: sinktest.Template(t, prefix+".{{ topic }}"), JetStream: true, Timeout: 5 * time.Second})
	msg := func(n int, topic string) sinks.Message {
		return sinks.Message{ID: fmt.Sprintf("0b7e3f4e-0000-4000-8000-%012d", n), Topic: topic, Key: "k", Attempt: 1, Sequence: int64(n), Body: []byte("{}")}
	}
	// The sink learns both subjects' stream; then subject a is full.
	for i, m := range []sinks.Message{msg(1, "a"), msg(2, "b"), msg(3, "a")} {
		if err := s.Publish(context.Background(), []sinks.Message{m})[0]; err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	failed, behind := msg(4, "a"), msg(5, "b")
	errs := s.Publish(context.Background(), []sinks.Message{failed, behind})
	if errs[0] == nil || errs[1] == nil {
		t.Fatalf("a message refused by its subject's limit, and the one behind it: %v", errs)
	}
	// The limit goes; the engine retries both.
	cfg.MaxMsgsPerSubject = 10
	js, err := jetstream.New(srv.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.UpdateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	failed.Attempt, behind.Attempt = 2, 2
	for i, err := range s.Publish(context.Background(), []sinks.Message{failed, behind}) {
		if err != nil {
			t.Fatalf("retry, message %d: %v", i, err)
		}
	}
	var order []string
	for _, m := range st.Messages() {
		order = append(order, m.Header.Get("X-Sequence"))
	}
	// 5 was stored behind the failure, before 4; its retry comes after 4.
	if want := []string{"1", "2", "3", "5", "4", "5"}; !slices.Equal(order, want) {
		t.Errorf("the stream holds the sequences %v, want %v", order, want)
	}
	// A retry that is no longer behind a failure is deduplicated again.
	behind.Attempt = 3
	if err := s.Publish(context.Background(), []sinks.Message{behind})[0]; err != nil {
		t.Fatal(err)
	}
	if n := len(st.Messages()); n != 6 {
		t.Errorf("a third publish of the same row was stored again (%d messages)", n)
	}
}
