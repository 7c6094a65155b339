package actors

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
)

// janitor is the Janitor's loop: it returns expired leases to pending and
// deletes old rows in small batches.
func (e *Engine) janitor() {
	defer e.bg.Done()
	release := time.NewTicker(max(e.opts.Lease/3, 100*time.Millisecond))
	defer release.Stop()
	var purge <-chan time.Time
	if r := e.opts.Retention; r.Interval > 0 {
		t := time.NewTicker(r.Interval)
		defer t.Stop()
		purge = t.C
	}
	for {
		select {
		case <-e.bgCtx.Done():
			return
		case <-release.C:
			e.releaseExpired()
		case <-purge:
			e.purge()
		}
	}
}

// releaseExpired returns rows of dead or hung replicas to pending. It keeps
// this replica's own claims even when their lease passed (after a database
// outage): the replica still holds them and writes their outcomes when it
// can, and releasing them would only deliver them again.
func (e *Engine) releaseExpired() {
	res, err := e.system.Root.RequestFuture(e.leaseKeeper, &liveTokens{}, 10*time.Second).Result()
	if err != nil {
		return
	}
	keep, _ := res.([]uuid.UUID)
	for e.bgCtx.Err() == nil {
		ctx, cancel := context.WithTimeout(e.bgCtx, 30*time.Second)
		n, err := e.opts.Dialect.OutboxReleaseExpired(ctx, 1000, keep)
		cancel()
		if err != nil || n == 0 {
			return
		}
		e.log.Info("released rows whose leases had passed", "rows", n)
		e.send(e.claimer, &wake{})
		if n < 1000 {
			return
		}
	}
}

func (e *Engine) purge() {
	r := e.opts.Retention
	for _, p := range []struct {
		state dialects.State
		age   time.Duration
	}{{dialects.Delivered, r.Delivered}, {dialects.Dead, r.Dead}} {
		if p.age <= 0 {
			continue
		}
		total := 0
		for e.bgCtx.Err() == nil {
			ctx, cancel := context.WithTimeout(e.bgCtx, 30*time.Second)
			n, err := e.opts.Dialect.OutboxPurge(ctx, p.state, p.age, r.BatchSize)
			cancel()
			if err != nil {
				e.log.Warn("retention delete failed", "state", p.state, "error", err)
				break
			}
			total += n
			if n < r.BatchSize {
				break
			}
		}
		if total > 0 {
			e.log.Info("retention deleted rows", "state", p.state, "rows", total)
		}
	}
	e.pruneKeyLocks()
}

// pruneKeyLocks walks the producer-ordering lock table once, in batches, and
// deletes the entries of keys that have nothing pending or processing, so
// that the table holds about the active keys rather than every key ever
// written.
func (e *Engine) pruneKeyLocks() {
	batch := max(e.opts.Retention.BatchSize, 1)
	after, total := "", 0
	for e.bgCtx.Err() == nil {
		ctx, cancel := context.WithTimeout(e.bgCtx, 30*time.Second)
		n, next, err := e.opts.Dialect.KeyLocksPrune(ctx, after, batch)
		cancel()
		if err != nil {
			if !errors.Is(err, dialects.ErrNotSupported) {
				e.log.Warn("pruning key locks failed", "error", err)
			}
			return
		}
		total += n
		if next == "" {
			break
		}
		after = next
	}
	if total > 0 {
		e.log.Info("pruned idle key locks", "keys", total)
	}
}
