package kafka

import (
	"context"
	"testing"

	"github.com/queuebox/queuebox/internal/testkafka"
	"github.com/queuebox/queuebox/sinks"
	"github.com/queuebox/queuebox/sinks/sinktest"
)

// With a collector in the context, each record's topic, partition and
// offset come back as its answer; without one, nothing is collected.
func TestProduceResultsAreReportedWhenAsked(t *testing.T) {
	t.Parallel()
	c := testkafka.New(t)
	topic := testkafka.Unique("qbt-ans")
	c.CreateTopic(t, topic, 1)
	s := newSink(t, Config{Brokers: c.Brokers, Topic: sinktest.Template(t, topic)})
	msgs := []sinks.Message{sinktest.Message(&sinktest.Target{}, "k", 0), sinktest.Message(&sinktest.Target{}, "k", 1)}
	ans := sinks.NewAnswers(msgs, 100)
	for i, err := range s.Publish(sinks.WithAnswers(context.Background(), ans), msgs) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	for i, want := range []string{"topic " + topic + " partition 0 offset 0", "topic " + topic + " partition 0 offset 1"} {
		if a := ans.Of(i); a.Status != want {
			t.Errorf("record %d: answer %+v, want %q", i, a, want)
		}
	}
	if n := s.asked.Load(); n != 0 {
		t.Errorf("%d messages still registered after the call", n)
	}
	more := []sinks.Message{sinktest.Message(&sinktest.Target{}, "k", 2)}
	if err := s.Publish(context.Background(), more)[0]; err != nil {
		t.Fatal(err)
	}
}
