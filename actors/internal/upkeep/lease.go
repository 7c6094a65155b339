package upkeep

import (
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Lease is the trust window of one claim: a delivery may start only while
// the clock reads before trustedUntil. The claimer sets it from the moment it
// sent the claim; the lease keeper moves it forward after each renewal. It is
// shared by pointer because every row of the claim reads it before each
// delivery, and an atomic is the whole of it.
type Lease struct {
	token        uuid.UUID
	trustedUntil atomic.Int64 // unix nanoseconds
	// rewinds is the rewind counter the claim's bounds were made at (see
	// the claim planner): a key's position learnt from its rows holds only while
	// the counter stands there.
	rewinds int64
	// lost holds the rows of the claim that a renewal found the database no
	// longer holds (another replica took them): they are never trusted
	// again, whatever later renewals say of the claim's other rows. Nil
	// while none is lost; replaced whole, never changed in place.
	lost atomic.Pointer[map[uuid.UUID]struct{}]
}

// Trusted reports whether a delivery of row id may start at now.
func (l *Lease) Trusted(id uuid.UUID, now time.Time) bool {
	// The window is read before the lost rows: the lease keeper marks a
	// row lost before it extends the window of the renewal that found
	// it, so a reader that sees the new window sees the row lost too.
	if now.UnixNano() >= l.trustedUntil.Load() {
		return false
	}
	if lost := l.lost.Load(); lost != nil {
		if _, ok := (*lost)[id]; ok {
			return false
		}
	}
	return true
}

// Lose marks rows of the claim as the database's no more: no delivery of
// them starts under this lease from now on. Only the lease keeper calls it.
func (l *Lease) Lose(ids ...uuid.UUID) {
	if len(ids) == 0 {
		return
	}
	next := map[uuid.UUID]struct{}{}
	if cur := l.lost.Load(); cur != nil {
		for id := range *cur {
			next[id] = struct{}{}
		}
	}
	for _, id := range ids {
		next[id] = struct{}{}
	}
	l.lost.Store(&next)
}

// Extend moves the window to sentAt+length-margin, never backwards.
func (l *Lease) Extend(sentAt time.Time, length time.Duration) {
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

// NewLease is the lease of a claim with token, whose bounds were made at the
// rewind counter rewinds; it is trusted only once Extend says so.
func NewLease(token uuid.UUID, rewinds int64) *Lease { return &Lease{token: token, rewinds: rewinds} }

// Token is the claim's token.
func (l *Lease) Token() uuid.UUID { return l.token }

// Rewinds is the rewind counter the claim's bounds were made at.
func (l *Lease) Rewinds() int64 { return l.rewinds }
