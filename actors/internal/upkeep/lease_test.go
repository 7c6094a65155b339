package upkeep

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

// The docs promise operators how long a lease is trusted (how-it-works.md,
// "Claims and leases"; decisions.md, "How long is a lease trusted?"): until
// a fifth of the lease, at most 5 s, before it ends, counted from when the
// claim or the last renewal was sent. This holds the code to that promise,
// so that a change of the margin changes the docs too.
func TestALeaseIsTrustedUntilAFifthOfItAtMostFiveSecondsBeforeItEnds(t *testing.T) {
	sent, id := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC), uuid.New()
	for _, c := range []struct{ lease, trusted time.Duration }{
		{time.Second, 800 * time.Millisecond},
		{10 * time.Second, 8 * time.Second},
		{25 * time.Second, 20 * time.Second},
		{30 * time.Second, 25 * time.Second},
		{10 * time.Minute, 10*time.Minute - 5*time.Second},
	} {
		var l Lease
		l.Extend(sent, c.lease)
		if end := sent.Add(c.trusted); !l.Trusted(id, end.Add(-time.Nanosecond)) || l.Trusted(id, end) {
			t.Errorf("a lease of %s sent at %s: trusted until %s, want until %s",
				c.lease, sent.Format(time.TimeOnly), time.Unix(0, l.trustedUntil.Load()).UTC().Format(time.TimeOnly), end.Format(time.TimeOnly))
		}
	}
}
