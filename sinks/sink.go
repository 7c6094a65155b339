// Package sinks defines how QueueBox hands a message to a destination.
//
// A Sink publishes messages in order and reports one result per message. It
// is safe for concurrent use: key actors and the unordered pool call Publish
// from many goroutines at once, each call with its own messages. Publish
// returns when every message has an outcome; it honours ctx, which is
// cancelled when the claim is lost or the replica stops. Close releases the
// sink's connections; no Publish may run after it.
//
// Errors are typed, so that the engine never parses strings: Permanent marks
// a message that can never be delivered (it goes dead at once), WithRetryAfter
// carries the destination's own wish for a delay. Anything else is a failed
// delivery that is retried with backoff.
package sinks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/queuebox/queuebox/routing"
)

// Message is one outbox row, ready for a destination.
type Message struct {
	ID            string
	Topic         string
	Key           string // "" when unkeyed
	AggregateType *string
	Sequence      int64
	Attempt       int
	CreatedAt     time.Time
	// Headers are the entries of the row's headers column.
	Headers map[string]string
	// Body is the (transformed) payload.
	Body []byte
	// ContentType is the media type of Body; "" is application/json. A
	// decorator that changes the body's format sets it (CloudEvents'
	// structured mode); the sinks send it where their protocol keeps a
	// content type.
	ContentType string
}

// Fields returns what address templates read.
func (m *Message) Fields() *routing.Fields {
	return &routing.Fields{ID: m.ID, Topic: m.Topic, Key: m.Key, AggregateType: m.AggregateType, Headers: m.Headers}
}

// StandardHeaders calls set for every header QueueBox adds to a delivery
// (docs/how-it-works.md, "Headers"), after the row's own headers,
// so that QueueBox's values win on a collision.
func (m *Message) StandardHeaders(set func(name, value string)) {
	set("X-Message-Id", m.ID)
	set("X-Attempt", strconv.Itoa(m.Attempt))
	set("X-Topic", m.Topic)
	if m.Key != "" {
		set("X-Key", m.Key)
	}
	if m.AggregateType != nil {
		set("X-Aggregate-Type", *m.AggregateType)
	}
	set("X-Sequence", strconv.FormatInt(m.Sequence, 10))
	set("X-Created-At", m.CreatedAt.UTC().Format(time.RFC3339Nano))
	set("Content-Type", m.MediaType())
}

// MediaType is the media type of the body: ContentType, or
// application/json.
func (m *Message) MediaType() string {
	if m.ContentType != "" {
		return m.ContentType
	}
	return "application/json"
}

// Sink is a destination's publisher.
type Sink interface {
	// Publish sends msgs in order and returns one error (or nil) per message.
	Publish(ctx context.Context, msgs []Message) []error
	// Close releases the sink's connections.
	Close() error
}

// OrderedBatcher is implemented by sinks whose protocol keeps order within
// one Publish call of several messages (a produce to one partition, pipelined
// publishes on one channel). A key actor then hands them a run of one key at
// once; other sinks get one message per call.
type OrderedBatcher interface {
	MaxOrderedBatch() int
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as a failure that no retry can cure.
func Permanent(err error) error { return &permanentError{err} }

// IsPermanent reports whether err was marked Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// WithRetryAfter attaches the destination's requested delay to err.
func WithRetryAfter(err error, after time.Duration) error { return &retryAfterError{err, after} }

// RetryAfter returns the delay a destination asked for, if any.
func RetryAfter(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.after, true
	}
	return 0, false
}

// Errors returns a slice of n copies of err, for a Publish that fails whole.
func Errors(n int, err error) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

// NotDelivered is the error of a message that was not delivered because
// message failedID before it in the same call failed with cause: it is
// retried after that one. It is never permanent, whatever the cause (the
// message may be fine), but it is a cancellation when the cause is one, so
// that the engine tells a drain from a failing destination.
func NotDelivered(failedID string, cause error) error {
	e := &notDeliveredError{text: fmt.Sprintf("not delivered: message %s before it in the same key failed (%v)", failedID, cause)}
	switch {
	case errors.Is(cause, context.Canceled):
		e.ctx = context.Canceled
	case errors.Is(cause, context.DeadlineExceeded):
		e.ctx = context.DeadlineExceeded
	}
	return e
}

// Start begins a Publish of msgs: their results (nil until set) and a
// context that ends after timeout.
func Start(ctx context.Context, msgs []Message, timeout time.Duration) (context.Context, context.CancelFunc, []error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	return ctx, cancel, make([]error, len(msgs))
}

// FailFrom records err as the result of msgs[failed] and fails every
// message after it that has no result yet with NotDelivered: in a run of one
// key, nothing may be delivered after a message that was not.
func FailFrom(errs []error, msgs []Message, failed int, err error) {
	errs[failed] = err
	for j := failed + 1; j < len(msgs); j++ {
		if errs[j] == nil {
			errs[j] = NotDelivered(msgs[failed].ID, err)
		}
	}
}

// Prepare turns each message into what the sink sends, in order, and stops
// at the first that cannot be turned (its error is recorded with FailFrom):
// it returns what can be sent, a prefix of msgs.
func Prepare[T any](msgs []Message, errs []error, prepare func(*Message) (T, error)) []T {
	out := make([]T, 0, len(msgs))
	for i := range msgs {
		v, err := prepare(&msgs[i])
		if err != nil {
			FailFrom(errs, msgs, i, err)
			break
		}
		out = append(out, v)
	}
	return out
}

// ContextError words a publish that ran out of time or was cancelled: what
// (the broker and its address) did not answer within timeout.
func ContextError(what, waitedFor string, timeout time.Duration, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: no %s within %s: %w", what, waitedFor, timeout, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

type notDeliveredError struct {
	text string
	ctx  error
}

func (e *notDeliveredError) Error() string { return e.text }
func (e *notDeliveredError) Unwrap() error { return e.ctx }

// ConfigError is a destination setting that a sink refuses. Key is the
// setting's name under the destination (url, tls.caFile), so that the
// caller can report it where the user wrote it.
type ConfigError struct {
	Key string
	Err error
}

// Configf builds a ConfigError.
func Configf(key, format string, args ...any) error {
	return &ConfigError{Key: key, Err: fmt.Errorf(format, args...)}
}

func (e *ConfigError) Error() string { return e.Key + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }
