package middleware

import (
	"context"
	"testing"

	"github.com/queuebox/queuebox/sinks"
)

type plain struct{ closed bool }

func (p *plain) Publish(_ context.Context, msgs []sinks.Message) []error {
	return make([]error, len(msgs))
}
func (p *plain) Close() error { p.closed = true; return nil }

type batching struct{ plain }

func (*batching) MaxOrderedBatch() int { return 42 }

func TestWrapKeepsOrderedBatching(t *testing.T) {
	var seen []string
	pass := func(ctx context.Context, msgs []sinks.Message, next sinks.Sink) []error {
		for _, m := range msgs {
			seen = append(seen, m.ID)
		}
		return next.Publish(ctx, msgs)
	}
	b := &batching{}
	w := Wrap(Wrap(b, pass), pass)
	ob, ok := w.(sinks.OrderedBatcher)
	if !ok || ob.MaxOrderedBatch() != 42 {
		t.Fatalf("a wrapped OrderedBatcher of 42 is %T (OrderedBatcher %v)", w, ok)
	}
	if errs := w.Publish(context.Background(), []sinks.Message{{ID: "a"}, {ID: "b"}}); len(errs) != 2 {
		t.Errorf("%d results for 2 messages", len(errs))
	}
	if len(seen) != 4 {
		t.Errorf("the two decorators saw %v, want each message twice", seen)
	}
	if err := w.Close(); err != nil || !b.closed {
		t.Errorf("Close: %v, inner closed %v", err, b.closed)
	}
	p := &plain{}
	if _, ok := Wrap(p, pass).(sinks.OrderedBatcher); ok {
		t.Error("a wrapped sink that is no OrderedBatcher became one")
	}
}
