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
	// log); changed is when (since clockStart) that state last changed, and
	// okBegan and failBegan when the latest Publish that succeeded, and that
	// failed, began.
	health struct {
		sync.Mutex
		down                        bool
		changed, okBegan, failBegan time.Duration
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
// a slow dial, a timeout), so an outcome is old news, and changes nothing,
// when its Publish began before the last change was seen, or before the
// latest Publish with the opposite outcome began. began and ended are since
// clockStart.
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
	newer := hs.okBegan // the latest opposite outcome's Publish
	if failing {
		hs.failBegan = max(hs.failBegan, began)
	} else {
		hs.okBegan = max(hs.okBegan, began)
		newer = hs.failBegan
	}
	if failing == hs.down || began < hs.changed || began < newer {
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
