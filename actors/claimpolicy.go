package actors

import (
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// The claimer has three kinds of claim (the dialects' ClaimParams):
//
//   - plain: heads in schedule order, stopping as soon as it has them;
//     cheapest while heads are plentiful (unkeyed rows, many keys of few
//     rows each);
//   - windowed: the same, among the first windowFactor claims' worth of due
//     rows only; cheaper when most keys are busy and a plain claim would
//     pass over every row behind them, but it does not see rows beyond the
//     window;
//   - by key: heads found key by key; cheapest when few keys hold many
//     rows, and, like plain, it considers every due row.
//
// Which is cheapest depends on the backlog, so the claimer keeps the cost
// per claimed row of each (claimChoice) and uses the cheapest. It tries the
// others again now and then, so that a measure never goes stale: every
// remeasureEvery, times how much dearer they were (up to maxRemeasure), so
// that a claim that cost 50 times more is not paid for every two seconds.
// And it makes a claim that considers every due row (plain or by key) at
// least every fullEvery, so that no row beyond a window waits for long.
const (
	windowFactor   = 4
	fullEvery      = time.Second
	remeasureEvery = 2 * time.Second
	maxRemeasure   = 30
)

type claimKind uint8

const (
	plainClaim claimKind = iota
	windowedClaim
	byKeyClaim
	claimKinds
)

func (k claimKind) String() string {
	return [...]string{"plain", "windowed", "by key"}[k]
}

// claimChoice keeps the cost per claimed row of each kind of claim.
type claimChoice struct {
	cost     [claimKinds]float64 // moving average, seconds per row
	lastRun  [claimKinds]time.Time
	measured [claimKinds]bool
	// lastFull is when a claim that considers every due row last ran.
	lastFull time.Time
}

// pick returns the kind of the next claim, and notes that it runs now.
func (c *claimChoice) pick(now time.Time) claimKind {
	k := c.choose(now)
	c.lastRun[k] = now
	if k != windowedClaim {
		c.lastFull = now
	}
	return k
}

func (c *claimChoice) choose(now time.Time) claimKind {
	for k := range claimKinds {
		if !c.measured[k] {
			return k
		}
	}
	if now.Sub(c.lastFull) >= fullEvery {
		if c.cost[byKeyClaim] < c.cost[plainClaim] {
			return byKeyClaim
		}
		return plainClaim
	}
	best := plainClaim
	for k := range claimKinds {
		if c.cost[k] < c.cost[best] {
			best = k
		}
	}
	for k := range claimKinds {
		dearer := min(c.cost[k]/max(c.cost[best], 1e-9), maxRemeasure)
		if now.Sub(c.lastRun[k]) >= time.Duration(float64(remeasureEvery)*max(dearer, 1)) {
			return k
		}
	}
	return best
}

func (c *claimChoice) observe(k claimKind, took time.Duration, rows int) {
	cost := took.Seconds() / float64(max(rows, 1))
	if !c.measured[k] {
		c.cost[k], c.measured[k] = cost, true
	} else {
		c.cost[k] = 0.7*c.cost[k] + 0.3*cost
	}
}

// headPolicy picks how many heads a claim may take (ClaimParams.MaxHeads).
// With a keyed backlog, a claim of few heads and long runs scans less of the
// table (rows behind a busy key's head are not heads, and a claim passes over
// them) and gives each key actor a run to deliver in one go. With many keys
// of one row each, or unkeyed rows, a claim needs many heads. The policy
// probes: after a full, mostly keyed claim it tries few heads; if that claim
// comes back short, the keys are shallow, and it stays at full heads for a
// while before probing again.
type headPolicy struct {
	small   bool
	shallow int // claims left before the next probe
}

const (
	runLength      = 8  // rows per key a small-heads claim aims for
	shallowBackoff = 32 // claims to wait after a failed probe
)

func (h *headPolicy) next(limit int) int {
	if h.small {
		return max(1, limit/runLength)
	}
	return limit
}

func (h *headPolicy) observe(rows []dialects.Row, requested int) {
	keyed := 0
	for i := range rows {
		if rows[i].Key != "" {
			keyed++
		}
	}
	full := len(rows)*10 >= requested*9
	switch {
	case h.small && !full:
		h.small, h.shallow = false, shallowBackoff
	case !h.small && full && keyed*2 > len(rows):
		if h.shallow > 0 {
			h.shallow--
		} else {
			h.small = true
		}
	case keyed*2 <= len(rows):
		h.small = false
	}
}
