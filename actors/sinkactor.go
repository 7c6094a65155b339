package actors

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
)

// sinkActor owns one destination's sink: it builds it when it is missing
// (after a crash the supervisor restarts the actor with backoff, and the new
// incarnation rebuilds), and closes it when it stops. Deliveries use the sink
// through its handle, never through this actor's mailbox, so a slow
// destination never blocks a mailbox.
type sinkActor struct {
	e       *Engine
	h       *sinkHandle
	factory SinkFactory
}

type rebuildSink struct{ reason error }

func (s *sinkActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		if s.h.get() == nil {
			s.rebuild(nil)
		}
	case *rebuildSink:
		s.rebuild(m.reason)
	}
}

func (s *sinkActor) rebuild(reason error) {
	if old := s.h.get(); old != nil {
		_ = old.Close()
	}
	snk, err := s.factory()
	if err != nil {
		// A panic hands the actor to its supervisor, which restarts it
		// with backoff; meanwhile deliveries to it fail and are retried.
		s.h.set(nil)
		panic(fmt.Sprintf("destination %s could not be built: %v", s.h.name, err))
	}
	s.h.set(snk)
	if reason != nil {
		s.e.log.Info("destination reconnected", "destination", s.h.name, "after", reason)
	}
}
