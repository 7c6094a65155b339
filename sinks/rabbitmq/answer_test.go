package rabbitmq

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testrabbit"
	"github.com/queuebox/queuebox/sinks"
	"github.com/queuebox/queuebox/sinks/sinktest"
)

// With a collector in the context, each confirmed message's answer says
// that the broker confirmed it, with its delivery tag.
func TestConfirmsAreReportedWhenAsked(t *testing.T) {
	url := testrabbit.URL(t)
	q := testrabbit.NewQueue(t, url, "r1")
	s := newSink(t, Config{URL: url, Exchange: sinktest.Template(t, q.Exchange), RoutingKey: sinktest.Template(t, "r1"), Mandatory: true, Timeout: 5 * time.Second})
	msgs := []sinks.Message{sinktest.Message(&sinktest.Target{}, "k", 0), sinktest.Message(&sinktest.Target{}, "k", 1)}
	ans := sinks.NewAnswers(msgs, 100)
	for i, err := range s.Publish(sinks.WithAnswers(context.Background(), ans), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	for i := range msgs {
		if a := ans.Of(i); !strings.HasPrefix(a.Status, "confirmed by the broker (delivery tag ") {
			t.Errorf("message %d: answer %+v", i, a)
		}
	}
	if ans.Of(0).Status == ans.Of(1).Status {
		t.Errorf("two messages with one delivery tag: %q", ans.Of(0).Status)
	}
}
