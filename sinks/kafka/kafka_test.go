package kafka

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"hash/fnv"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/queuebox/queuebox/internal/testkafka"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/sinks"
	"github.com/queuebox/queuebox/sinks/sinktest"
)

func newSink(t testing.TB, cfg Config) *Sink { return sinktest.Open(t, New, cfg) }

func deliveries(rs []testkafka.Record) []sinktest.Delivery {
	out := make([]sinktest.Delivery, len(rs))
	for i, r := range rs {
		out[i] = sinktest.Delivery{ID: r.Headers["X-Message-Id"], Key: string(r.Key), Headers: r.Headers, Body: r.Value}
	}
	return out
}

// Each case gets a cluster of its own (kfake starts in milliseconds); the
// topic is "<prefix>-{{ headers.Route }}", and only <prefix>-r1 exists.
func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		Features: sinktest.Features{Observable: true, Templated: true, Unroutable: true, Restart: true, Down: true},
		Open: func(t *testing.T, faults bool) *sinktest.Target {
			var c *testkafka.Cluster
			if faults {
				c = testkafka.NewRestartable(t)
			} else {
				c = testkafka.New(t)
			}
			prefix := testkafka.Unique("qbt")
			c.CreateTopic(t, prefix+"-r1", 3)
			r := c.NewReader(prefix+"-r1", 3)
			s := newSink(t, Config{Brokers: c.Brokers, Topic: sinktest.Template(t, prefix+"-{{ headers.Route }}"), Timeout: 5 * time.Second})
			tg := &sinktest.Target{
				Sink: s, Route: "r1", Unroutable: "nowhere",
				Received: func() []sinktest.Delivery { return deliveries(r.Poll()) },
				Down: func(t *testing.T) (sinks.Sink, string) {
					addr := sinktest.ClosedAddress(t)
					return newSink(t, Config{Brokers: []string{addr}, Topic: sinktest.Template(t, "t"), Timeout: 5 * time.Second}), addr
				},
			}
			if faults {
				tg.Stop = func(t *testing.T) { c.Stop(t) }
				tg.Start = func(t *testing.T) { c.Start(t) }
			}
			return tg
		},
	})
}

// javaMurmur2 is the Java client's murmur2 (org.apache.kafka.common.utils.
// Utils.murmur2), written here from the algorithm, independently of
// kafka-go's, and checked against the Java test vectors below.
func javaMurmur2(data []byte) int32 {
	const seed, m, r = uint32(0x9747b28c), uint32(0x5bd1e995), 24
	n := len(data)
	h := seed ^ uint32(n)
	for i := 0; i+4 <= n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := data[n&^3:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// javaPartition is the Java client's default partition for a key:
// toPositive(murmur2(key)) % partitions.
func javaPartition(key string, partitions int) int {
	return int(javaMurmur2([]byte(key))&0x7fffffff) % partitions
}

func TestJavaMurmur2Vectors(t *testing.T) {
	// From the Java client's own tests (UtilsTest.testMurmur2).
	for in, want := range map[string]int32{
		"21": -973932308, "foobar": -790332482, "a-little-bit-long-string": -985981536,
		"a-little-bit-longer-string": -1486304829, "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, "abc": 479470107,
	} {
		if got := javaMurmur2([]byte(in)); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

// The partition a key lands on, read back from the cluster, is the one the
// Java client's algorithm gives (murmur2), or Sarama's FNV-1a (fnv1a).
func TestPartitioners(t *testing.T) {
	t.Parallel()
	c := testkafka.New(t)
	for _, tc := range []struct {
		name string
		want func(key string, n int) int
	}{
		{"murmur2", javaPartition},
		{"fnv1a", func(key string, n int) int {
			h := fnv.New32a()
			h.Write([]byte(key))
			p := int32(h.Sum32()) % int32(n)
			if p < 0 {
				p = -p
			}
			return int(p)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const partitions = 6
			topic := testkafka.Unique("qbt-part")
			c.CreateTopic(t, topic, partitions)
			s := newSink(t, Config{Brokers: c.Brokers, Topic: sinktest.Template(t, topic), Partitioner: tc.name})
			keys := []string{"21", "foobar", "abc", "cust-42", "order-7", "a-little-bit-long-string", "k0", "k1", "k2", "k3", "k4", "k5"}
			used := map[int]bool{}
			for i, k := range keys {
				m := sinktest.Message(&sinktest.Target{}, k, int64(i))
				if err := s.Publish(context.Background(), []sinks.Message{m})[0]; err != nil {
					t.Fatal(err)
				}
				used[tc.want(k, partitions)] = true
			}
			if len(used) < 3 {
				t.Fatalf("the keys cover only %d partitions: the test would prove little", len(used))
			}
			r := c.NewReader(topic, partitions)
			var got []testkafka.Record
			_ = testkit.Poll(30*time.Second, testkit.True(func() bool { got = r.Poll(); return len(got) >= len(keys) }))
			if len(got) != len(keys) {
				t.Fatalf("%d of %d records arrived", len(got), len(keys))
			}
			for _, rec := range got {
				if want := tc.want(string(rec.Key), partitions); rec.Partition != want {
					t.Errorf("key %q landed on partition %d, want %d", rec.Key, rec.Partition, want)
				}
			}
		})
	}
}

// produces counts produce requests and remembers what they asked for.
type produces struct {
	mu    sync.Mutex
	reqs  []*kmsg.ProduceRequest
	topic string
}

func watchProduces(c *kfake.Cluster, topic string) *produces {
	p := &produces{topic: topic}
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.ProduceRequest)
		for _, t := range req.Topics {
			if t.Topic == topic {
				p.mu.Lock()
				p.reqs = append(p.reqs, req)
				p.mu.Unlock()
			}
		}
		return nil, nil, false // observe only
	})
	return p
}

func (p *produces) all() []*kmsg.ProduceRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*kmsg.ProduceRequest(nil), p.reqs...)
}

// acks and compression reach the wire: the produce request's acks (-1 for
// all, 1 for one) and the record batch's compression attribute; the records
// read back intact. kfake does not replicate: acks=all is checked as what
// the sink asks for, not as what replication does.
func TestAcksAndCompressionOnTheWire(t *testing.T) {
	t.Parallel()
	c := testkafka.New(t)
	codecs := map[string]int16{"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
	for name, codec := range codecs {
		for acks, wantAcks := range map[string]int16{"all": -1, "one": 1} {
			t.Run(name+"/"+acks, func(t *testing.T) {
				topic := testkafka.Unique("qbt-codec")
				c.CreateTopic(t, topic, 1)
				p := watchProduces(c.Fake(t), topic)
				s := newSink(t, Config{Brokers: c.Brokers, Topic: sinktest.Template(t, topic), Acks: acks, Compression: name})
				body := []byte(`{"text":"` + strings.Repeat("compressible ", 200) + `"}`)
				m := sinktest.Message(&sinktest.Target{}, "k", 0)
				m.Body = body
				if err := s.Publish(context.Background(), []sinks.Message{m})[0]; err != nil {
					t.Fatal(err)
				}
				reqs := p.all()
				if len(reqs) != 1 {
					t.Fatalf("%d produce requests, want 1", len(reqs))
				}
				if reqs[0].Acks != wantAcks {
					t.Errorf("acks %d, want %d", reqs[0].Acks, wantAcks)
				}
				batch := reqs[0].Topics[0].Partitions[0].Records
				if len(batch) < 23 {
					t.Fatalf("a record batch of %d bytes", len(batch))
				}
				// RecordBatch v2: baseOffset 8, length 4, leaderEpoch 4,
				// magic 1, crc 4, then attributes (int16); codec = low 3 bits.
				if got := (int16(batch[21])<<8 | int16(batch[22])) & 7; got != codec {
					t.Errorf("batch compression %d, want %d (%s)", got, codec, name)
				}
				recs := c.NewReader(topic, 1).Poll()
				if len(recs) != 1 || string(recs[0].Value) != string(body) {
					t.Errorf("read back %d records", len(recs))
				}
			})
		}
	}
}

// A run of one key goes to one partition in one produce request, in order.
func TestRunOfOneKeyIsOneProduce(t *testing.T) {
	t.Parallel()
	c := testkafka.New(t)
	topic := testkafka.Unique("qbt-run")
	c.CreateTopic(t, topic, 6)
	p := watchProduces(c.Fake(t), topic)
	s := newSink(t, Config{Brokers: c.Brokers, Topic: sinktest.Template(t, topic)})
	msgs := make([]sinks.Message, 100)
	for i := range msgs {
		msgs[i] = sinktest.Message(&sinktest.Target{}, "cust-42", int64(i))
	}
	for i, err := range s.Publish(context.Background(), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if n := len(p.all()); n != 1 {
		t.Errorf("%d produce requests for one run, want 1", n)
	}
	recs := c.NewReader(topic, 6).Poll()
	if len(recs) != len(msgs) {
		t.Fatalf("%d of %d records", len(recs), len(msgs))
	}
	for i, r := range recs {
		if r.Partition != javaPartition("cust-42", 6) || r.Headers["X-Message-Id"] != msgs[i].ID {
			t.Fatalf("record %d: partition %d, id %s", i, r.Partition, r.Headers["X-Message-Id"])
		}
	}
}

// An unkeyed row becomes a record without a key (not an empty key).
func TestUnkeyedRecordHasNoKey(t *testing.T) {
	t.Parallel()
	c := testkafka.New(t)
	topic := testkafka.Unique("qbt-nokey")
	c.CreateTopic(t, topic, 1)
	s := newSink(t, Config{Brokers: c.Brokers, Topic: sinktest.Template(t, topic)})
	if err := s.Publish(context.Background(), []sinks.Message{sinktest.Message(&sinktest.Target{}, "", 0)})[0]; err != nil {
		t.Fatal(err)
	}
	recs := c.NewReader(topic, 1).Poll()
	if len(recs) != 1 || recs[0].Key != nil {
		t.Fatalf("records %+v", recs)
	}
}

func TestTemplatedTopicAndBadValues(t *testing.T) {
	t.Parallel()
	c := testkafka.New(t)
	prefix := testkafka.Unique("qbt-agg")
	c.CreateTopic(t, prefix+".order", 1)
	s := newSink(t, Config{Brokers: c.Brokers, Topic: sinktest.Template(t, prefix+".{{ aggregateType }}")})
	m := sinktest.Message(&sinktest.Target{}, "k", 0) // aggregate type "order"
	if err := s.Publish(context.Background(), []sinks.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	if recs := c.NewReader(prefix+".order", 1).Poll(); len(recs) != 1 {
		t.Errorf("%d records in %s.order", len(recs), prefix)
	}
	m.AggregateType = nil
	if err := s.Publish(context.Background(), []sinks.Message{m})[0]; !sinks.IsPermanent(err) || !strings.Contains(err.Error(), "aggregate_type") {
		t.Errorf("a row without aggregate_type: %v", err)
	}
	bad := "order line"
	m.AggregateType = &bad
	if err := s.Publish(context.Background(), []sinks.Message{m})[0]; !sinks.IsPermanent(err) || !strings.Contains(err.Error(), `"order line"`) {
		t.Errorf("a value with a space: %v", err)
	}
	big := sinktest.Message(&sinktest.Target{}, "k", 1)
	big.Body = make([]byte, MaxMessageBytes)
	if err := s.Publish(context.Background(), []sinks.Message{big})[0]; !sinks.IsPermanent(err) || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("a record over the size limit: %v", err)
	}
}

// publishOne publishes m alone and returns its outcome.
func publishOne(s *Sink, m sinks.Message) error {
	return s.Publish(context.Background(), []sinks.Message{m})[0]
}

// readBack waits up to five seconds for the record of message m and
// checks that its key and value are m's.
func readBack(t *testing.T, r *testkafka.Reader, m sinks.Message) {
	t.Helper()
	testkit.Eventually(t, "message "+m.ID+" is read back", 5*time.Second, func() error {
		for _, rec := range r.Poll() {
			if rec.Headers["X-Message-Id"] != m.ID {
				continue
			}
			if string(rec.Key) != m.Key || !bytes.Equal(rec.Value, m.Body) {
				t.Fatalf("message %s read back with key %q and value %q, want %q and %q", m.ID, rec.Key, rec.Value, m.Key, m.Body)
			}
			return nil
		}
		return errors.New("not yet")
	})
}

// notWritten checks that none of msgs reached the topic.
func notWritten(t *testing.T, r *testkafka.Reader, msgs ...sinks.Message) {
	t.Helper()
	recs := r.Poll()
	if err := r.Err(); err != nil {
		t.Fatalf("reading the topic back failed, so its contents are unknown: %v", err)
	}
	for _, rec := range recs {
		for _, m := range msgs {
			if rec.Headers["X-Message-Id"] == m.ID {
				t.Errorf("message %s reached the topic although its publish failed", m.ID)
			}
		}
	}
}

// failsEach publishes msgs and checks that each of them is reported
// failed, on its own (well before the sink's timeout), with an error that
// can be retried and that contains one of want. It returns the errors.
func failsEach(t *testing.T, s *Sink, msgs []sinks.Message, want ...string) []error {
	t.Helper()
	start := time.Now()
	errs := s.Publish(context.Background(), msgs)
	took := time.Since(start)
	if len(errs) != len(msgs) {
		t.Fatalf("%d outcomes for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		switch {
		case err == nil:
			t.Errorf("message %d was reported delivered", i)
		case sinks.IsPermanent(err):
			t.Errorf("message %d: a permanent failure (%v); the setting can be fixed, so it must be retried", i, err)
		case !slices.ContainsFunc(want, func(w string) bool { return strings.Contains(err.Error(), w) }):
			t.Errorf("message %d: %v, want an error that says one of %q", i, err, want)
		}
	}
	if took >= s.cfg.Timeout {
		t.Errorf("the publish took %s, the whole timeout: the failure was not seen for what it is (%v)", took, errs[0])
	}
	t.Logf("reported: %v", errs[0])
	return errs
}

// TLS against brokers whose certificate was signed by a CA made in the
// test: tls.caFile with that CA delivers, with another CA or the system's
// roots the certificate is refused, insecureSkipVerify delivers without a
// CA file.
func TestTLS(t *testing.T) {
	t.Parallel()
	ca := testkafka.NewCA(t)
	c := testkafka.NewSecure(t, testkafka.Security{CA: ca})
	topic := testkafka.Unique("qbt-tls")
	c.CreateTopic(t, topic, 1)
	r := c.NewReader(topic, 1)
	sink := func(t *testing.T, tc TLS) *Sink {
		return newSink(t, Config{Brokers: c.Brokers, Topic: sinktest.Template(t, topic), TLS: tc, Timeout: 5 * time.Second})
	}

	t.Run("caFile", func(t *testing.T) {
		m := sinktest.Message(&sinktest.Target{}, "cust-tls", 1)
		if err := publishOne(sink(t, TLS{Enabled: true, CAFile: ca.File}), m); err != nil {
			t.Fatal(err)
		}
		readBack(t, r, m)
	})
	t.Run("insecureSkipVerify", func(t *testing.T) {
		m := sinktest.Message(&sinktest.Target{}, "cust-insecure", 2)
		if err := publishOne(sink(t, TLS{Enabled: true, InsecureSkipVerify: true}), m); err != nil {
			t.Fatal(err)
		}
		readBack(t, r, m)
	})
	t.Run("wrong CA", func(t *testing.T) {
		other := testkafka.NewCA(t)
		msgs := []sinks.Message{sinktest.Message(&sinktest.Target{}, "cust-wrong", 3), sinktest.Message(&sinktest.Target{}, "cust-wrong", 4)}
		for i, err := range failsEach(t, sink(t, TLS{Enabled: true, CAFile: other.File}), msgs, "certificate signed by unknown authority") {
			var ve *tls.CertificateVerificationError
			if !errors.As(err, &ve) {
				t.Errorf("message %d: %v is not a certificate verification error", i, err)
			}
		}
		notWritten(t, r, msgs...)
	})
	t.Run("system roots", func(t *testing.T) {
		m := sinktest.Message(&sinktest.Target{}, "cust-roots", 5)
		failsEach(t, sink(t, TLS{Enabled: true}), []sinks.Message{m}, "certificate")
		notWritten(t, r, m)
	})
	t.Run("missing caFile", func(t *testing.T) {
		_, err := New(Config{Brokers: c.Brokers, Topic: sinktest.Template(t, topic), TLS: TLS{Enabled: true, CAFile: filepath.Join(t.TempDir(), "none.pem")}})
		var ce *sinks.ConfigError
		if !errors.As(err, &ce) || ce.Key != "tls.caFile" {
			t.Errorf("a missing CA file: %v, want a configuration error on tls.caFile", err)
		}
	})
}

// SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 against brokers that require
// a login: the right password delivers; a wrong one is reported as a
// refused login for each message, retryable (credentials can be fixed),
// without the password, and well within the timeout.
func TestSASL(t *testing.T) {
	t.Parallel()
	users := []testkafka.User{
		{Mechanism: "PLAIN", Username: "plain-user", Password: "p1"},
		{Mechanism: "SCRAM-SHA-256", Username: "scram256", Password: "p2"},
		{Mechanism: "SCRAM-SHA-512", Username: "scram512", Password: "p3"},
	}
	c := testkafka.NewSecure(t, testkafka.Security{Users: users})
	topic := testkafka.Unique("qbt-sasl")
	c.CreateTopic(t, topic, 1)
	r := c.NewReader(topic, 1)
	for _, u := range users {
		t.Run(u.Mechanism, func(t *testing.T) {
			creds := SASL{Mechanism: u.Mechanism, Username: u.Username, Password: u.Password}
			m := sinktest.Message(&sinktest.Target{}, "cust-"+u.Username, 1)
			s := newSink(t, Config{Brokers: c.Brokers, Topic: sinktest.Template(t, topic), SASL: creds, Timeout: 5 * time.Second})
			if err := publishOne(s, m); err != nil {
				t.Fatal(err)
			}
			readBack(t, r, m)

			creds.Password = "wrong-password"
			bad := newSink(t, Config{Brokers: c.Brokers, Topic: sinktest.Template(t, topic), SASL: creds, Timeout: 5 * time.Second})
			msgs := []sinks.Message{sinktest.Message(&sinktest.Target{}, "cust-bad", 2), sinktest.Message(&sinktest.Target{}, "cust-bad", 3)}
			// A broker answers a refused login with SASL_AUTHENTICATION_FAILED
			// or by closing the connection (kfake does the latter); the sink
			// names the login either way.
			for _, err := range failsEach(t, bad, msgs, "SASL Authentication Failed", "refuses the SASL login") {
				if err != nil && strings.Contains(err.Error(), creds.Password) {
					t.Errorf("the error shows the password: %v", err)
				}
			}
			notWritten(t, r, msgs...)
		})
	}
}

// TLS and SASL together: a SCRAM login inside a connection verified with
// tls.caFile.
func TestTLSWithSASL(t *testing.T) {
	t.Parallel()
	ca := testkafka.NewCA(t)
	u := testkafka.User{Mechanism: "SCRAM-SHA-512", Username: "both", Password: "secret"}
	c := testkafka.NewSecure(t, testkafka.Security{CA: ca, Users: []testkafka.User{u}})
	topic := testkafka.Unique("qbt-tls-sasl")
	c.CreateTopic(t, topic, 1)
	s := newSink(t, Config{Brokers: c.Brokers, Topic: sinktest.Template(t, topic), Timeout: 5 * time.Second,
		TLS: TLS{Enabled: true, CAFile: ca.File}, SASL: SASL{Mechanism: u.Mechanism, Username: u.Username, Password: u.Password}})
	m := sinktest.Message(&sinktest.Target{}, "cust-both", 1)
	if err := publishOne(s, m); err != nil {
		t.Fatal(err)
	}
	readBack(t, c.NewReader(topic, 1), m)
}

// SASL with the right password against brokers that expect TLS, with
// tls.enabled forgotten: the broker closes the plain connection, and the
// error points at tls.enabled as well as at the login.
func TestSASLWithoutTheTLSTheBrokersExpect(t *testing.T) {
	t.Parallel()
	ca := testkafka.NewCA(t)
	u := testkafka.User{Mechanism: "SCRAM-SHA-256", Username: "tlsonly", Password: "secret"}
	c := testkafka.NewSecure(t, testkafka.Security{CA: ca, Users: []testkafka.User{u}})
	s := newSink(t, Config{Brokers: c.Brokers, Topic: sinktest.Template(t, testkafka.Unique("qbt-notls")), Timeout: 5 * time.Second,
		SASL: SASL{Mechanism: u.Mechanism, Username: u.Username, Password: u.Password}})
	failsEach(t, s, []sinks.Message{sinktest.Message(&sinktest.Target{}, "cust-notls", 1)}, "tls.enabled")
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Topic: sinktest.Template(t, "t")}, "brokers"},
		{Config{Brokers: []string{"nohost"}, Topic: sinktest.Template(t, "t")}, "host:port"},
		{Config{Brokers: []string{"h:1"}, Topic: sinktest.Template(t, "t"), Acks: "two"}, "acks"},
		{Config{Brokers: []string{"h:1"}, Topic: sinktest.Template(t, "t"), Compression: "brotli"}, "compression"},
		{Config{Brokers: []string{"h:1"}, Topic: sinktest.Template(t, "t"), Partitioner: "crc32"}, "partitioner"},
		{Config{Brokers: []string{"h:1"}, Topic: sinktest.Template(t, "t"), SASL: SASL{Mechanism: "GSSAPI"}}, "sasl.mechanism"},
		{Config{Brokers: []string{"h:1"}, Topic: sinktest.Template(t, "t"), TLS: TLS{CAFile: "x.pem"}}, "tls.enabled"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error about %s", tc.cfg, err, tc.want)
		}
	}
}

// BenchmarkPublish: 100,000 records over 1,000 keys into a 6-partition
// topic of an in-process kfake (on the same cores), acks=all, runs of up to
// 10.
func BenchmarkPublish(b *testing.B) {
	c := testkafka.New(b)
	c.CreateTopic(b, "bench", 6)
	s := newSink(b, Config{Brokers: c.Brokers, Topic: sinktest.Template(b, "bench")})
	sinktest.Throughput(b, &sinktest.Target{Sink: s}, 1000, 100, 10)
}

// BenchmarkPublishTopicsTakeTurns: as BenchmarkPublish, with three topics
// taking turns within each key, so that the Kafka topic changes from one
// record of a key to the next (the bench's kafka scenario).
func BenchmarkPublishTopicsTakeTurns(b *testing.B) {
	c := testkafka.New(b)
	topics := []string{"order.created", "order.paid", "order.shipped"}
	for _, t := range topics {
		c.CreateTopic(b, "bench."+t, 6)
	}
	s := newSink(b, Config{Brokers: c.Brokers, Topic: sinktest.Template(b, "bench.{{ topic }}")})
	sinktest.Throughput(b, &sinktest.Target{Sink: s}, 1000, 50, 10, topics...)
}
