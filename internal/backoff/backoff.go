// Package backoff is the one capped, doubling delay that QueueBox's loops
// use when something they depend on fails: a claim or completion the
// database refused, a broker consumer that lost its connection, a start-up
// that waits for the database. (Retries of a row's delivery follow the
// configured outbox.backoff instead: see actors.Backoff.)
package backoff

import "time"

// Capped doubles from First up to Max. The zero value of a Capped with its
// bounds set is ready: the first Next returns First. It is not safe for
// concurrent use; each loop keeps its own.
type Capped struct {
	First, Max time.Duration
	n          int
}

// Next returns the delay before the next try and counts a failure.
func (b *Capped) Next() time.Duration {
	d := b.First
	for i := 0; i < b.n && d < b.Max; i++ {
		d *= 2
	}
	b.n++
	return min(d, b.Max)
}

// Failures is how many delays Next handed out since the last Reset.
func (b *Capped) Failures() int { return b.n }

// Reset starts over after a success.
func (b *Capped) Reset() { b.n = 0 }
