package inbox

import (
	"context"
	"errors"
	"slices"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/sinks/tracing"
)

// Receive maps r as Message does, as one receipt of the mapping's tracer:
// a span that is a child of the sender's trace context in r's headers, and
// whose own context the row keeps in its headers in place of the
// sender's, so that the outbox row relayed from it continues the trace.
// With no tracer the sender's context is stored as it came. The receipt is
// ended here when the message is refused; otherwise the caller ends it once
// the row is stored (nil) or not (the error). A nil receipt does nothing.
func (m *Mapping) Receive(ctx context.Context, r Received) (dialects.InboxMessage, *tracing.Receipt, error) {
	var receipt *tracing.Receipt
	r.Headers, receipt = m.Tracer.Receive(ctx, tracing.Source{Name: m.Source, Type: m.Type}, r.MessageID, r.Headers)
	msg, err := m.Message(r)
	if err != nil {
		receipt.End(err)
		return msg, nil, err
	}
	return msg, receipt, nil
}

// errRefused ends the receipt of a message the database refused.
var errRefused = errors.New("the database refused the message")

// EndReceipts ends the receipts of a batch that Storer.Store was given:
// those at the indexes of refused as refused, the others with err (nil:
// stored, or a duplicate of a stored message).
func EndReceipts(receipts []*tracing.Receipt, refused []int, err error) {
	for i, r := range receipts {
		if err == nil && slices.Contains(refused, i) {
			r.End(errRefused)
			continue
		}
		r.End(err)
	}
}
