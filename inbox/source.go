package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/sinks/tracing"
)

// Broker is what every broker source's configuration holds besides its
// broker's own settings: how messages map, where they are stored, how many
// one transaction stores, and the log.
type Broker struct {
	Mapping *Mapping
	Storer  *Storer
	// MaxBatch is how many messages one transaction stores (default 100).
	MaxBatch int
	Log      *slog.Logger

	// AfterStore, when set (tests), runs after a batch committed in the
	// database and before the broker learns of it; an error ends the
	// consumer there, as a crash would: the batch stays unacknowledged.
	AfterStore func() error
}

// ErrStoppedByHook is what a batch returns when AfterStore ended it.
var ErrStoppedByHook = errors.New("stopped by a test hook")

// Check fills in the defaults; kind names the source in the error when a
// mapping or a storer is missing.
func (b *Broker) Check(kind string) error {
	if b.Mapping == nil || b.Storer == nil {
		return fmt.Errorf("%s source: a mapping and a storer are required", kind)
	}
	if b.MaxBatch <= 0 {
		b.MaxBatch = 100
	}
	if b.Log == nil {
		b.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}

// StoreBatch stores msgs as Storer.Store does, ends each message's receipt
// (receipts[i] is msgs[i]'s) with its outcome, then runs AfterStore. The
// caller acknowledges the batch to its broker only when it returns no
// error, and refuses those at the indexes of refused.
func (b *Broker) StoreBatch(ctx context.Context, msgs []dialects.InboxMessage, receipts []*tracing.Receipt) (refused []int, err error) {
	refused, err = b.Storer.Store(ctx, msgs)
	EndReceipts(receipts, refused, err)
	if err != nil {
		return nil, err
	}
	if b.AfterStore != nil {
		if err := b.AfterStore(); err != nil {
			return nil, ErrStoppedByHook
		}
	}
	return refused, nil
}
