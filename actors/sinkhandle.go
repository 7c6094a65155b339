package actors

import (
	"sync/atomic"

	"github.com/queuebox/queuebox/sinks"
)

// sinkHandle is a destination's current sink. The sink actor swaps it when
// it rebuilds the sink; deliveries read it without locks.
type sinkHandle struct {
	name string
	cur  atomic.Pointer[sinkBox]
	// down is set while the destination's deliveries fail (for the log).
	down atomic.Bool
}

type sinkBox struct{ s sinks.Sink }

func (h *sinkHandle) set(s sinks.Sink) {
	if s == nil {
		h.cur.Store(nil)
		return
	}
	h.cur.Store(&sinkBox{s})
}

func (h *sinkHandle) get() sinks.Sink {
	if b := h.cur.Load(); b != nil {
		return b.s
	}
	return nil
}

// maxBatch is how many rows of one key may go in one Publish.
func (h *sinkHandle) maxBatch() int {
	if b, ok := h.get().(sinks.OrderedBatcher); ok {
		return max(1, b.MaxOrderedBatch())
	}
	return 1
}
