package inbox

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// batcher stores the messages of concurrent HTTP requests together:
// requests that arrive while a statement runs wait for the next one and
// share it (group commit), so that each commit carries several messages
// when senders outnumber the database's connections, and the database
// spends less on statements. At most batchInFlight statements run at once
// (one gathers while the other commits); no goroutine lives longer than
// there are requests waiting.
type batcher struct {
	store dialects.Inbox
	mu    sync.Mutex
	// waiting are the requests not yet taken by a statement.
	waiting []*pending
	running int
	// statements and messages count what was stored, for the benchmark's
	// notes.
	statements, messages atomic.Int64
}

const (
	// batchInFlight is how many statements run at once.
	batchInFlight = 2
	// batchMax is the most messages one statement stores.
	batchMax = 256
	// batchTimeout bounds one statement, whatever its callers' contexts
	// (a caller that gives up does not cancel the others' insert).
	batchTimeout = 30 * time.Second
)

type pending struct {
	msg     dialects.InboxMessage
	receipt dialects.InboxReceipt
	err     error
	done    chan struct{}
}

// receive stores msg with whatever else is waiting and returns its
// receipt.
func (b *batcher) receive(ctx context.Context, msg dialects.InboxMessage) (dialects.InboxReceipt, error) {
	p := &pending{msg: msg, done: make(chan struct{})}
	b.mu.Lock()
	b.waiting = append(b.waiting, p)
	if b.running < batchInFlight {
		b.running++
		go b.flush()
	}
	b.mu.Unlock()
	select {
	case <-p.done:
		return p.receipt, p.err
	case <-ctx.Done():
		// The insert may still commit: a sender that tries again is
		// answered 200 with the same id.
		return dialects.InboxReceipt{}, ctx.Err()
	}
}

// flush runs statements until nothing waits.
func (b *batcher) flush() {
	for {
		b.mu.Lock()
		if len(b.waiting) == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		n := min(len(b.waiting), batchMax)
		batch := b.waiting[:n:n]
		b.waiting = append([]*pending(nil), b.waiting[n:]...)
		b.mu.Unlock()
		b.store1(batch)
	}
}

// store1 stores one batch in one statement. When the statement fails and
// the batch holds several messages, each is tried alone, so that one
// message the database refuses fails only its own request.
func (b *batcher) store1(batch []*pending) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	msgs := make([]dialects.InboxMessage, len(batch))
	for i, p := range batch {
		msgs[i] = p.msg
	}
	receipts, err := b.store.InboxReceive(ctx, msgs)
	b.statements.Add(1)
	b.messages.Add(int64(len(msgs)))
	if err != nil && len(batch) > 1 {
		for _, p := range batch {
			b.store1([]*pending{p})
		}
		return
	}
	for i, p := range batch {
		if err != nil {
			p.err = err
		} else {
			p.receipt = receipts[i]
		}
		close(p.done)
	}
}
