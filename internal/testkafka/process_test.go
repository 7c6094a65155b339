package testkafka

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/queuebox/queuebox/internal/testkit"
)

func TestMain(m *testing.M) {
	code := m.Run()
	RemoveCommand()
	os.Exit(code)
}

// TestProcessRestart runs the kfake command: a seeded topic, a record
// produced and read back with kafka-go; SIGTERM closes the ports, and a
// start on the same addresses serves the old record and a new one.
func TestProcessRestart(t *testing.T) {
	if os.Getenv("QUEUEBOX_TEST_KAFKA_BROKERS") != "" {
		t.Skip("restarts its own kfake process")
	}
	topic := Unique("qbt-proc")
	c := NewProcess(t, ProcessOptions{Brokers: 2, Partitions: 2, Topics: []string{topic}})
	if len(c.Brokers) != 2 {
		t.Fatalf("brokers: %v", c.Brokers)
	}
	addrs := slices.Clone(c.Brokers)
	if n := partitions(t, c, topic); n != 2 {
		t.Fatalf("seeded topic %s has %d partitions, want 2", topic, n)
	}
	produce(t, c, topic, "one")
	r := c.NewReader(topic, 2)
	readValues(t, r, "one")

	c.Stop(t)
	for _, a := range addrs {
		if conn, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			conn.Close()
			t.Fatalf("%s still accepts connections after Stop", a)
		}
	}
	c.Stop(t) // stopping a stopped cluster is no fault

	c.Start(t)
	if !slices.Equal(c.Brokers, addrs) {
		t.Fatalf("brokers after Start: %v, want %v", c.Brokers, addrs)
	}
	produce(t, c, topic, "two")
	readValues(t, r, "one", "two")
}

func produce(t *testing.T, c *Cluster, topic, value string) {
	t.Helper()
	tr := &kafkago.Transport{DialTimeout: 5 * time.Second}
	defer tr.CloseIdleConnections()
	w := &kafkago.Writer{Addr: kafkago.TCP(c.Brokers...), Topic: topic, Transport: tr, Balancer: &kafkago.Hash{}, RequiredAcks: kafkago.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, kafkago.Message{Key: []byte("k"), Value: []byte(value)}); err != nil {
		t.Fatalf("produce %s: %v", value, err)
	}
}

// readValues polls r until it has read exactly the values, in order.
func readValues(t *testing.T, r *Reader, want ...string) {
	t.Helper()
	var got []string
	_ = testkit.Poll(30*time.Second, func() error {
		got = got[:0]
		for _, rec := range r.Poll() {
			got = append(got, string(rec.Value))
		}
		if len(got) < len(want) {
			return fmt.Errorf("read %d of %d", len(got), len(want))
		}
		return nil
	})
	if !slices.Equal(got, want) {
		t.Fatalf("read %q, want %q (last error: %v)", got, want, r.Err())
	}
}

func partitions(t *testing.T, c *Cluster, topic string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := &kafkago.Client{Addr: kafkago.TCP(c.Brokers...), Transport: c.Transport()}
	res, err := cl.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range res.Topics {
		if tp.Name == topic && tp.Error == nil {
			return len(tp.Partitions)
		}
	}
	return 0
}
