package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/queuebox/queuebox/actors/internal/destctl"
)

// sinkSupervisor is one-for-one over one sink actor per destination, and
// restarts a sink actor that crashed with exponential backoff (its own
// supervisor strategy, set where it is spawned).
type sinkSupervisor struct {
	handles   map[string]*destctl.Handle
	factories map[string]SinkFactory
	mailbox   actor.MailboxProducer
}

func (s *sinkSupervisor) Receive(c actor.Context) {
	if _, ok := c.Message().(*actor.Started); ok {
		for name, h := range s.handles {
			f := s.factories[name]
			c.SpawnPrefix(actor.PropsFromProducer(func() actor.Actor { return &sinkActor{h: h, factory: f} },
				actor.WithMailbox(s.mailbox)), "sink-"+name)
		}
	}
}
