package actors

import (
	"fmt"
	"github.com/queuebox/queuebox/actors/internal/destctl"

	"github.com/asynkron/protoactor-go/actor"
)

// sinkActor owns the building of one destination's sink: it builds the sink
// when it starts and the handle is empty. When building fails it panics, and
// its supervisor restarts it with backoff; the new incarnation tries again.
// Deliveries use the sink through its handle, never through this actor's
// mailbox, so a slow destination never blocks a mailbox. The engine closes
// the sinks when it stops.
type sinkActor struct {
	h       *destctl.Handle
	factory SinkFactory
}

func (s *sinkActor) Receive(c actor.Context) {
	if _, ok := c.Message().(*actor.Started); ok && s.h.Sink() == nil {
		s.build()
	}
}

func (s *sinkActor) build() {
	snk, err := s.factory()
	if err != nil {
		// A panic hands the actor to its supervisor, which restarts it
		// with backoff; meanwhile deliveries to it fail and are retried.
		panic(fmt.Sprintf("destination %s could not be built: %v", s.h.Name(), err))
	}
	s.h.Set(snk)
}
