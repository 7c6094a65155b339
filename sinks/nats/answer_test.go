package nats

import (
	"context"
	"testing"

	"github.com/queuebox/queuebox/internal/testnats"
	"github.com/queuebox/queuebox/sinks"
	"github.com/queuebox/queuebox/sinks/sinktest"
)

// With a collector in the context, a JetStream delivery reports the
// stream and sequence that stored each message, and a duplicate as one.
func TestJetStreamAcksAreReportedWhenAsked(t *testing.T) {
	t.Parallel()
	srv := testnats.Start(t)
	prefix := testnats.Unique("ans")
	srv.NewStream(t, prefix, prefix+".>")
	s := newSink(t, Config{URL: srv.URL, Subject: sinktest.Template(t, prefix+".{{ topic }}"), JetStream: true})
	msgs := []sinks.Message{sinktest.Message(&sinktest.Target{}, "k", 0), sinktest.Message(&sinktest.Target{}, "k", 1)}
	ans := sinks.NewAnswers(msgs, 100)
	for i, err := range s.Publish(sinks.WithAnswers(context.Background(), ans), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	for i, want := range []string{"stream " + prefix + " seq 1", "stream " + prefix + " seq 2"} {
		if a := ans.Of(i); a.Status != want {
			t.Errorf("message %d: answer %+v, want %q", i, a, want)
		}
	}
	again := sinks.NewAnswers(msgs[:1], 100)
	if err := s.Publish(sinks.WithAnswers(context.Background(), again), msgs[:1])[0]; err != nil {
		t.Fatal(err)
	}
	if a := again.Of(0); a.Status != "stream "+prefix+" seq 1 (duplicate)" {
		t.Errorf("a redelivery: %+v", a)
	}
}
