package benchmarks_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/benchmarks"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testnats"
	"github.com/queuebox/queuebox/internal/testrabbit"
)

// A small run of the broker scenarios: each brings drain-keys, drains every
// row into its broker, measures the plain publisher too, compares both
// with drain-keys and with each other, and removes what it made on the
// broker.
func TestBrokerScenarios(t *testing.T) {
	amqpURL := testrabbit.URL(t)
	srv := testnats.Start(t)
	var table, progress bytes.Buffer
	results, err := benchmarks.Run(context.Background(), benchmarks.Options{
		DatabaseURL: testdb.Database(t), Scenarios: []string{"kafka", "nats", "rabbitmq"}, Rows: 600,
		AMQPURL: amqpURL, NATSURL: srv.URL, Out: &table, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	var lines []string
	for _, r := range results {
		lines = append(lines, r.Scenario+"/"+r.Variant)
	}
	want := "drain-keys/,rabbitmq/relay, 3 topics per key,rabbitmq/plain publisher (the ceiling)," +
		"nats/relay, 3 topics per key,nats/plain publisher (the ceiling)," +
		"kafka/relay, 3 topics per key,kafka/plain publisher (the ceiling)"
	if got := strings.Join(lines, ","); got != want {
		t.Fatalf("lines %s, want %s", got, want)
	}
	for _, r := range results[1:] {
		relay := strings.HasPrefix(r.Variant, "relay")
		switch {
		case r.RowsPerSec <= 0 || r.Failed != 0 || r.Rows != 600 || r.Keys != 1000:
			t.Errorf("%s %s: %.0f rows/s, %d failed, %d rows, %d keys", r.Scenario, r.Variant, r.RowsPerSec, r.Failed, r.Rows, r.Keys)
		case relay && (r.Ratio == nil || r.RatioToCeiling == nil):
			t.Errorf("%s: the relay's line lacks its ratios to drain-keys and to the ceiling", r.Scenario)
		case !relay && (r.Ratio != nil || r.RatioToCeiling != nil):
			t.Errorf("%s: the plain publisher's line has ratios", r.Scenario)
		case relay && !strings.Contains(r.Note, "the broker holds"):
			t.Errorf("%s: the note does not say what the broker holds: %q", r.Scenario, r.Note)
		}
	}
	if !strings.Contains(table.String(), "vs ceiling") {
		t.Errorf("the table has no vs ceiling column:\n%s", table.String())
	}
	// The stream is gone (the exchange, queue and topics go the same way).
	names, err := srv.Connect(t).Request("$JS.API.STREAM.NAMES", nil, 5*time.Second)
	if err != nil || strings.Contains(string(names.Data), "QB_BENCH_") {
		t.Errorf("a bench stream is left on the server (%v)", err)
	}
}

// A broker that does not answer stops the run before anything runs, with
// one sentence that names the address and the way to give another; an
// address that is not one is a usage error.
func TestBrokerThatDoesNotAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	for _, c := range []struct {
		name  string
		o     benchmarks.Options
		usage bool
		want  []string
	}{
		{"RabbitMQ", benchmarks.Options{Scenarios: []string{"rabbitmq"}, AMQPURL: "amqp://guest:guest@" + addr + "/"}, false,
			[]string{"RabbitMQ at " + addr + " cannot be reached", "--amqp-url or QUEUEBOX_BENCH_AMQP_URL"}},
		{"NATS", benchmarks.Options{Scenarios: []string{"nats"}, NATSURL: "nats://" + addr}, false,
			[]string{"NATS at " + addr + " cannot be reached", "--nats-url or QUEUEBOX_BENCH_NATS_URL"}},
		{"Kafka", benchmarks.Options{Scenarios: []string{"kafka"}, KafkaBrokers: []string{addr}}, false,
			[]string{"Kafka at " + addr + " cannot be reached", "--kafka-brokers or QUEUEBOX_BENCH_KAFKA_BROKERS"}},
		{"not an AMQP URL", benchmarks.Options{Scenarios: []string{"rabbitmq"}, AMQPURL: "http://localhost"}, true,
			[]string{"--amqp-url (or QUEUEBOX_BENCH_AMQP_URL) is not an AMQP URL"}},
		{"not host:port", benchmarks.Options{Scenarios: []string{"kafka"}, KafkaBrokers: []string{"kafka-1"}}, true,
			[]string{`"kafka-1" is not host:port`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var table, progress bytes.Buffer
			c.o.Out, c.o.Progress = &table, &progress
			_, err := benchmarks.Run(context.Background(), c.o)
			if err == nil || benchmarks.IsUsage(err) != c.usage {
				t.Fatalf("err = %v (usage error: %v), want usage error %v", err, benchmarks.IsUsage(err), c.usage)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "guest:guest") {
				t.Errorf("the error shows the URL's password: %v", err)
			}
			if table.Len() > 0 || strings.Contains(progress.String(), "throwaway") {
				t.Errorf("something ran: table %q, progress %q", table.String(), progress.String())
			}
		})
	}
}
