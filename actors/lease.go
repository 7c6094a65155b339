package actors

import (
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
)

// lease is the trust window of one claim: a delivery may start only while
// the clock reads before trustedUntil. The claimer sets it from the moment it
// sent the claim; the lease keeper moves it forward after each renewal. It is
// shared by pointer because every row of the claim reads it before each
// delivery, and an atomic is the whole of it.
type lease struct {
	token        uuid.UUID
	trustedUntil atomic.Int64 // unix nanoseconds
	// rewinds is the rewind counter the claim's bounds were made at (see
	// reach.go): a key's position learnt from its rows holds only while
	// the counter stands there.
	rewinds int64
}

func (l *lease) trusted(now time.Time) bool { return now.UnixNano() < l.trustedUntil.Load() }

// extend moves the window to sentAt+length-margin, never backwards.
func (l *lease) extend(sentAt time.Time, length time.Duration) {
	until := sentAt.Add(length - trustMargin(length)).UnixNano()
	for {
		cur := l.trustedUntil.Load()
		if until <= cur || l.trustedUntil.CompareAndSwap(cur, until) {
			return
		}
	}
}

// trustMargin is how long before the database's lease end a replica stops
// starting deliveries: clock rates differ, and a renewal takes time.
func trustMargin(length time.Duration) time.Duration { return min(length/5, 5*time.Second) }

// claimed is a row with the lease of its claim.
type claimed struct {
	dialects.Row
	lease *lease
}
