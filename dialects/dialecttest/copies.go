package dialecttest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testkit"
)

// copyTests are the subtests of the fan-out's copies (dialects.Copies).
func copyTests() []subtest {
	return []subtest{
		{"CopiesWrittenWithTheRowsOutcome", testCopiesWritten},
		{"AReplayedRowLosesItsCopies", testCopiesReplaced},
		{"CopyClaimKeepsEachLaneInOrder", testCopyLaneOrder},
		{"ClaimReportsBlockedLanes", testBlockedLanes},
		{"CopyConcurrentClaimers", testCopyConcurrentClaimers},
		{"CopyOutcomes", testCopyOutcomes},
		{"CopyExpiredAndRenewed", testCopyExpired},
		{"CopyProbe", testCopyProbe},
		{"CopyOperators", testCopyOperators},
		{"CopyPurge", testCopyPurge},
	}
}

// passRows claims every due row of rows' keys (inserted first) and
// returns the claimed rows by topic.
func passRows(t *testing.T, h Harness, d dialects.Dialect, rows ...dialects.NewRow) map[string]dialects.Row {
	t.Helper()
	insert(t, d, rows...)
	got := map[string]dialects.Row{}
	for _, r := range h.claim(t, d, 100) {
		got[r.Topic] = r
	}
	if len(got) != len(rows) {
		t.Fatalf("claimed %d of the %d rows", len(got), len(rows))
	}
	return got
}

// fanned is the outcome of a fan-out row's pass: delivered, with copies.
func fanned(r dialects.Row, copies ...dialects.Copy) dialects.Outcome {
	return dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeDelivered, Copies: copies}
}

func copyOf(dest string, kind dialects.CopyKind, attempt int, delay time.Duration, err string) dialects.Copy {
	return dialects.Copy{Destination: dest, Kind: kind, Attempt: attempt, Delay: delay, Error: err}
}

func copyClaim(t *testing.T, d dialects.Dialect, limit int, lease time.Duration) []dialects.Row {
	t.Helper()
	c, err := d.CopyClaim(ctx(t), dialects.ClaimParams{Limit: limit, Lease: lease, Token: uuid.New()})
	if err != nil {
		t.Fatalf("copy claim: %v", err)
	}
	for _, r := range c.Rows {
		if r.CopyOf == nil {
			t.Fatalf("a copy claimed without CopyOf: %+v", r)
		}
	}
	return c.Rows
}

// lanes writes claimed copies as "dest/topic" in the claim's order.
func lanes(rows []dialects.Row) string {
	var out []string
	for _, r := range rows {
		out = append(out, r.CopyOf.Destination+"/"+r.Topic)
	}
	return strings.Join(out, " ")
}

func copiesOfRow(t *testing.T, d dialects.Dialect, id uuid.UUID) map[string]dialects.CopyListed {
	t.Helper()
	cs, err := d.CopiesOfRow(ctx(t), id)
	if err != nil {
		t.Fatalf("copies of %s: %v", id, err)
	}
	out := map[string]dialects.CopyListed{}
	for i, c := range cs {
		if i > 0 && cs[i-1].Destination >= c.Destination {
			t.Errorf("copies of a row not in destination order: %s then %s", cs[i-1].Destination, c.Destination)
		}
		out[c.Destination] = c
	}
	return out
}

func copyComplete(t *testing.T, d dialects.Dialect, outcomes ...dialects.Outcome) []dialects.Claim {
	t.Helper()
	lost, err := d.CopyComplete(ctx(t), outcomes)
	if err != nil {
		t.Fatalf("copy complete: %v", err)
	}
	return lost
}

// orEmpty is *s, "" for nil.
func orEmpty(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// makeDue makes every pending copy due now.
func makeDue(t *testing.T, h Harness, d dialects.Dialect) {
	t.Helper()
	h.Exec(t, d, `UPDATE {{copies}} SET scheduled_at = created_at WHERE state = 'pending'`)
}

// The completion of a fan-out row writes its copies from the row itself
// (payload and all), and records the attempts of its destinations, each
// with its end; a lost claim writes neither.
func testCopiesWritten(t *testing.T, h Harness) {
	d := h.New(t, 0)
	r := passRows(t, h, d, testkit.Row("order.created", testkit.Key("k"), testkit.Payload(`{"order":7}`),
		testkit.Headers(`{"trace":"abc"}`), testkit.AggregateType("order"), testkit.MaxAttempts(9)))["order.created"]
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	o := fanned(r,
		copyOf("b", dialects.CopyRetry, 1, 0, "HTTP 500"),
		copyOf("c", dialects.CopyDead, 1, 0, "HTTP 400: no"),
		copyOf("d", dialects.CopyBehind, 0, 0, ""),
		copyOf("e", dialects.CopyDefer, 0, time.Hour, ""))
	o.Attempts = []dialects.Attempt{
		{At: at, Try: 1, Destination: "a", Status: "HTTP 200 OK"},
		{At: at.Add(time.Millisecond), Try: 1, Destination: "b", Status: "HTTP 500", Error: "HTTP 500"},
		{At: at.Add(2 * time.Millisecond), Try: 1, Destination: "c", Error: "HTTP 400: no", Probe: true},
	}
	stale := fanned(dialects.Row{Claim: dialects.Claim{ID: r.ID, Token: uuid.New()}}, copyOf("x", dialects.CopyRetry, 1, 0, "x"))
	stale.Attempts = []dialects.Attempt{{At: at, Try: 1, Destination: "x"}}
	if lost := complete(t, d, stale); len(lost) != 1 {
		t.Fatalf("a stale claim's completion was not lost: %v", lost)
	}
	if lost := complete(t, d, o); len(lost) != 0 {
		t.Fatalf("lost %v", lost)
	}
	row := rowDetail(t, d, r.ID, 50)
	if row.State != dialects.Delivered || row.Attempt != 0 {
		t.Errorf("the fan-out row: %+v", row.ListedRow)
	}
	cs := copiesOfRow(t, d, r.ID)
	if len(cs) != 4 {
		t.Fatalf("copies %+v, want b, c, d and e", cs)
	}
	for dest, want := range map[string]struct {
		state   dialects.State
		attempt int
		err     string
		later   bool
	}{"b": {dialects.Pending, 1, "HTTP 500", false}, "c": {dialects.Dead, 1, "HTTP 400: no", false},
		"d": {dialects.Pending, 0, "", false}, "e": {dialects.Pending, 0, "", true}} {
		c := cs[dest]
		if c.State != want.state || c.Attempt != want.attempt || orEmpty(c.LastError) != want.err || c.MaxAttempts != 9 ||
			c.RowID != r.ID || c.ID == r.ID || c.Topic != "order.created" || orEmpty(c.Key) != "k" || c.Sequence != r.Sequence ||
			!c.CreatedAt.Equal(r.CreatedAt) || orEmpty(c.AggregateType) != "order" {
			t.Errorf("copy %s: %+v, want %+v", dest, c, want)
		}
		if later := c.ScheduledAt.After(c.UpdatedAt.Add(30 * time.Minute)); later != want.later {
			t.Errorf("copy %s is due at %s (updated %s), want later: %v", dest, c.ScheduledAt, c.UpdatedAt, want.later)
		}
	}
	got := copyClaim(t, d, 10, lease)
	if lanes(got) != "b/order.created d/order.created" {
		t.Fatalf("claimed %s, want the due pending copies of b and d", lanes(got))
	}
	for _, c := range got {
		var payload, headers map[string]any
		if json.Unmarshal(c.Payload, &payload) != nil || payload["order"] != 7.0 || json.Unmarshal(c.Headers, &headers) != nil || headers["trace"] != "abc" {
			t.Errorf("copy %s: payload %s, headers %s", c.CopyOf.Destination, c.Payload, c.Headers)
		}
		if c.CopyOf.RowID != r.ID || c.ID != cs[c.CopyOf.Destination].ID || c.Key != "k" || c.Sequence != r.Sequence ||
			!c.CreatedAt.Equal(r.CreatedAt) || orEmpty(c.AggregateType) != "order" || c.MaxAttempts != 9 || c.Token == uuid.Nil {
			t.Errorf("claimed copy %+v (of %+v)", c, *c.CopyOf)
		}
	}
	var entries []string
	for _, a := range recorded(row.Attempts) {
		entries = append(entries, fmt.Sprintf("%s:%s:%v", a.Destination, a.Outcome, a.Probe))
	}
	if want := "a:delivered:false b:retry:false c:dead:true"; strings.Join(entries, " ") != want {
		t.Errorf("history %v, want %s", entries, want)
	}

	// A row that goes dead as a whole gets no copies, whatever its
	// outcome carries, and its attempts are recorded as dead.
	dead := passRows(t, h, d, testkit.Row("dead"))["dead"]
	o = dialects.Outcome{Claim: dead.Claim, Kind: dialects.OutcomeDead, Error: "filter failed",
		Copies:   []dialects.Copy{copyOf("b", dialects.CopyRetry, 1, 0, "e")},
		Attempts: []dialects.Attempt{{At: at, Try: 1, Destination: "a", Error: "x"}, {At: at.Add(time.Millisecond), Try: 1, Destination: "b", Error: "y"}}}
	if lost := complete(t, d, o); len(lost) != 0 {
		t.Fatalf("lost %v", lost)
	}
	if cs := copiesOfRow(t, d, dead.ID); len(cs) != 0 {
		t.Errorf("a dead row got copies: %+v", cs)
	}
	entries = nil
	for _, a := range recorded(rowDetail(t, d, dead.ID, 10).Attempts) {
		entries = append(entries, a.Destination+":"+a.Outcome+":"+a.Error)
	}
	if want := "a:dead:x b:dead:y"; strings.Join(entries, " ") != want {
		t.Errorf("the dead row's history %v, want %s", entries, want)
	}
}

// A replay of a row removes its copies, whatever their state: its new
// pass delivers to every destination again and copies what does not end
// well there; an old copy's claim is lost.
func testCopiesReplaced(t *testing.T, h Harness) {
	d := h.New(t, 0)
	r := passRows(t, h, d, testkit.Row("t", testkit.Key("k")))["t"]
	complete(t, d, fanned(r, copyOf("b", dialects.CopyRetry, 1, 0, "first")))
	old := copyClaim(t, d, 10, lease)
	if len(old) != 1 {
		t.Fatalf("claimed %d copies", len(old))
	}
	if n, err := d.OutboxReplayIDs(ctx(t), []uuid.UUID{r.ID}, []dialects.State{dialects.Delivered}, ""); err != nil || n != 1 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	if cs := copiesOfRow(t, d, r.ID); len(cs) != 0 {
		t.Fatalf("the replayed row kept its copies: %+v", cs)
	}
	again := h.claim(t, d, 10)
	if len(again) != 1 {
		t.Fatalf("claimed %d after the replay", len(again))
	}
	complete(t, d, fanned(again[0], copyOf("b", dialects.CopyRetry, 3, time.Hour, "second"), copyOf("c", dialects.CopyDead, 1, 0, "c")))
	cs := copiesOfRow(t, d, r.ID)
	b := cs["b"]
	if len(cs) != 2 || b.ID == old[0].ID || b.State != dialects.Pending || b.Attempt != 3 || orEmpty(b.LastError) != "second" {
		t.Fatalf("after the replayed row's pass: %+v", cs)
	}
	if lost := copyComplete(t, d, outcome(old[0], dialects.OutcomeDelivered)); len(lost) != 1 {
		t.Errorf("the replaced copy's old claim was not lost")
	}
	if got := copiesOfRow(t, d, r.ID)["b"]; got.State != dialects.Pending {
		t.Errorf("the old claim's completion wrote the copy: %+v", got)
	}
}

// Copies of one destination and key are claimed in sequence order: not
// while an earlier copy of the lane is pending (due or not), nor while an
// earlier outbox row of the key is processing; a head's followers come
// with it. Each lane goes on its own.
func testCopyLaneOrder(t *testing.T, h Harness) {
	d := h.New(t, 0)
	rows := passRows(t, h, d, testkit.Row("r1", testkit.Key("k")), testkit.Row("r2", testkit.Key("k")), testkit.Row("r3", testkit.Key("k")),
		testkit.Row("u", testkit.Key("")))
	// r2 and r3 end before r1, which is still processing.
	complete(t, d, fanned(rows["r2"], copyOf("b", dialects.CopyRetry, 1, 0, "e")),
		fanned(rows["r3"], copyOf("b", dialects.CopyBehind, 0, 0, ""), copyOf("c", dialects.CopyRetry, 1, 0, "e")),
		fanned(rows["u"], copyOf("b", dialects.CopyRetry, 1, 0, "e")))
	if got := copyClaim(t, d, 10, lease); lanes(got) != "b/u" {
		t.Fatalf("while r1 is processing, claimed %s; want only the unkeyed copy", lanes(got))
	}
	// r1 ends with a copy of c that waits an hour.
	complete(t, d, fanned(rows["r1"], copyOf("c", dialects.CopyRetry, 1, time.Hour, "e")))
	got := copyClaim(t, d, 10, lease)
	if lanes(got) != "b/r2 b/r3" {
		t.Fatalf("claimed %s; want b's copies of r2 and r3 (c's copy of r3 waits behind r1's)", lanes(got))
	}
	if more := copyClaim(t, d, 10, lease); len(more) != 0 {
		t.Fatalf("claimed %s while the lanes' heads are processing or waiting", lanes(more))
	}
	makeDue(t, h, d)
	got = copyClaim(t, d, 10, lease)
	if lanes(got) != "c/r1 c/r3" {
		t.Fatalf("once r1's copy is due, claimed %s; want c's copies of r1 and r3", lanes(got))
	}
	// A head that fails holds its lane; the followers it was claimed
	// with go back.
	copyComplete(t, d, dialects.Outcome{Claim: got[0].Claim, Kind: dialects.OutcomeRetry, Delay: time.Hour, Error: "again"},
		outcome(got[1], dialects.OutcomeRelease))
	if more := copyClaim(t, d, 10, lease); len(more) != 0 {
		t.Fatalf("claimed %s behind a head that waits for its retry", lanes(more))
	}
	// A limit leaves the rest of a lane for the next claim; few heads take
	// longer runs.
	makeDue(t, h, d)
	c, err := d.CopyClaim(ctx(t), dialects.ClaimParams{Limit: 1, Lease: lease, Token: uuid.New()})
	if err != nil || lanes(c.Rows) != "c/r1" {
		t.Fatalf("a claim of 1: %s, %v", lanes(c.Rows), err)
	}
	copyComplete(t, d, outcome(c.Rows[0], dialects.OutcomeDelivered))
	if got := copyClaim(t, d, 10, lease); lanes(got) != "c/r3" {
		t.Fatalf("after the head was delivered, claimed %s", lanes(got))
	}
}

// A claim with Lanes reports the lanes of its keys that have a pending or
// processing copy, in the claim's own transaction where the dialect can,
// whichever way it finds its heads; a claim without does not look.
func testBlockedLanes(t *testing.T, h Harness) {
	d := h.New(t, 0)
	rows := passRows(t, h, d, testkit.Row("k1", testkit.Key("k1")), testkit.Row("k2", testkit.Key("k2")), testkit.Row("k3", testkit.Key("k3")))
	complete(t, d, fanned(rows["k1"], copyOf("b", dialects.CopyRetry, 1, time.Hour, "e"), copyOf("c", dialects.CopyBehind, 0, 0, ""),
		copyOf("d", dialects.CopyDead, 1, 0, "dead")),
		fanned(rows["k2"], copyOf("b", dialects.CopyRetry, 1, 0, "e")), fanned(rows["k3"]))
	// k2's copy is processing: it still blocks its lane.
	if got := copyClaim(t, d, 10, lease); !strings.Contains(lanes(got), "b/k2") {
		t.Fatalf("claimed %s, want b's copy of k2 among them", lanes(got))
	}
	for i, settle := range []bool{false, true} {
		insert(t, d, testkit.Row("n1", testkit.Key("k1")), testkit.Row("n2", testkit.Key("k2")), testkit.Row("n3", testkit.Key("k3")),
			testkit.Row("u"))
		p := dialects.ClaimParams{Limit: 100, Lease: lease, Token: uuid.New(), Walk: h.walk(), Lanes: true}
		if settle {
			p.Settle = func(dialects.Probe) *dialects.Gate { return nil }
		}
		c, err := d.OutboxClaim(ctx(t), p)
		if err != nil || len(c.Rows) != 4 {
			t.Fatalf("claim %d: %d rows, %v", i, len(c.Rows), err)
		}
		var got []string
		for _, l := range c.Blocked {
			got = append(got, l.Destination+"/"+l.Key)
		}
		slices.Sort(got)
		if want := "b/k1 b/k2 c/k1"; strings.Join(got, " ") != want {
			t.Errorf("claim %d (settle %v): blocked %v, want %s", i, settle, got, want)
		}
		var out []dialects.Outcome
		for _, r := range c.Rows {
			out = append(out, outcome(r, dialects.OutcomeDelivered))
		}
		complete(t, d, out...)
	}
	insert(t, d, testkit.Row("n1", testkit.Key("k1")))
	c, err := d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: 10, Lease: lease, Token: uuid.New(), Walk: h.walk()})
	if err != nil || len(c.Rows) != 1 || c.Blocked != nil {
		t.Errorf("a claim without Lanes: %d rows, blocked %v, %v", len(c.Rows), c.Blocked, err)
	}
}

// Several copy claimers at once, over many lanes: no copy is claimed
// twice, no lane is held by two claims at once, and each lane's copies are
// claimed in sequence order.
func testCopyConcurrentClaimers(t *testing.T, h Harness) {
	d := h.New(t, 0)
	const keys, perKey = 20, 8
	var rows []dialects.NewRow
	for i := range perKey {
		for k := range keys {
			rows = append(rows, testkit.Row(anyTopic, testkit.Key("key-"+strconv.Itoa(k)), testkit.Payload(fmt.Sprintf(`{"i":%d}`, i))))
		}
	}
	rows = append(rows, testkit.Rows(20, anyTopic, nil)...)
	insert(t, d, rows...)
	total := 0
	for {
		batch := h.claim(t, d, 500)
		if len(batch) == 0 {
			break
		}
		out := make([]dialects.Outcome, len(batch))
		for i, r := range batch {
			out[i] = fanned(r, copyOf("b", dialects.CopyBehind, 0, 0, ""), copyOf("c", dialects.CopyRetry, 1, 0, "e"))
			total += 2
		}
		complete(t, d, out...)
	}
	var (
		mu        sync.Mutex
		heldBy    = map[string]uuid.UUID{}
		lastSeq   = map[string]int64{}
		claimed   = map[uuid.UUID]bool{}
		delivered int
		failures  []string
	)
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 11))
			for idle := 0; idle < 2000; {
				mu.Lock()
				done := delivered == total
				mu.Unlock()
				if done {
					return
				}
				cl, err := d.CopyClaim(context.Background(), dialects.ClaimParams{Limit: 1 + rng.IntN(40), MaxHeads: 1 + rng.IntN(10), Lease: lease, Token: uuid.New()})
				if err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("copy claim: %v", err))
					mu.Unlock()
					return
				}
				if len(cl.Rows) == 0 {
					idle++
					time.Sleep(2 * time.Millisecond)
					continue
				}
				idle = 0
				mu.Lock()
				for _, r := range cl.Rows {
					if claimed[r.ID] {
						failures = append(failures, fmt.Sprintf("copy %s claimed twice", r.ID))
					}
					claimed[r.ID] = true
					if !r.Keyed() {
						continue
					}
					lane := r.CopyOf.Destination + "/" + r.Key
					if tok, ok := heldBy[lane]; ok && tok != r.Token {
						failures = append(failures, fmt.Sprintf("lane %s held by two claims at once", lane))
					}
					heldBy[lane] = r.Token
					if r.Sequence <= lastSeq[lane] {
						failures = append(failures, fmt.Sprintf("lane %s: sequence %d claimed after %d", lane, r.Sequence, lastSeq[lane]))
					}
					lastSeq[lane] = r.Sequence
				}
				for _, r := range cl.Rows {
					if lane := r.CopyOf.Destination + "/" + r.Key; r.Keyed() && heldBy[lane] == r.Token {
						delete(heldBy, lane)
					}
				}
				mu.Unlock()
				out := make([]dialects.Outcome, len(cl.Rows))
				for i, r := range cl.Rows {
					out[i] = outcome(r, dialects.OutcomeDelivered)
				}
				lost, err := d.CopyComplete(context.Background(), out)
				mu.Lock()
				if err != nil || len(lost) > 0 {
					failures = append(failures, fmt.Sprintf("copy complete: lost %d, %v", len(lost), err))
				}
				delivered += len(cl.Rows)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, f := range failures[:min(len(failures), 10)] {
		t.Error(f)
	}
	if delivered != total || len(claimed) != total {
		t.Fatalf("delivered %d copies, claimed %d distinct, want %d", delivered, len(claimed), total)
	}
}

// A copy's outcomes write what the transition table says, its attempt is
// recorded in its row's history with its destination, and a stale token
// writes nothing.
func testCopyOutcomes(t *testing.T, h Harness) {
	d := h.New(t, 0)
	rows := passRows(t, h, d, testkit.Row("a"), testkit.Row("b"), testkit.Row("c"), testkit.Row("d"), testkit.Row("e"))
	var out []dialects.Outcome
	for _, r := range rows {
		out = append(out, fanned(r, copyOf("x", dialects.CopyRetry, 1, 0, "first")))
	}
	complete(t, d, out...)
	byTopic := map[string]dialects.Row{}
	for _, r := range copyClaim(t, d, 10, lease) {
		byTopic[r.Topic] = r
	}
	if len(byTopic) != 5 {
		t.Fatalf("claimed %d copies", len(byTopic))
	}
	at := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	stale := byTopic["e"].Claim
	stale.Token = uuid.New()
	lost := copyComplete(t, d,
		withAttempt(outcome(byTopic["a"], dialects.OutcomeDelivered), dialects.Attempt{At: at, Try: 2, Status: "HTTP 200"}),
		withAttempt(dialects.Outcome{Claim: byTopic["b"].Claim, Kind: dialects.OutcomeRetry, Delay: time.Hour, Error: "HTTP 503"},
			dialects.Attempt{At: at, Try: 2, Error: "HTTP 503", Destination: "x"}),
		dialects.Outcome{Claim: byTopic["c"].Claim, Kind: dialects.OutcomeDefer, Delay: time.Hour},
		dialects.Outcome{Claim: byTopic["d"].Claim, Kind: dialects.OutcomeDead, Error: "HTTP 400"},
		dialects.Outcome{Claim: stale, Kind: dialects.OutcomeDead, Error: "stale"})
	if len(lost) != 1 || lost[0] != stale {
		t.Fatalf("lost %v, want only the stale claim", lost)
	}
	state := func(topic string) dialects.CopyListed { return copiesOfRow(t, d, rows[topic].ID)["x"] }
	if c := state("a"); c.State != dialects.Delivered || c.Attempt != 1 {
		t.Errorf("delivered: %+v", c)
	}
	if c := state("b"); c.State != dialects.Pending || c.Attempt != 2 || orEmpty(c.LastError) != "HTTP 503" || !c.ScheduledAt.After(c.UpdatedAt.Add(30*time.Minute)) {
		t.Errorf("retried: %+v", c)
	}
	if c := state("c"); c.State != dialects.Pending || c.Attempt != 1 || orEmpty(c.LastError) != "first" || !c.ScheduledAt.After(c.UpdatedAt.Add(30*time.Minute)) {
		t.Errorf("deferred: %+v", c)
	}
	if c := state("d"); c.State != dialects.Dead || c.Attempt != 1 || orEmpty(c.LastError) != "HTTP 400" {
		t.Errorf("dead: %+v", c)
	}
	if c := state("e"); c.State != dialects.Processing || orEmpty(c.LastError) != "first" {
		t.Errorf("a stale completion changed the copy: %+v", c)
	}
	if lost := copyComplete(t, d, outcome(byTopic["e"], dialects.OutcomeRelease)); len(lost) != 0 {
		t.Fatalf("the holder's release was lost")
	}
	if c := state("e"); c.State != dialects.Pending || c.Attempt != 1 {
		t.Errorf("released: %+v", c)
	}
	for topic, want := range map[string]string{"a": "x:delivered:2", "b": "x:retry:2"} {
		var got []string
		for _, a := range recorded(rowDetail(t, d, rows[topic].ID, 10).Attempts) {
			got = append(got, fmt.Sprintf("%s:%s:%d", a.Destination, a.Outcome, a.Try))
		}
		if strings.Join(got, " ") != want {
			t.Errorf("history of %s: %v, want %s", topic, got, want)
		}
	}
}

// A copy whose lease passed goes back to pending unless its claim is kept,
// attempt unchanged; a renewed lease does not pass; a late completion of
// a released claim is lost.
func testCopyExpired(t *testing.T, h Harness) {
	d := h.New(t, 0)
	rows := passRows(t, h, d, testkit.Row("a"), testkit.Row("b"))
	complete(t, d, fanned(rows["a"], copyOf("x", dialects.CopyRetry, 2, 0, "e")), fanned(rows["b"], copyOf("x", dialects.CopyRetry, 2, 0, "e")))
	dead := copyClaim(t, d, 10, 0)
	if len(dead) != 2 {
		t.Fatalf("claimed %d", len(dead))
	}
	var claims []dialects.Claim
	for _, r := range dead {
		claims = append(claims, r.Claim)
	}
	// One is renewed; a claim with another's token is not.
	crossed := dialects.Claim{ID: dead[0].ID, Token: uuid.New()}
	lost, err := d.CopyRenewLeases(ctx(t), []dialects.Claim{dead[1].Claim, crossed}, lease)
	if err != nil || len(lost) != 1 || lost[0] != crossed {
		t.Fatalf("renew: lost %v, %v", lost, err)
	}
	if n, err := d.CopyReleaseExpired(ctx(t), 10, []uuid.UUID{dead[0].Token}); err != nil || n != 0 {
		t.Fatalf("released a kept claim: %d, %v", n, err)
	}
	n, err := d.CopyReleaseExpired(ctx(t), 10, nil)
	if err != nil || n != 1 {
		t.Fatalf("release expired: %d, %v; want the one not renewed", n, err)
	}
	again := copyClaim(t, d, 10, lease)
	if len(again) != 1 || again[0].ID != dead[0].ID || again[0].Attempt != 2 {
		t.Fatalf("claimed again %+v", again)
	}
	if lost := copyComplete(t, d, outcome(dead[0], dialects.OutcomeDelivered)); len(lost) != 1 {
		t.Errorf("a released claim's completion was not lost")
	}
	if lost, err := d.CopyRenewLeases(ctx(t), claims, lease); err != nil || len(lost) != 1 || lost[0] != dead[0].Claim {
		t.Errorf("renewing a released claim: lost %v, %v", lost, err)
	}
}

// The change counter moves when copies are written pending and stays
// otherwise; the probe says when the next copy scheduled later comes due.
func testCopyProbe(t *testing.T, h Harness) {
	d := h.New(t, 0)
	probe := func() dialects.Probe {
		t.Helper()
		p, err := d.CopyProbe(ctx(t))
		if err != nil {
			t.Fatalf("copy probe: %v", err)
		}
		return p
	}
	p0 := probe()
	if p0.Later {
		t.Errorf("no copies, yet one comes due in %s", p0.NextDue)
	}
	rows := passRows(t, h, d, testkit.Row("a"), testkit.Row("b"))
	complete(t, d, fanned(rows["a"]))
	if p := probe(); p.Last != p0.Last {
		t.Errorf("a pass without copies moved the counter from %d to %d", p0.Last, p.Last)
	}
	complete(t, d, fanned(rows["b"], copyOf("x", dialects.CopyRetry, 1, 0, "e")))
	p1 := probe()
	if p1.Last <= p0.Last || p1.Later {
		t.Fatalf("after a copy was written pending, due now: %+v (before %+v)", p1, p0)
	}
	c := copyClaim(t, d, 1, lease)
	if p := probe(); p.Last != p1.Last {
		t.Errorf("a claim moved the counter from %d to %d", p1.Last, p.Last)
	}
	copyComplete(t, d, dialects.Outcome{Claim: c[0].Claim, Kind: dialects.OutcomeRetry, Delay: time.Hour, Error: "e"})
	p2 := probe()
	if p2.Last <= p1.Last || !p2.Later || p2.NextDue < 59*time.Minute || p2.NextDue > time.Hour {
		t.Errorf("after a retry in an hour: %+v (before %+v)", p2, p1)
	}
}

// What operators see and do: counts per destination and state, listings
// with filters and pages, the copies of a row, replays of one
// destination's copies and copies for a destination added later.
func testCopyOperators(t *testing.T, h Harness) {
	d := h.New(t, 0)
	rows := passRows(t, h, d, testkit.Row("one", testkit.Key("k")), testkit.Row("two", testkit.Key("k")), testkit.Row("three"))
	complete(t, d, fanned(rows["one"], copyOf("b", dialects.CopyDead, 5, 0, "boom"), copyOf("c", dialects.CopyDead, 1, 0, "other")),
		fanned(rows["two"], copyOf("b", dialects.CopyRetry, 1, 0, "e"), copyOf("c", dialects.CopyBehind, 0, 0, "")), fanned(rows["three"]))
	insert(t, d, testkit.Row("pending"))
	pending := h.claim(t, d, 1)[0]
	complete(t, d, outcome(pending, dialects.OutcomeRelease))

	counts, err := d.CopyCounts(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range counts {
		got = append(got, fmt.Sprintf("%s/%s=%d", c.Destination, c.State, c.Rows))
		if c.State != dialects.Pending && c.OldestDue != 0 {
			t.Errorf("%+v: an oldest due for copies not pending", c)
		}
	}
	if want := "b/dead=1 b/pending=1 c/dead=1 c/pending=1"; strings.Join(got, " ") != want {
		t.Errorf("counts %v, want %s", got, want)
	}

	listOf := func(f dialects.CopyFilter) string {
		t.Helper()
		cs, err := d.CopyList(ctx(t), dialects.CopyListParams{Filter: f, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range cs {
			out = append(out, c.Destination+"/"+c.Topic)
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	for _, c := range []struct {
		f    dialects.CopyFilter
		want string
	}{
		{dialects.CopyFilter{}, "b/one b/two c/one c/two"},
		{dialects.CopyFilter{Filter: dialects.Filter{States: []dialects.State{dialects.Dead}}}, "b/one c/one"},
		{dialects.CopyFilter{Filter: dialects.Filter{States: []dialects.State{dialects.Dead}}, Destination: "b"}, "b/one"},
		{dialects.CopyFilter{Filter: dialects.Filter{ErrorContains: "BOO"}}, "b/one"},
		{dialects.CopyFilter{Filter: dialects.Filter{IDs: []uuid.UUID{rows["two"].ID}}}, "b/two c/two"},
		{dialects.CopyFilter{Filter: dialects.Filter{Key: str("other")}}, ""},
	} {
		if got := listOf(c.f); got != c.want {
			t.Errorf("list %+v: %s, want %s", c.f, got, c.want)
		}
	}
	// Pages of one copy each list every copy once, newest update first;
	// the copies one completion wrote share their update and sequence.
	var paged []string
	p := dialects.CopyListParams{Limit: 1}
	for range 10 {
		cs, err := d.CopyList(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) == 0 {
			break
		}
		c := cs[0]
		paged = append(paged, c.Destination+"/"+c.Topic)
		cur := dialects.CursorOf(c.ListedRow)
		p.After, p.AfterDestination = &cur, c.Destination
	}
	if want := "c/two b/two c/one b/one"; strings.Join(paged, " ") != want {
		t.Errorf("pages %v, want %s", paged, want)
	}

	// A replay of b's dead copies puts back only b's, never c's, and
	// records it in the row's history.
	n, err := d.CopyReplay(ctx(t), "b", []uuid.UUID{rows["one"].ID, rows["two"].ID}, []dialects.State{dialects.Dead}, "ops")
	if err != nil || n != 1 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	cs := copiesOfRow(t, d, rows["one"].ID)
	if b := cs["b"]; b.State != dialects.Pending || b.Attempt != 0 || b.LastError != nil {
		t.Errorf("the replayed copy: %+v", b)
	}
	if c := cs["c"]; c.State != dialects.Dead {
		t.Errorf("the other destination's copy: %+v", c)
	}
	hist := recorded(rowDetail(t, d, rows["one"].ID, 10).Attempts)
	if len(hist) != 1 || hist[0].Outcome != dialects.OutcomeReplayed || hist[0].Destination != "b" || hist[0].ReplayedBy != "ops" {
		t.Errorf("history after the replay: %+v", hist)
	}
	// c's copy of two heads its lane: c's copy of one is dead.
	claimedB := copyClaim(t, d, 10, lease)
	if lanes(claimedB) != "b/one b/two c/two" {
		t.Fatalf("after the replay, claimed %s", lanes(claimedB))
	}
	if n, err := d.CopyReplay(ctx(t), "b", []uuid.UUID{rows["one"].ID}, dialects.States, ""); err != nil || n != 0 {
		t.Errorf("replayed a processing copy: %d, %v", n, err)
	}

	// Backfill: a copy for each delivered row that has none of the
	// destination; not for a row that is not delivered, nor twice.
	ids := []uuid.UUID{rows["one"].ID, rows["two"].ID, rows["three"].ID, pending.ID}
	if n, err := d.CopyBackfill(ctx(t), "e", ids, "ops"); err != nil || n != 3 {
		t.Fatalf("backfill: %d, %v; want the three delivered rows", n, err)
	}
	if n, err := d.CopyBackfill(ctx(t), "e", ids, "ops"); err != nil || n != 0 {
		t.Errorf("a second backfill made %d, %v", n, err)
	}
	if n, err := d.CopyBackfill(ctx(t), "b", ids, ""); err != nil || n != 1 {
		t.Errorf("a backfill of b made %d (%v), want only three's", n, err)
	}
	e := copiesOfRow(t, d, rows["three"].ID)["e"]
	if e.State != dialects.Pending || e.Attempt != 0 || e.Topic != "three" || e.Sequence != rows["three"].Sequence {
		t.Errorf("a backfilled copy: %+v", e)
	}
	if got := copiesOfRow(t, d, pending.ID); len(got) != 0 {
		t.Errorf("a pending row got copies: %+v", got)
	}
}

// Retention deletes copies in a state updated before its age, in batches.
func testCopyPurge(t *testing.T, h Harness) {
	d := h.New(t, 0)
	rows := passRows(t, h, d, testkit.Row("a"), testkit.Row("b"))
	complete(t, d, fanned(rows["a"], copyOf("x", dialects.CopyDead, 1, 0, "e"), copyOf("y", dialects.CopyDead, 1, 0, "e")),
		fanned(rows["b"], copyOf("x", dialects.CopyDead, 1, 0, "e"), copyOf("y", dialects.CopyRetry, 1, 0, "e")))
	purge := func(p dialects.PurgeParams) int {
		t.Helper()
		n, err := d.CopyPurge(ctx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := purge(dialects.PurgeParams{State: dialects.Dead, OlderThan: time.Hour, Batch: 10}); n != 0 {
		t.Fatalf("purged %d copies updated just now", n)
	}
	time.Sleep(10 * time.Millisecond)
	if n := purge(dialects.PurgeParams{State: dialects.Dead, OlderThan: time.Millisecond, Batch: 2}); n != 2 {
		t.Fatalf("purged %d with a batch of 2", n)
	}
	if n := purge(dialects.PurgeParams{State: dialects.Dead, OlderThan: time.Millisecond, Batch: 10}); n != 1 {
		t.Fatalf("purged %d, want the last dead copy", n)
	}
	if cs := copiesOfRow(t, d, rows["b"].ID); len(cs) != 1 || cs["y"].State != dialects.Pending {
		t.Errorf("a pending copy was purged: %+v", cs)
	}
}
