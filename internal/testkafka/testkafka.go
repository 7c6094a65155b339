// Package testkafka gives tests a Kafka cluster that speaks the real wire
// protocol: franz-go's kfake, in-process, on loopback ports, started in
// milliseconds; or, for the tests of the queuebox binary, kfake as a
// process of its own (NewProcess, the command in ./kfake), which a test
// stops and starts for real. $QUEUEBOX_TEST_KAFKA_BROKERS (host:port,host:port) points
// the same tests at an external cluster instead, except the tests of TLS
// and SASL (NewSecure), whose cluster's security is theirs to set.
//
// kfake keeps one copy of each partition: it does not replicate, so a test
// with acks=all proves that the sink asks for it, not what replication
// would do.
package testkafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/queuebox/queuebox/internal/testkit"
)

// Cluster is a running cluster.
type Cluster struct {
	Brokers []string

	mu    sync.Mutex
	fake  *kfake.Cluster
	opts  []kfake.Opt
	ports []int
	// transport, set for a secured cluster (NewSecure), is how the
	// helpers below connect to it.
	transport *kafkago.Transport
	// proc, set by NewProcess, is the kfake command's process.
	proc *process
}

// New starts a cluster of three brokers for the test (or attaches to the
// external one), stopped when the test ends. opts go to kfake.
func New(t testing.TB, opts ...kfake.Opt) *Cluster {
	t.Helper()
	if ext := os.Getenv("QUEUEBOX_TEST_KAFKA_BROKERS"); ext != "" && len(opts) == 0 {
		return &Cluster{Brokers: strings.Split(ext, ",")}
	}
	c, err := start(append([]kfake.Opt{kfake.NumBrokers(3)}, opts...))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// NewRestartable starts an in-process cluster that keeps its data in a
// folder, so that Stop and Start restart it on the same ports with its
// topics and records.
func NewRestartable(t testing.TB) *Cluster {
	t.Helper()
	c, err := start([]kfake.Opt{kfake.NumBrokers(1), kfake.DataDir(t.TempDir())})
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// NewFor starts the cluster of a conformance case: NewRestartable for the
// cases that restart it (faults), else New.
func NewFor(t testing.TB, faults bool) *Cluster {
	t.Helper()
	if faults {
		return NewRestartable(t)
	}
	return New(t)
}

func start(opts []kfake.Opt) (*Cluster, error) {
	f, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, err
	}
	c := &Cluster{fake: f, opts: opts, Brokers: f.ListenAddrs()}
	for _, a := range c.Brokers {
		var port int
		if _, err := fmt.Sscanf(a[strings.LastIndex(a, ":")+1:], "%d", &port); err != nil {
			f.Close()
			return nil, err
		}
		c.ports = append(c.ports, port)
	}
	return c, nil
}

// Close stops an in-process cluster, or kills the process of NewProcess.
func (c *Cluster) Close() {
	if c.proc != nil {
		c.proc.kill()
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fake != nil {
		c.fake.Close()
		c.fake = nil
	}
}

// Stop stops the cluster; Start brings it back. A process (NewProcess)
// gets SIGTERM, and Stop waits for it to exit cleanly.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	if c.proc != nil {
		if err := c.proc.stop(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if c.opts == nil {
		t.Fatal("an external cluster cannot be stopped by the tests")
	}
	c.Close()
}

// Start starts the stopped cluster again on its ports, with its data.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	if c.proc != nil {
		if c.proc.running() {
			return
		}
		if err := c.proc.restart(); err != nil {
			t.Fatalf("kfake did not start again on %v: %v", c.Brokers, err)
		}
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fake != nil {
		return
	}
	// The old sockets may linger a moment: try until the ports are free.
	err := testkit.Poll(5*time.Second, func() error {
		var err error
		c.fake, err = kfake.NewCluster(append(c.opts, kfake.Ports(c.ports...))...)
		return err
	})
	if err != nil {
		t.Fatalf("kfake did not start again on %v: %v", c.ports, err)
	}
}

// Fake returns the in-process cluster, for tests that look at or steer
// kfake itself; against an external cluster or a process they are
// skipped.
func (c *Cluster) Fake(t testing.TB) *kfake.Cluster {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fake == nil {
		if c.proc != nil {
			t.Skip("this test steers the in-process kfake; this cluster is a process (NewProcess)")
		}
		t.Skip("this test steers the in-process kfake; QUEUEBOX_TEST_KAFKA_BROKERS points elsewhere")
	}
	return c.fake
}

// CreateTopic creates a topic with n partitions.
func (c *Cluster) CreateTopic(t testing.TB, topic string, partitions int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := &kafkago.Client{Addr: kafkago.TCP(c.Brokers...), Transport: c.Transport()}
	res, err := cl.CreateTopics(ctx, &kafkago.CreateTopicsRequest{Topics: []kafkago.TopicConfig{{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}}})
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	if err := res.Errors[topic]; err != nil && !errors.Is(err, kafkago.TopicAlreadyExists) {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

var seq struct {
	sync.Mutex
	n int
}

// Unique returns a topic name no other test of this run uses.
func Unique(prefix string) string {
	seq.Lock()
	defer seq.Unlock()
	seq.n++
	return fmt.Sprintf("%s-%d-%d-%d", prefix, os.Getpid(), time.Now().UnixNano()%1e6, seq.n)
}

// Record is one record as a consumer reads it.
type Record struct {
	Partition int
	Offset    int64
	Key       []byte // nil when the record has no key
	Value     []byte
	Headers   map[string]string
}

// Reader reads every partition of a topic from the start.
type Reader struct {
	c          *Cluster
	topic      string
	partitions int
	mu         sync.Mutex
	next       []int64
	got        []Record
	err        error // of the last Poll's last fetch
}

// NewReader reads topic, which has the given number of partitions.
func (c *Cluster) NewReader(topic string, partitions int) *Reader {
	return &Reader{c: c, topic: topic, partitions: partitions, next: make([]int64, partitions)}
}

// Poll fetches what arrived since the last poll and returns everything read
// so far: each partition in offset order, partition after partition. A
// failed fetch (a cluster that is away) returns what was read before.
func (r *Reader) Poll() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	cl := &kafkago.Client{Addr: kafkago.TCP(r.c.Brokers...), Timeout: 5 * time.Second, Transport: r.c.Transport()}
	r.err = nil
	for p := range r.partitions {
		for {
			n, err := r.fetch(cl, p)
			if err != nil {
				r.err = err
			}
			if err != nil || n == 0 {
				break
			}
		}
	}
	out := append([]Record(nil), r.got...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// Err is the error of the last Poll, if a fetch failed: a Poll that
// found nothing proves nothing then.
func (r *Reader) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *Reader) fetch(cl *kafkago.Client, p int) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := cl.Fetch(ctx, &kafkago.FetchRequest{Topic: r.topic, Partition: p, Offset: r.next[p], MinBytes: 1, MaxBytes: 8 << 20, MaxWait: 10 * time.Millisecond})
	if err != nil {
		return 0, err
	}
	if res.Error != nil {
		return 0, res.Error
	}
	n := 0
	for {
		rec, err := res.Records.ReadRecord()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if rec.Offset < r.next[p] {
			continue
		}
		out := Record{Partition: p, Offset: rec.Offset, Headers: map[string]string{}}
		if rec.Key != nil {
			out.Key, _ = io.ReadAll(rec.Key)
		}
		if rec.Value != nil {
			out.Value, _ = io.ReadAll(rec.Value)
		}
		for _, h := range rec.Headers {
			out.Headers[h.Key] = string(h.Value)
		}
		r.got = append(r.got, out)
		r.next[p] = rec.Offset + 1
		n++
	}
}
