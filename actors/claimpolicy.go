package actors

import (
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// windowFactor sizes the claim window: a few claims' worth of the earliest
// due rows. A claim without a window stops scanning as soon as it has its
// heads, cheapest while heads are plentiful; a windowed claim checks every
// row of its window, cheapest when most keys are busy and a plain scan would
// pass over every row behind them. Which is cheaper depends on the backlog,
// so the claimer measures both (windowChoice) and uses the cheaper one, and
// runs each at least every fullEvery: the plain claim so that no row beyond
// the window waits for long, the windowed one to keep its measure fresh.
const (
	windowFactor = 4
	fullEvery    = time.Second
)

// windowChoice keeps the cost per claimed row of each kind of claim.
type windowChoice struct {
	cost     [2]float64 // [plain, windowed]: moving average, seconds per row
	lastRun  [2]time.Time
	measured [2]bool
}

// pick returns true for a windowed claim, and notes that this kind ran now.
func (w *windowChoice) pick(now time.Time) bool {
	windowed := w.choose(now)
	w.lastRun[kindIndex(windowed)] = now
	return windowed
}

func (w *windowChoice) choose(now time.Time) bool {
	switch {
	case now.Sub(w.lastRun[0]) >= fullEvery:
		return false
	case now.Sub(w.lastRun[1]) >= fullEvery:
		return true
	case !w.measured[0] || !w.measured[1]:
		return false
	}
	return w.cost[1] < w.cost[0]
}

// kindIndex is the index of a kind of claim in windowChoice's arrays.
func kindIndex(windowed bool) int {
	if windowed {
		return 1
	}
	return 0
}

func (w *windowChoice) observe(windowed bool, took time.Duration, rows int) {
	i := kindIndex(windowed)
	c := took.Seconds() / float64(max(rows, 1))
	if !w.measured[i] {
		w.cost[i], w.measured[i] = c, true
	} else {
		w.cost[i] = 0.7*w.cost[i] + 0.3*c
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
