package claimplan

import (
	"fmt"
	"testing"

	"github.com/queuebox/queuebox/dialects"
)

// runs returns keys runs of n rows each, sorted by key as claims return them.
func runs(keys, n int) []dialects.Row {
	var out []dialects.Row
	for k := range keys {
		for i := range n {
			out = append(out, dialects.Row{Key: fmt.Sprintf("k%04d", k), Sequence: int64(i)})
		}
	}
	return out
}

// On deep keys the first claim already asks for long runs.
func TestHeadPolicyStartsWithLongRuns(t *testing.T) {
	h := newHeadPolicy(tune)
	if heads, run := h.next(500); run != tune.MaxRun || heads != 500/tune.MaxRun {
		t.Fatalf("first claim: %d heads for runs of %d; want runs of %d", heads, run, tune.MaxRun)
	}
}

// Two claims in flight at once: the one that asked for shorter runs and got
// them must not pull the run back down below what the other raised it to.
func TestHeadPolicyOverlappingClaimsDoNotShrinkTheRun(t *testing.T) {
	h := headPolicy{run: 8, maxRun: tune.MaxRun, shallow: tune.ShallowRun}
	_, askedA := h.next(500) // claim A asks for runs of 8
	_, askedB := h.next(500) // claim B too, while A runs
	h.observe(runs(62, 8), 500, askedA)
	if h.run != 16 {
		t.Fatalf("after A's full runs: run %d, want 16", h.run)
	}
	h.observe(runs(62, 8), 500, askedB) // B's runs were as long as B asked
	if h.run != 16 {
		t.Fatalf("after B's full runs of the old length: run %d, want 16 (a claim is judged by what it asked)", h.run)
	}
}

// A claim that came back empty (every key busy) leaves the run alone; runs
// shorter than asked set it to their length; unkeyed rows set it to one.
func TestHeadPolicyLearnsFromWhatClaimsReturn(t *testing.T) {
	h := headPolicy{run: 64, maxRun: tune.MaxRun, shallow: tune.ShallowRun}
	h.observe(nil, 500, 64)
	if h.run != 64 {
		t.Fatalf("an empty claim changed the run to %d", h.run)
	}
	h.observe(runs(7, 10), 500, 64)
	if h.run != 10 {
		t.Fatalf("runs of 10 when 64 were asked: run %d, want 10", h.run)
	}
	h.observe(make([]dialects.Row, 300), 500, 10)
	if h.run != 1 {
		t.Fatalf("unkeyed rows: run %d, want 1", h.run)
	}
	for range 10 {
		heads, asked := h.next(500)
		h.observe(runs(heads, 1+(500-heads)/heads), 500, asked)
	}
	if h.run != tune.MaxRun {
		t.Fatalf("runs as long as each claim let them: run %d, want it to grow to %d", h.run, tune.MaxRun)
	}
}

// Keys that all hold exactly as many rows as the run (a backlog written in
// even batches): each claim lets a key one row more than that, so every run
// comes back shorter than its share, which dispatch takes for a key that
// ended (no continuation that would find nothing), and the policy keeps the
// run rather than swing between two.
func TestHeadPolicyTellsKeysThatEndAtTheRun(t *testing.T) {
	for _, n := range []int{10, 64, 100, 127} {
		h := headPolicy{run: n, maxRun: tune.MaxRun, shallow: tune.ShallowRun}
		for i := range 5 {
			heads, asked := h.next(500)
			rows := runs(heads, n)
			if share := claimShare(rows, 500); n >= share {
				t.Fatalf("keys of %d rows, claim %d: %d heads leave a share of %d, want more than %d", n, i, heads, share, n)
			}
			h.observe(rows, 500, asked)
			if h.run != n {
				t.Fatalf("keys of %d rows, claim %d: run %d, want it to stay %d", n, i, h.run, n)
			}
		}
	}
}

// A claim is full when it comes back nearly full, or with every head it
// could take even though its runs, ending at their keys' last rows, left it
// short; it is not when the walk ran out of claimable keys.
func TestClaimFull(t *testing.T) {
	unkeyed := make([]dialects.Row, 450)
	mixed := append(runs(2, 3), dialects.Row{}, dialects.Row{})
	cases := []struct {
		name                string
		rows                []dialects.Row
		requested, maxHeads int
		want                bool
	}{
		{"nearly full", runs(5, 90), 500, 5, true},
		{"nearly full unkeyed", unkeyed, 500, 500, true},
		{"short runs, every head taken", runs(3, 100), 500, 3, true},
		{"short runs, fewer heads than allowed", runs(2, 100), 500, 3, false},
		{"keyed and unkeyed rows count as heads", mixed, 500, 4, true},
		{"one head of many allowed", runs(1, 40), 500, 12, false},
		{"nothing", nil, 500, 3, false},
	}
	for _, c := range cases {
		if got := claimFull(c.rows, c.requested, c.maxHeads); got != c.want {
			t.Errorf("%s: %d rows (%d heads) of %d with at most %d heads: full %v, want %v",
				c.name, len(c.rows), claimHeads(c.rows), c.requested, c.maxHeads, got, c.want)
		}
	}
}

// A claim shares what its limit leaves after the heads equally among its
// keyed heads: a run shorter than its share ended at its key's last
// claimable row; one as long was cut by the limit.
func TestClaimShare(t *testing.T) {
	for _, c := range []struct {
		name      string
		rows      []dialects.Row
		requested int
		want      int
	}{
		{"three keys of 500", runs(3, 100), 500, 1 + 497/3},
		{"one key", runs(1, 500), 500, 500},
		{"keys and unkeyed rows", append(runs(2, 10), dialects.Row{}, dialects.Row{}), 100, 1 + 96/2},
		{"unkeyed only", []dialects.Row{{}, {}}, 100, 99},
		{"more heads than the limit", runs(5, 1), 3, 1},
	} {
		if got := claimShare(c.rows, c.requested); got != c.want {
			t.Errorf("%s: share %d, want %d", c.name, got, c.want)
		}
	}
}
