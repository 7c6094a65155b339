// Package testkit holds what the tests of every package share: one polling
// wait for conditions that no signal reports, and a factory for outbox rows
// as an application inserts them.
//
// Prefer a signal to a wait: a channel the code under test closes, a hook it
// calls, an observer it reports to. Eventually is for what only a poll can
// see, such as rows in a database or messages at a receiver.
package testkit

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
)

// Wait is how long Eventually waits by default: long enough for a loaded
// two-core machine running the race detector, short enough that a broken
// test fails within the suite's time.
const Wait = 30 * time.Second

// Eventually polls cond until it returns nil, starting every 5 ms and
// backing off to every 200 ms, and fails the test with what and cond's last
// error when timeout (Wait when zero) passes first.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := Poll(timeout, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Poll is Eventually without a test: it returns nil once cond holds, or an
// error that says how long it waited and what cond said last.
func Poll(timeout time.Duration, cond func() error) error {
	if timeout <= 0 {
		timeout = Wait
	}
	deadline := time.Now().Add(timeout)
	delay := 5 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still not true after %s: %w", timeout, err)
		}
		time.Sleep(delay)
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// True adapts a boolean condition for Eventually and Poll.
func True(ok func() bool) func() error {
	return func() error {
		if ok() {
			return nil
		}
		return errNotYet
	}
}

var errNotYet = fmt.Errorf("condition is false")

// RowOption sets one column of a row built by Row.
type RowOption func(*dialects.NewRow)

// Row returns a row of topic with a small JSON payload and every other
// column at its default, changed by opts.
func Row(topic string, opts ...RowOption) dialects.NewRow {
	r := dialects.NewRow{Topic: topic, Payload: []byte(`{}`)}
	for _, o := range opts {
		o(&r)
	}
	return r
}

// Rows returns n rows of topic; each gets opts, then per(i) when per is not
// nil, so that rows can differ by index.
func Rows(n int, topic string, per func(i int) []RowOption, opts ...RowOption) []dialects.NewRow {
	rows := make([]dialects.NewRow, n)
	for i := range rows {
		rows[i] = Row(topic, opts...)
		if per != nil {
			for _, o := range per(i) {
				o(&rows[i])
			}
		}
	}
	return rows
}

// Key sets the ordering key.
func Key(k string) RowOption { return func(r *dialects.NewRow) { r.Key = &k } }

// ID sets the row id.
func ID(id uuid.UUID) RowOption { return func(r *dialects.NewRow) { r.ID = &id } }

// Payload sets the payload, raw.
func Payload(p string) RowOption { return func(r *dialects.NewRow) { r.Payload = []byte(p) } }

// PayloadOf sets the payload to v as JSON.
func PayloadOf(v any) RowOption {
	return func(r *dialects.NewRow) {
		b, err := json.Marshal(v)
		if err != nil {
			panic(fmt.Sprintf("testkit.PayloadOf: %v", err))
		}
		r.Payload = b
	}
}

// Headers sets the headers column, raw.
func Headers(h string) RowOption { return func(r *dialects.NewRow) { r.Headers = []byte(h) } }

// AggregateType sets aggregate_type.
func AggregateType(a string) RowOption { return func(r *dialects.NewRow) { r.AggregateType = &a } }

// MaxAttempts sets max_attempts.
func MaxAttempts(n int) RowOption { return func(r *dialects.NewRow) { r.MaxAttempts = &n } }

// ScheduledAt sets scheduled_at.
func ScheduledAt(at time.Time) RowOption { return func(r *dialects.NewRow) { r.ScheduledAt = &at } }
