// Package middleware builds sinks that wrap another sink: a decorator that
// changes the messages on their way in (CloudEvents) or watches each call
// (tracing) and leaves the sending to the sink it wraps.
//
// A wrapper must look like the sink it wraps to the engine: a key actor
// hands a run of one key to a sink only when the sink says it keeps order
// within a call (sinks.OrderedBatcher). Wrap keeps that promise for every
// decorator, so that wrapping a Kafka sink does not turn it into a sink of
// one message per call.
package middleware

import (
	"context"

	"github.com/queuebox/queuebox/sinks"
)

// Publish is what a decorator does with one call: usually change msgs, call
// next with them, and look at the results.
type Publish func(ctx context.Context, msgs []sinks.Message, next sinks.Sink) []error

// Wrap returns a sink whose Publish is publish (with inner as next), whose
// Close closes inner, and which is a sinks.OrderedBatcher with inner's batch
// size when inner is one.
func Wrap(inner sinks.Sink, publish Publish) sinks.Sink {
	w := &wrapper{inner: inner, publish: publish}
	if ob, ok := inner.(sinks.OrderedBatcher); ok {
		return &orderedWrapper{wrapper: w, max: ob.MaxOrderedBatch()}
	}
	return w
}

type wrapper struct {
	inner   sinks.Sink
	publish Publish
}

func (w *wrapper) Publish(ctx context.Context, msgs []sinks.Message) []error {
	return w.publish(ctx, msgs, w.inner)
}

func (w *wrapper) Close() error { return w.inner.Close() }

type orderedWrapper struct {
	*wrapper
	max int
}

func (w *orderedWrapper) MaxOrderedBatch() int { return w.max }
