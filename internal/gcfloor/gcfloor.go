// Package gcfloor spaces the garbage collector's cycles out on a small heap.
//
// The Go collector starts a cycle when the heap has grown by GOGC percent
// (100) over what the last cycle left live. A relay's live heap is small
// (ten megabytes or so: the rows in flight and the libraries' own state),
// so at a drain's allocation rate it collected several times a second, and
// each cycle marks that whole live heap again: on a 2-core machine about a
// third of a relay's CPU went to the collector, more with several replicas
// on one host, each paying for its own live heap. Start lets the heap grow
// by at least a fixed headroom between cycles, and leaves GOGC's rule alone
// once the live heap is large enough for it to give more: the extra memory
// is about the headroom (the percent also applies to goroutine stacks and
// globals, a few megabytes here), however many rows are in flight.
package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Headroom is the growth that Start allows between cycles at least.
const Headroom = 32 << 20

// maxPercent bounds the percent set on a nearly empty heap.
const maxPercent = 1000

// Start adjusts the collector after every cycle so that the next one comes
// when the heap has grown by headroom bytes over what is live, or by the
// percent it had (GOGC, 100 by default), whichever is more. It does
// nothing when the GOGC environment variable is set: that is the
// operator's choice. The returned function stops the adjustment and puts
// the percent back.
func Start(headroom uint64) (stop func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	t := &tuner{headroom: headroom, base: base, current: base}
	t.adjust()
	t.arm()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if !t.stopped {
			t.stopped = true
			debug.SetGCPercent(base)
		}
	}
}

// tuner's fields are guarded by mu: the finalizer goroutine adjusts, and
// stop may run meanwhile.
type tuner struct {
	mu            sync.Mutex
	headroom      uint64
	base, current int
	stopped       bool
	sample        [1]metrics.Sample
}

// sentinel is garbage from the moment it is made; its finalizer runs once
// per cycle (after the cycle that found it unreachable) and makes the next.
// It is larger than the tiny allocator's blocks, which would batch it with
// other objects and delay its finalizer.
type sentinel struct{ _ [32]byte }

func (t *tuner) arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		if t.adjust() {
			t.arm()
		}
	})
}

// adjust sets the percent for the live heap of the cycle that just ended.
// Changes under a tenth are left out: each set recomputes the pacer. It
// reports false once stopped.
func (t *tuner) adjust() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	t.sample[0].Name = "/gc/heap/live:bytes"
	metrics.Read(t.sample[:])
	if t.sample[0].Value.Kind() != metrics.KindUint64 {
		return true
	}
	p := percentFor(t.sample[0].Value.Uint64(), t.headroom, t.base)
	if d := p - t.current; d*10 > t.current || -d*10 > t.current {
		t.current = p
		debug.SetGCPercent(p)
	}
	return true
}

// percentFor is the percent that grows a live heap by headroom, never
// below base nor above maxPercent.
func percentFor(live, headroom uint64, base int) int {
	if base < 0 { // GC off: leave it off
		return base
	}
	if live == 0 {
		return max(base, maxPercent)
	}
	p := int((headroom*100 + live - 1) / live)
	return max(base, min(p, maxPercent))
}
