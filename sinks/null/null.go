// Package null is the null destination: it accepts every message at once and
// keeps nothing. For benchmarks, trials, and draining a topic on purpose.
package null

import (
	"context"

	"github.com/queuebox/queuebox/sinks"
)

// Sink accepts everything.
type Sink struct{}

// New returns a null sink.
func New() *Sink { return &Sink{} }

// Publish accepts every message, unless the call is already cancelled: a
// cancelled delivery is not a delivery, on this destination as on any other.
func (*Sink) Publish(ctx context.Context, msgs []sinks.Message) []error {
	if err := ctx.Err(); err != nil {
		return sinks.Errors(len(msgs), err)
	}
	return make([]error, len(msgs))
}

// Close does nothing.
func (*Sink) Close() error { return nil }

// MaxOrderedBatch lets a key actor hand over a whole run at once.
func (*Sink) MaxOrderedBatch() int { return 1000 }
