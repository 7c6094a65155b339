package actors

import (
	"github.com/asynkron/protoactor-go/actor"
)

// sinkSupervisor is one-for-one over one sink actor per destination.
type sinkSupervisor struct{ e *Engine }

func (s *sinkSupervisor) Receive(c actor.Context) {
	if _, ok := c.Message().(*actor.Started); ok {
		for name, h := range s.e.sinks {
			f := s.e.opts.Destinations[name]
			c.SpawnPrefix(actor.PropsFromProducer(func() actor.Actor { return &sinkActor{e: s.e, h: h, factory: f} },
				actor.WithMailbox(mailbox(s.e.opts.Mailboxes.Sink))), "sink-"+name)
		}
	}
}
