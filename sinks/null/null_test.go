package null

import (
	"testing"

	"github.com/queuebox/queuebox/sinks/sinktest"
)

// The null destination keeps nothing, so the cases that look at what arrived
// do not apply; what remains (one result per message, a cancelled call is
// not a delivery) holds for it as for every sink.
func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		Open: func(t *testing.T, _ bool) *sinktest.Target { return &sinktest.Target{Sink: New()} },
	})
}
