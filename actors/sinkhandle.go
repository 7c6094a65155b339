package actors

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuebox/queuebox/sinks"
)

// sinkHandle is a destination's current sink. The sink actor sets it when
// it builds the sink; deliveries read it without locks.
type sinkHandle struct {
	name string
	cur  atomic.Pointer[sinkBox]
	// health: down is set while the destination's deliveries fail (for the
	// log); changed is when (since clockStart) that state last changed.
	health struct {
		sync.Mutex
		down    bool
		changed time.Duration
	}
}

type sinkBox struct{ s sinks.Sink }

func (h *sinkHandle) set(s sinks.Sink) { h.cur.Store(&sinkBox{s}) }

func (h *sinkHandle) get() sinks.Sink {
	if b := h.cur.Load(); b != nil {
		return b.s
	}
	return nil
}

// maxBatch is how many rows may go in one Publish: the sink's ordered batch
// when it keeps order within one, else 1.
func (h *sinkHandle) maxBatch() int {
	if b, ok := h.get().(sinks.OrderedBatcher); ok {
		return max(1, b.MaxOrderedBatch())
	}
	return 1
}

// noteHealth logs a destination's change between working and failing: one
// line when deliveries start failing, one when they succeed again. A failure
// that is the row's own fault (a permanent error) says nothing about the
// destination, and neither does a cancelled delivery. Publishes overlap, and
// one that began earlier can reach the destination later (a new connection,
// a slow dial), so an outcome changes the state only if its Publish began
// after the last change was seen: a failure of a Publish sent before the
// recovery was noticed is old news, and so is a success sent before the
// outage was. began and ended are since clockStart.
func (h *sinkHandle) noteHealth(errs []error, began, ended time.Duration, log *slog.Logger) {
	var failure error
	ok := false
	for _, err := range errs {
		switch {
		case err == nil:
			ok = true
		case sinks.IsPermanent(err) || errors.Is(err, context.Canceled):
		default:
			failure = err
		}
	}
	if failure == nil && !ok {
		return
	}
	hs := &h.health
	hs.Lock()
	defer hs.Unlock()
	failing := failure != nil && !ok
	if failing == hs.down || began < hs.changed {
		return
	}
	hs.down, hs.changed = failing, max(hs.changed, ended)
	if failing {
		log.Warn("destination failing; its deliveries are retried with backoff", "destination", h.name, "error", failure)
		return
	}
	log.Info("destination delivering again", "destination", h.name)
}

// clockStart is the origin of the Publish times that noteHealth compares
// (monotonic).
var clockStart = time.Now()

// closeSinks closes every sink that was built.
func closeSinks(handles map[string]*sinkHandle) {
	for _, h := range handles {
		if s := h.get(); s != nil {
			_ = s.Close()
		}
	}
}
