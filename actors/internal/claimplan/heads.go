package claimplan

import (
	"github.com/queuebox/queuebox/dialects"
)

// The claimer has two kinds of claim (the dialects' ClaimParams), and both
// keep the head rule, so the choice is one of cost only:
//
//   - in schedule order: heads are found by walking the due rows in
//     scheduled_at order, stopping as soon as the claim has them. Cheapest
//     when nearly every row is a head: unkeyed rows, and keys that hold a
//     row or two at a time.
//   - by key: heads are found key by key, the keys taking turns, stopping as
//     soon as the claim has them. Its cost follows the keys it visits, not
//     the rows behind them: in a keyed backlog, where most rows wait behind
//     a busy head, a walk in schedule order would pass over every one of
//     them (seconds on a deep backlog), while the walk by key passes over a
//     busy key in one step.
//
// Both take the keys this replica just finished a run of first
// (continuations, see reach.go). The claimer claims by key while most rows
// are keyed and the runs are longer than Tuning.ShallowRun: a deep keyed backlog
// is never walked in schedule order. Both kinds return keyed and unkeyed
// rows alike, so the share follows the backlog whichever kind runs.
type claimKind uint8

const (
	scheduleClaim claimKind = iota
	byKeyClaim
	claimKinds
)

func (k claimKind) String() string {
	return [...]string{"in schedule order", "by key"}[k]
}

// claimChoice picks the kind of each claim from the rows claims return.
type claimChoice struct {
	// shallow is Tuning.ShallowRun.
	shallow int
	// keyed is a moving average of the share of keyed rows in claims; it
	// starts at one half, so the first claim goes by key (cheap on every
	// backlog while nothing is busy) and tells which way the backlog leans.
	keyed float64
}

// pick returns the kind of the next claim, given the run the head policy
// aims for: by key while most rows are keyed and keys hold runs of more
// than Tuning.ShallowRun rows. On shallow keys nearly every row is a head, and the
// walk in schedule order, which looks only at what became due since the
// last claim, finds them without walking the keys.
func (c *claimChoice) pick(run int) claimKind {
	if c.keyed >= 0.5 && run > c.shallow {
		return byKeyClaim
	}
	return scheduleClaim
}

// observe learns from the rows a claim returned.
func (c *claimChoice) observe(rows []dialects.Row) {
	if len(rows) == 0 {
		return
	}
	keyed := 0
	for i := range rows {
		if rows[i].Key != "" {
			keyed++
		}
	}
	c.keyed = 0.5*c.keyed + 0.5*float64(keyed)/float64(len(rows))
}

// headPolicy picks how many heads a claim may take (ClaimParams.MaxHeads):
// limit / run, where run is how many rows per key the claim aims for. A key
// holds one run at a time (its next rows wait behind a processing head), so
// long runs on deep keys mean fewer keys busy at once, fewer keys for a walk
// to pass over, fewer claims, and one Publish per run where the sink takes
// batches. Shallow keys (one or two rows each) and unkeyed rows need many
// heads. The policy follows the runs claims actually return: a claim whose
// runs mostly came back as long as it let them doubles run (up to Tuning.MaxRun);
// one whose runs mostly ended sooner sets run to the length they had.
//
// It starts at Tuning.MaxRun: on deep keys the first claims then take whole runs
// rather than one row of each of many keys (which would leave every key
// busy with a short run, and replicas taking turns on the same keys); on
// shallow keys or unkeyed rows the first claim comes back short and the
// next one asks for many heads.
type headPolicy struct {
	run int
	// maxRun and shallow are Tuning.MaxRun and Tuning.ShallowRun.
	maxRun, shallow int
}

func newHeadPolicy(t Tuning) headPolicy {
	return headPolicy{run: t.MaxRun, maxRun: t.MaxRun, shallow: t.ShallowRun}
}

// next returns the heads for a claim of limit rows, and the run it aims for
// (which observe needs back: claims overlap, and each is judged by what it
// asked). Beyond Tuning.ShallowRun, where claims go by key, the heads leave each
// one a share of at least one row more than the run (claimShare): keys that
// all hold exactly run rows (a backlog written in even batches) then come
// back shorter than their share, which tells that each ended, rather than
// exactly as long, which cannot be told from a run the limit cut. A key
// whose end cannot be told is continued, and its continuation finds
// nothing: seen to double a keyed drain's claims, every other one empty.
func (h *headPolicy) next(limit int) (heads, run int) {
	run = max(h.run, 1)
	if run > h.shallow {
		return max(1, limit/(run+1)), run
	}
	return max(1, limit/run), run
}

// observe learns from the rows of a claim that aimed for runs of asked.
// A claim that returned nothing teaches nothing: every key was busy. When
// most runs came back as long as the claim let them (their share, see
// claimShare), longer may fit; otherwise most keys ended sooner, and the
// run is their average.
func (h *headPolicy) observe(rows []dialects.Row, requested, asked int) {
	if len(rows) == 0 {
		return
	}
	share := claimShare(rows, requested)
	keyed, keys, cut := 0, 0, 0
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j].Key == rows[i].Key {
			j++
		}
		if rows[i].Key != "" {
			keyed += j - i
			keys++
			if j-i >= share {
				cut++
			}
		}
		i = j
	}
	switch {
	case keyed*2 <= len(rows) || keys == 0:
		h.run = 1
	case cut*2 >= keys:
		// Another claim may have raised run meanwhile; it is not lowered
		// for that.
		h.run = max(h.run, min(asked*2, h.maxRun, max(requested, 1)))
	default:
		h.run = min(max(keyed/keys, 1), h.maxRun)
	}
}

// claimFull tells whether a claim of requested rows and at most maxHeads
// heads says that more rows are waiting: it came back nearly full, or with
// as many heads as it could take. In the second case its runs ended at
// their keys' last rows, short of the limit, but the walk stopped at the
// heads it was allowed, not for want of claimable keys: more keys wait.
func claimFull(rows []dialects.Row, requested, maxHeads int) bool {
	n := len(rows)
	return n*10 >= requested*9 || (n > 0 && claimHeads(rows) >= maxHeads)
}

// claimHeads counts the heads among a claim's rows: one per key (rows come
// sorted by key, then sequence) and every row without a key.
func claimHeads(rows []dialects.Row) int {
	heads := 0
	for i := range rows {
		if rows[i].Key == "" || i == 0 || rows[i-1].Key != rows[i].Key {
			heads++
		}
	}
	return heads
}

// claimShare is the most rows that a claim of requested rows, which returned
// rows, could give one keyed head: the head, and the followers that the
// claim shares out equally among its keyed heads (see the dialects'
// claims). A key's run shorter than that ended at the key's last claimable
// row (the next one was processing, waiting for a retry or beyond the gate,
// or there was none). The heads a claim returns are the heads it found:
// it locks them before it stamps them.
func claimShare(rows []dialects.Row, requested int) int { return Share(rows, requested) }

// Share is claimShare, for the claimer's dispatch: a run shorter than it
// ended at its key's last claimable row.
func Share(rows []dialects.Row, requested int) int {
	keyed := 0
	for i := range rows {
		if rows[i].Key != "" && (i == 0 || rows[i-1].Key != rows[i].Key) {
			keyed++
		}
	}
	return 1 + max(requested-claimHeads(rows), 0)/max(keyed, 1)
}
