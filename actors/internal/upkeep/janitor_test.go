package upkeep

import (
	"testing"
	"time"

	"github.com/queuebox/queuebox/actors/internal/claimplan"
	"github.com/queuebox/queuebox/dialects"
)

var tune = claimplan.Default()

// The janitor looks for expired leases every third of a lease while a look
// is cheap, and time.Duration(tune.BackgroundLookFactor) times a look's duration, within a minute,
// while a long transaction makes each look read many dead entries.
func TestReleasePaceFollowsTheLooksCost(t *testing.T) {
	for _, c := range []struct{ every, took, want time.Duration }{
		{10 * time.Second, time.Millisecond, 10 * time.Second},
		{10 * time.Second, 500 * time.Millisecond, 25 * time.Second},
		{10 * time.Second, 10 * time.Second, time.Minute},
		{2 * time.Minute, 10 * time.Second, 2 * time.Minute},
	} {
		if got := releasePause(tune, c.every, c.took); got != c.want {
			t.Errorf("releasePause(%v, %v) = %v, want %v", c.every, c.took, got, c.want)
		}
	}
}

// A look for expired leases starts where the previous look said no row can
// be processing: a minute before its clock, or at the oldest processing
// row it saw when that is earlier; from the start when the dialect tells
// no clock.
func TestTheNextReleaseLookStartsAtTheOldestPossibleClaim(t *testing.T) {
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		r    dialects.Released
		want time.Time
	}{
		{"none processing", dialects.Released{At: at}, at.Add(-time.Minute)},
		{"a recent claim", dialects.Released{At: at, Oldest: at.Add(-time.Second)}, at.Add(-time.Minute)},
		{"a claim held for ten minutes", dialects.Released{At: at, Oldest: at.Add(-10 * time.Minute)}, at.Add(-10 * time.Minute)},
		{"no clock", dialects.Released{Rows: 3}, time.Time{}},
	} {
		if got := nextReleaseFrom(c.r, releaseSlack(30*time.Second)); !got.Equal(c.want) {
			t.Errorf("%s: next look from %v, want %v", c.name, got, c.want)
		}
	}
	// A claim runs for up to half a lease: a long lease looks further back.
	if got := releaseSlack(10 * time.Minute); got != 5*time.Minute+5*time.Second {
		t.Errorf("the slack for a ten-minute lease is %v, want half of it and 5 s", got)
	}
	// A claim that stalls in the server may commit after its timeout.
	if got := releaseSlack(time.Second); got != time.Minute {
		t.Errorf("the slack for a lease of a second is %v, want a minute", got)
	}
}

// While the last look saw a transaction open, the janitor looks again when
// it would have held the horizon back for 5 s (the claims behave as under a
// long transaction once a look sees that), then every second, so that they
// stop soon after it ends; every ten seconds otherwise.
func TestHorizonLooksSoonWhileATransactionStaysOpen(t *testing.T) {
	now := time.Now()
	open := func(d time.Duration) *dialects.Horizon {
		return &dialects.Horizon{Holder: &dialects.HorizonHolder{Since: now.Add(-d)}}
	}
	cases := []struct {
		name string
		h    *dialects.Horizon
		want time.Duration
	}{
		{"the read failed, none before", nil, tune.HorizonEvery},
		{"nothing holds it", &dialects.Horizon{}, tune.HorizonEvery},
		{"a slot, no start known", &dialects.Horizon{Holder: &dialects.HorizonHolder{Kind: "replication slot"}}, tune.HorizonEvery},
		{"a statement just began", open(100 * time.Millisecond), tune.HeldAfter},
		{"open for three seconds", open(3 * time.Second), tune.HeldAfter - 3*time.Second + 100*time.Millisecond},
		{"open for 4.5 s", open(4500 * time.Millisecond), tune.HorizonSoon},
		{"open for an hour", open(time.Hour), tune.HorizonSoon},
	}
	for _, c := range cases {
		if got := horizonNext(tune, c.h, now); got != c.want {
			t.Errorf("%s: next look in %v, want %v", c.name, got, c.want)
		}
	}
}

// The claims behave as under a long transaction only once a look saw one
// open for 5 s: a look that saw a transaction a second old says nothing of
// whether it is still open four seconds later.
func TestHeldOnlyWhenALookSawItHeld(t *testing.T) {
	now := time.Now()
	young := &dialects.Horizon{Holder: &dialects.HorizonHolder{Since: now.Add(-10 * time.Second)}, ReadAt: now.Add(-9 * time.Second)}
	if young.HeldAtRead(tune.HeldAfter) {
		t.Error("a look that saw a transaction one second old counts as held")
	}
	if !young.HeldFor(tune.HeldAfter) {
		t.Error("HeldFor does not count from the transaction's start")
	}
	old := &dialects.Horizon{Holder: &dialects.HorizonHolder{Since: now.Add(-6 * time.Second)}, ReadAt: now}
	if !old.HeldAtRead(tune.HeldAfter) {
		t.Error("a look that saw a transaction six seconds old does not count as held")
	}
	if (&dialects.Horizon{Holder: old.Holder}).HeldAtRead(tune.HeldAfter) {
		t.Error("a horizon with no read time counts as held")
	}
}
