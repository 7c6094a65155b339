package destctl

import (
	"context"
	"errors"
	"github.com/queuebox/queuebox/internal/clock"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"
)

// flow is one destination's flow control on this replica: at most
// RatePerSecond rows a second (a token bucket, golang.org/x/time/rate, that
// holds up to Burst tokens and starts full), and at most MaxConcurrency
// Publish calls at once (a semaphore). Both hold across every key actor and
// the unordered pool, since they all deliver through the destination's
// handle; each replica has its own.
//
// A delivery waits for its permits in its publish goroutine, never in an
// actor: first a Publish slot, then a token per row, so that the rate is
// kept at the moment rows leave. Both the semaphore and the bucket serve
// their waiters in the order they came, so a row that waits gets its turn:
// rows queued behind it in a key actor, and rows the pool parks while the
// destination has its share of the pool's Publish calls, wait in the
// actor's memory and follow. Waiting rows hold the replica's credit
// (outbox.maxInFlight), so the flow lets at most half of it wait (room):
// a throttled destination cannot starve the others, and memory stays
// bounded by the credit. Only a delivery beyond that is deferred, until
// about when the flow can take it (deferral), so that a backlog deeper than
// half the credit is claimed about once per row, not over and over.
type Flow struct {
	clock       clock.Clock
	limiter     *rate.Limiter       // nil: no rate limit
	slots       *semaphore.Weighted // nil: no concurrency limit
	perSecond   float64
	burst       int
	concurrency int
	maxWaiting  int // half the replica's credit

	waiting atomic.Int64 // rows admitted whose Publish has not started
	// Queued counts the rows that wait behind those in the actors: in key
	// actors behind their head, and parked in the pool.
	Queued     atomic.Int64
	publishing atomic.Int64 // Publish calls that hold their permits
	waitedNs   atomic.Int64 // time spent waiting for permits, in total

	mu sync.Mutex
	// next is the slot clock of deferred rows: the next deferred row is
	// due then, and each one moves it on by one row's share of the pace.
	next time.Time
	// took follows how long a Publish takes (for the pace of a flow that
	// limits concurrency only).
	took time.Duration
	// held is cancelled when the destination is paused: deliveries that
	// wait for a permit stop waiting, and are deferred.
	held       context.Context
	cancelHeld context.CancelFunc
}

// Deferrals are at least MinDeferral (a row claimed again at once would
// only be deferred again) and at most maxDeferral.
const (
	MinDeferral = 500 * time.Millisecond
	maxDeferral = time.Hour
)

// NewFlow returns the flow control of a policy, nil when it limits nothing.
func NewFlow(p Policy, maxInFlight int, c clock.Clock) *Flow {
	if p.RatePerSecond <= 0 && p.MaxConcurrency <= 0 {
		return nil
	}
	f := &Flow{maxWaiting: max(1, maxInFlight/2), concurrency: p.MaxConcurrency, clock: c}
	if p.RatePerSecond > 0 {
		// Without a burst, a second's worth: the rate holds over any
		// second, and batches of up to that many rows can go at once.
		f.perSecond, f.burst = p.RatePerSecond, p.Burst
		if f.burst <= 0 {
			f.burst = max(1, int(math.Ceil(p.RatePerSecond)))
		}
		f.limiter = rate.NewLimiter(rate.Limit(p.RatePerSecond), f.burst)
	}
	if p.MaxConcurrency > 0 {
		f.slots = semaphore.NewWeighted(int64(p.MaxConcurrency))
	}
	f.held, f.cancelHeld = context.WithCancel(context.Background())
	return f
}

// batchLimit caps a batch of n rows at the bucket's size: a Publish takes
// a token per row at once.
func (f *Flow) BatchLimit(n int) int {
	if f.limiter != nil {
		return min(n, f.burst)
	}
	return n
}

// room is how many rows may wait for a permit at once: half the credit,
// never less than a batch. A smaller room would send rows that could wait
// for their turn in memory to the database instead, where they come back
// only when their reschedule is due and a claim finds them: behind their
// turn, with the destination idle meanwhile.
func (f *Flow) Room(maxBatch int) int { return max(f.maxWaiting, maxBatch) }

// holding is how many rows wait for a permit: in deliveries, and in the
// actors behind them (Queued).
func (f *Flow) Holding() int64 { return f.waiting.Load() + f.Queued.Load() }

// full reports whether as many rows wait as may, besides own (the rows the
// asking key actor holds already: its own rows do not keep it waiting).
func (f *Flow) Full(maxBatch, own int) bool { return int(f.Holding())-own >= f.Room(maxBatch) }

// enter counts n rows as waiting; acquire counts them out.
func (f *Flow) Enter(n int) { f.waiting.Add(int64(n)) }

// acquire waits for a Publish slot and n tokens, and counts the n rows out
// of the waiting ones. It returns early with an error when ctx ends (the
// claim was lost, the replica drains) or the destination is paused
// (ErrHeld). release gives the slot back when the Publish returns.
func (f *Flow) Acquire(ctx context.Context, n int) (release func(), err error) {
	defer f.waiting.Add(-int64(n))
	t0 := f.clock.Now()
	defer func() { f.waitedNs.Add(int64(clock.Since(f.clock, t0))) }()
	f.mu.Lock()
	held := f.held
	f.mu.Unlock()
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(held, func() { cancel(ErrHeld) })
	defer stop()
	if f.slots != nil {
		if err := f.slots.Acquire(wctx, 1); err != nil {
			return nil, context.Cause(wctx)
		}
	}
	if f.limiter != nil {
		if err := f.limiter.WaitN(wctx, n); err != nil {
			if f.slots != nil {
				f.slots.Release(1)
			}
			if c := context.Cause(wctx); c != nil {
				return nil, c
			}
			return nil, err
		}
	}
	f.publishing.Add(1)
	return func() {
		f.publishing.Add(-1)
		if f.slots != nil {
			f.slots.Release(1)
		}
	}, nil
}

// interrupt ends every wait for a permit: the destination was paused.
func (f *Flow) Interrupt() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancelHeld()
	f.held, f.cancelHeld = context.WithCancel(context.Background())
}

// noteTook follows how long Publish calls take.
func (f *Flow) NoteTook(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.took == 0 {
		f.took = d
	} else {
		f.took = (4*f.took + d) / 5
	}
}

// pace is how many rows a second the flow lets through: the rate, and for
// a concurrency limit, its slots' worth of batches per Publish duration.
// Until a Publish has been measured, a concurrency limit is taken to pass a
// round of batches a second, and only when there is no rate to go by: a
// guess that low would spread deferred rows far behind the rate.
func (f *Flow) Pace(maxBatch int) float64 {
	p := math.Inf(1)
	if f.limiter != nil {
		p = f.perSecond
	}
	if f.slots != nil && (f.took > 0 || f.limiter == nil) {
		took := max(f.took, time.Millisecond)
		if f.took == 0 {
			took = time.Second
		}
		p = min(p, float64(f.concurrency*maxBatch)/took.Seconds())
	}
	return p
}

// deferral is how long rows deferred because the flow is full wait: until
// the rows waiting now are through, and the rows deferred before them too
// (the slot clock), at the flow's pace. n is how many rows come back then
// (a key's run comes back with its head): the slot clock moves on by their
// share.
func (f *Flow) Deferral(now time.Time, n, maxBatch int) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	pace := f.Pace(maxBatch)
	perRow := time.Duration(float64(time.Second) / pace)
	if through := now.Add(time.Duration(f.Holding()) * perRow); f.next.Before(through) {
		f.next = through
	}
	d := f.next.Sub(now)
	f.next = f.next.Add(time.Duration(n) * perRow)
	return min(max(d, MinDeferral), maxDeferral)
}

// ErrHeld ends a wait for a permit: the destination was paused.
var ErrHeld = errors.New("the destination was paused")
