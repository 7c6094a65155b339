// Package dialecttest is the conformance suite that every dialect passes: the
// same subtests run against PostgreSQL and, when a server is configured,
// SQL Server. Each subtest gets a fresh, migrated namespace from the harness.
package dialecttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testkit"
)

// Harness adapts one dialect to the suite.
type Harness struct {
	// New returns a dialect on a fresh namespace, migrated to the latest
	// version (or to upTo when upTo > 0).
	New func(t *testing.T, upTo int) dialects.Dialect
	// Exec runs one statement of the dialect's own SQL, for setups the
	// Dialect interface does not offer (backdating a row). The statement may
	// use {{t}}, {{c "name"}}, {{it}} and {{ic "name"}} as the migrations do.
	Exec func(t *testing.T, d dialects.Dialect, sql string, args ...any)
	// BackdateUpdated is the statement that sets updated_at of every row in
	// a state ($1) to a given number of hours ago ($2).
	BackdateUpdated string
	// Empty returns a dialect on a fresh namespace where nothing is
	// migrated: no outbox table, no history table.
	Empty func(t *testing.T) dialects.Dialect
	// Unreachable returns a dialect whose database accepts no connection.
	Unreachable func(t *testing.T) dialects.Dialect
	// Named returns a dialect on a fresh, migrated namespace whose sessions
	// go by the application name app, and that its database tells apart
	// from every other dialect the harness opens (SQL Server tells relays
	// apart by their workstation and process).
	Named func(t *testing.T, app string) dialects.Dialect
	// Begin opens a transaction that a subtest holds open while the dialect
	// claims, relays and probes: the subtests of the outbox's gate and the
	// inbox relay's need producers that commit out of order and sessions
	// that write other tables.
	Begin func(t *testing.T, d dialects.Dialect) Tx
	// RefusedLogin opens and pings a dialect whose server answers and
	// refuses the login, and returns the error; RefusedBecause is a part of
	// the reason the server gives.
	RefusedLogin   func(t *testing.T) error
	RefusedBecause string

	// byKey runs the claims of a subtest with WalkKeys.
	byKey bool
	// settle makes the gate's subtests claim with ClaimParams.Settle (the
	// probe inside the claim) rather than probe, then claim.
	settle bool
}

// walk is the walk of the subtest's claims.
func (h Harness) walk() dialects.ClaimWalk {
	if h.byKey {
		return dialects.WalkKeys
	}
	return dialects.WalkSchedule
}

// rowsOf is the rows of a claim.
func rowsOf(c dialects.Claimed, err error) ([]dialects.Row, error) { return c.Rows, err }

type subtest struct {
	name string
	fn   func(*testing.T, Harness)
}

// Run runs the whole suite.
func Run(t *testing.T, h Harness) {
	tests := []subtest{
		{"ClaimRespectsLimitAndSchedule", testClaimLimitAndSchedule},
		{"ClaimConsecutiveHeadsOfOneKey", testConsecutiveHeads},
		{"ConcurrentClaimers", testConcurrentClaimers},
		{"RetryHoldsItsKey", testRetryHoldsKey},
		{"DeadDoesNotHoldItsKey", testDeadDoesNotHold},
		{"ExpiredLeaseIsClaimableAgain", testExpiredLease},
		{"StaleTokenIsLost", testStaleToken},
		{"RenewLeases", testRenew},
		{"OutcomesWriteTheTransitionTable", testOutcomes},
		{"Replay", testReplay},
		{"ReplayAndListSelectByTheWholeRow", testRowMatch},
		{"Purge", testPurge},
		{"Stats", testStats},
		{"ClaimWithFewHeadsTakesRuns", testMaxHeads},
		{"ListPagesAndFiltersByTopic", testList},
		{"PendingOldestDueAndScheduledLater", testPendingDue},
		{"CountByTopicAndStatesWrittenByHand", testCountByTopic},
		{"BlockedKeys", testBlockedKeys},
		{"DeadGroupsOfTheNewestRows", testDeadGroups},
		{"ErrorsAreMapped", testErrors},
		{"MigrationHistory", testMigrationHistory},
		{"OtherRelays", testOtherRelays},
		{"AClaimSettlesWithItsOwnProbe", testClaimSettles},
		{"AProbeSaysWhenTheNextRowComesDue", testProbeNextDue},
	}
	tests = append(tests, runGate(t, h)...)
	tests = append(tests, boundsTests()...)
	tests = append(tests, destinationTests()...)
	tests = append(tests, attemptTests()...)
	tests = append(tests, copyTests()...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
	// The claim that walks the keys must obey every rule the schedule-order
	// claim does.
	byKey := h
	byKey.byKey = true
	for _, tc := range tests {
		if !strings.HasPrefix(tc.name, "Claim") && !strings.HasPrefix(tc.name, "Gate") && !strings.Contains(tc.name, "Key") && !strings.Contains(tc.name, "Lease") && tc.name != "ConcurrentClaimers" {
			continue
		}
		t.Run("ByKey/"+tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, byKey)
		})
	}
	// The gate's rules hold as well when the claim runs its own probe.
	settle := h
	settle.settle = true
	for _, tc := range tests {
		if !strings.HasPrefix(tc.name, "Gate") && !strings.HasPrefix(tc.name, "AClaim") {
			continue
		}
		t.Run("Settle/"+tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, settle)
		})
	}
}

const lease = 30 * time.Second

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func str(s string) *string { return &s }

// anyTopic is the topic of rows whose topic does not matter to a subtest.
const anyTopic = "test.topic"

// insert inserts rows; one without a topic gets anyTopic, one without a
// payload a small JSON object.
func insert(t *testing.T, d dialects.Dialect, rows ...dialects.NewRow) {
	t.Helper()
	for i := range rows {
		if rows[i].Payload == nil {
			rows[i].Payload = []byte(`{"n":` + strconv.Itoa(i) + `}`)
		}
		if rows[i].Topic == "" {
			rows[i].Topic = anyTopic
		}
	}
	if err := d.OutboxInsert(ctx(t), rows); err != nil {
		t.Fatalf("insert: %v", err)
	}
}

func keyed(key string, n int) []dialects.NewRow {
	rows := make([]dialects.NewRow, n)
	for i := range rows {
		rows[i] = testkit.Row(anyTopic, testkit.Key(key), testkit.Payload(fmt.Sprintf(`{"key":%q,"i":%d}`, key, i)))
	}
	return rows
}

func (h Harness) claim(t *testing.T, d dialects.Dialect, limit int) []dialects.Row {
	t.Helper()
	rows, err := rowsOf(d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: limit, Lease: lease, Token: uuid.New(), Walk: h.walk()}))
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return rows
}

func list(t *testing.T, d dialects.Dialect, f dialects.Filter, limit int) []dialects.ListedRow {
	t.Helper()
	rows, _, err := dialects.List(ctx(t), d, f, nil, limit)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	return rows
}

func complete(t *testing.T, d dialects.Dialect, outcomes ...dialects.Outcome) []dialects.Claim {
	t.Helper()
	lost, err := d.OutboxComplete(ctx(t), outcomes)
	if err != nil {
		t.Fatalf("complete: %v", err)
	}
	return lost
}

func outcome(r dialects.Row, kind dialects.OutcomeKind) dialects.Outcome {
	return dialects.Outcome{Claim: r.Claim, Kind: kind}
}

func byKey(rows []dialects.Row) map[string][]dialects.Row {
	m := map[string][]dialects.Row{}
	for _, r := range rows {
		m[r.Key] = append(m[r.Key], r)
	}
	return m
}

func testClaimLimitAndSchedule(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, testkit.Rows(10, anyTopic, nil)...)
	insert(t, d, testkit.Row("later", testkit.ScheduledAt(time.Now().Add(time.Hour))))
	got := h.claim(t, d, 4)
	if len(got) != 4 {
		t.Fatalf("claimed %d rows with limit 4", len(got))
	}
	got = append(got, h.claim(t, d, 100)...)
	if len(got) != 10 {
		t.Fatalf("claimed %d rows in all, want the 10 due ones", len(got))
	}
	seen := map[uuid.UUID]bool{}
	for _, r := range got {
		if r.Topic == "later" {
			t.Fatal("a row scheduled an hour ahead was claimed")
		}
		if seen[r.ID] {
			t.Fatalf("row %s claimed twice", r.ID)
		}
		seen[r.ID] = true
		if r.Attempt != 0 || r.MaxAttempts != 5 || r.Key != "" || r.AggregateType != nil {
			t.Errorf("row fields: %+v", r)
		}
	}
	if more := h.claim(t, d, 100); len(more) != 0 {
		t.Fatalf("claimed %d rows that are already held", len(more))
	}
}

func testConsecutiveHeads(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, keyed("k1", 5)...)
	got := h.claim(t, d, 100)
	if len(got) != 5 {
		t.Fatalf("claimed %d of the 5 head rows of one key", len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i].Sequence <= got[i-1].Sequence {
			t.Fatalf("rows of one key not in sequence order: %d then %d", got[i-1].Sequence, got[i].Sequence)
		}
	}
	// While they are held, a new row of the key is not claimable.
	insert(t, d, keyed("k1", 1)...)
	if more := h.claim(t, d, 100); len(more) != 0 {
		t.Fatalf("claimed a row of a key whose earlier rows are processing")
	}
	for _, r := range got {
		complete(t, d, outcome(r, dialects.OutcomeDelivered))
	}
	if more := h.claim(t, d, 100); len(more) != 1 {
		t.Fatalf("after the key's rows were delivered, claimed %d, want the new row", len(more))
	}
}

// Several claimers at once, thousands of rows over many keys: no row is
// claimed twice, no key is held by two claims at once, and each key's rows
// are claimed in sequence order.
func testConcurrentClaimers(t *testing.T, h Harness) {
	d := h.New(t, 0)
	const keys, perKey, unkeyed = 200, 15, 1000
	var rows []dialects.NewRow
	for i := range perKey {
		for k := range keys {
			rows = append(rows, testkit.Row(anyTopic, testkit.Key("key-"+strconv.Itoa(k)), testkit.Payload(fmt.Sprintf(`{"i":%d}`, i))))
		}
		rows = append(rows, testkit.Rows(unkeyed/perKey, anyTopic, nil)...)
	}
	// Empty keys are unkeyed too.
	rows = append(rows, testkit.Rows(10, anyTopic, nil, testkit.Key(""))...)
	insert(t, d, rows...)
	total := len(rows)

	var (
		mu        sync.Mutex
		heldBy    = map[string]uuid.UUID{} // key -> token of the claim holding it
		lastSeq   = map[string]int64{}
		claimed   = map[uuid.UUID]bool{}
		delivered atomic.Int64
		failures  []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	const claimers = 4
	var wg sync.WaitGroup
	for c := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			idle := 0
			for delivered.Load() < int64(total) && idle < 5000 {
				batch, err := rowsOf(d.OutboxClaim(context.Background(), dialects.ClaimParams{Limit: 1 + rng.IntN(150), Lease: lease, Token: uuid.New(), Walk: h.walk()}))
				if err != nil {
					fail("claim: %v", err)
					return
				}
				if len(batch) == 0 {
					idle++
					time.Sleep(2 * time.Millisecond)
					continue
				}
				idle = 0
				mu.Lock()
				for _, r := range batch {
					if claimed[r.ID] {
						failures = append(failures, fmt.Sprintf("row %s claimed twice", r.ID))
					}
					claimed[r.ID] = true
					if !r.Keyed() {
						continue
					}
					if tok, ok := heldBy[r.Key]; ok && tok != r.Token {
						failures = append(failures, fmt.Sprintf("key %s held by two claims at once", r.Key))
					}
					heldBy[r.Key] = r.Token
					if r.Sequence <= lastSeq[r.Key] {
						failures = append(failures, fmt.Sprintf("key %s: sequence %d claimed after %d", r.Key, r.Sequence, lastSeq[r.Key]))
					}
					lastSeq[r.Key] = r.Sequence
				}
				mu.Unlock()
				// Deliver, sometimes in two completions, as the engine does.
				if rng.IntN(3) == 0 {
					time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
				}
				out := make([]dialects.Outcome, len(batch))
				for i, r := range batch {
					out[i] = outcome(r, dialects.OutcomeDelivered)
				}
				// Release the test's record of the hold before the database
				// does, so that a claim that follows the commit never sees a
				// stale hold.
				mu.Lock()
				for _, r := range batch {
					if r.Keyed() && heldBy[r.Key] == r.Token {
						delete(heldBy, r.Key)
					}
				}
				mu.Unlock()
				lost, err := d.OutboxComplete(context.Background(), out)
				if err != nil {
					fail("complete: %v", err)
					return
				}
				if len(lost) > 0 {
					fail("%d claims lost without any lease passing", len(lost))
				}
				delivered.Add(int64(len(batch)))
			}
		}()
	}
	wg.Wait()
	for _, f := range failures[:min(len(failures), 10)] {
		t.Error(f)
	}
	if int(delivered.Load()) != total || len(claimed) != total {
		t.Fatalf("delivered %d, claimed %d distinct, want %d", delivered.Load(), len(claimed), total)
	}
	st, err := d.OutboxStats(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows[dialects.Delivered] != int64(total) {
		t.Fatalf("stats: %v", st.Rows)
	}
}

func testRetryHoldsKey(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, keyed("k", 3)...)
	insert(t, d, keyed("other", 1)...)
	got := byKey(h.claim(t, d, 100))
	k := got["k"]
	if len(k) != 3 || len(got["other"]) != 1 {
		t.Fatalf("claimed %v", got)
	}
	// The head fails: retried an hour from now; the rest of the run is released.
	lost := complete(t, d,
		dialects.Outcome{Claim: k[0].Claim, Kind: dialects.OutcomeRetry, Delay: time.Hour, Error: "HTTP 503"},
		outcome(k[1], dialects.OutcomeRelease), outcome(k[2], dialects.OutcomeRelease),
		outcome(got["other"][0], dialects.OutcomeDelivered))
	if len(lost) != 0 {
		t.Fatalf("lost %v", lost)
	}
	insert(t, d, keyed("other", 1)...)
	again := byKey(h.claim(t, d, 100))
	if len(again["k"]) != 0 {
		t.Fatalf("a row waiting for a retry did not hold back its key: claimed %d rows of it", len(again["k"]))
	}
	if len(again["other"]) != 1 {
		t.Fatalf("another key was held back: %v", again)
	}
	// Once the retry is due, the head comes first, with the rest behind it.
	lost = complete(t, d, dialects.Outcome{Claim: claimAgainDue(t, h, d, k[0]).Claim, Kind: dialects.OutcomeRetry, Delay: 0, Error: "again"})
	if len(lost) != 0 {
		t.Fatalf("lost %v", lost)
	}
	rows := h.claim(t, d, 100)
	if len(rows) != 3 || rows[0].ID != k[0].ID || rows[0].Attempt != 2 {
		t.Fatalf("after the retry came due, claimed %+v", rows)
	}
}

// claimAgainDue makes a row that waits for its retry due now and claims it.
func claimAgainDue(t *testing.T, h Harness, d dialects.Dialect, r dialects.Row) dialects.Row {
	t.Helper()
	h.Exec(t, d, `UPDATE {{t}} SET {{c "scheduled_at"}} = {{c "created_at"}} WHERE {{c "state"}} = 'pending' AND {{c "attempt"}} > 0`)
	rows := h.claim(t, d, 1)
	if len(rows) != 1 || rows[0].ID != r.ID {
		t.Fatalf("the due retry was not claimed first: %+v", rows)
	}
	if rows[0].Attempt != 1 {
		t.Fatalf("attempt after one retry: %d", rows[0].Attempt)
	}
	return rows[0]
}

func testDeadDoesNotHold(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, keyed("k", 2)...)
	rows := h.claim(t, d, 1)
	if len(rows) != 1 {
		t.Fatalf("claimed %d", len(rows))
	}
	complete(t, d, dialects.Outcome{Claim: rows[0].Claim, Kind: dialects.OutcomeDead, Error: `no route matches topic "x"`})
	next := h.claim(t, d, 10)
	if len(next) != 1 || next[0].Sequence <= rows[0].Sequence {
		t.Fatalf("a dead row held back its key: claimed %+v", next)
	}
}

func testExpiredLease(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, keyed("k", 2)...)
	// A retry first, so that attempt is 1 and "unchanged" means something.
	rows := h.claim(t, d, 10)
	complete(t, d, dialects.Outcome{Claim: rows[0].Claim, Kind: dialects.OutcomeRetry, Error: "e"}, outcome(rows[1], dialects.OutcomeRelease))
	// A claim whose lease ends at once, as if its replica died.
	dead, err := rowsOf(d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: 1, Lease: 0, Token: uuid.New(), Walk: h.walk()}))
	if err != nil || len(dead) != 1 || dead[0].Attempt != 1 {
		t.Fatalf("claim: %v %+v", err, dead)
	}
	if more := h.claim(t, d, 10); len(more) != 0 {
		t.Fatalf("claimed %d rows while the head is processing", len(more))
	}
	// A caller that still holds the claim does not release it.
	if n, err := releaseExpired(t, d, 100, []uuid.UUID{dead[0].Token}); err != nil || n != 0 {
		t.Fatalf("released a claim its caller keeps: %d, %v", n, err)
	}
	n, err := releaseExpired(t, d, 100, nil)
	if err != nil || n != 1 {
		t.Fatalf("release expired: %d, %v", n, err)
	}
	again := h.claim(t, d, 10)
	if len(again) != 2 || again[0].ID != dead[0].ID || again[0].Attempt != 1 {
		t.Fatalf("the expired row was not claimable again with attempt unchanged: %+v", again)
	}
	// The dead claim's late completion is lost and writes nothing.
	lost := complete(t, d, outcome(dead[0], dialects.OutcomeDelivered))
	if len(lost) != 1 {
		t.Fatalf("a completion by the expired claim was not reported lost")
	}
	// A live lease is not released.
	if n, _ := releaseExpired(t, d, 100, nil); n != 0 {
		t.Fatalf("released %d rows with live leases", n)
	}
}

func testStaleToken(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, testkit.Rows(2, anyTopic, nil)...)
	rows := h.claim(t, d, 10)
	stale := rows[0].Claim
	stale.Token = uuid.New()
	lost := complete(t, d, dialects.Outcome{Claim: stale, Kind: dialects.OutcomeDead, Error: "x"}, outcome(rows[1], dialects.OutcomeDelivered))
	if len(lost) != 1 || lost[0] != stale {
		t.Fatalf("lost = %v, want only the stale claim", lost)
	}
	listed := list(t, d, dialects.Filter{IDs: []uuid.UUID{rows[0].ID}, States: dialects.States}, 10)
	if len(listed) != 1 || listed[0].State != dialects.Processing || listed[0].LastError != nil {
		t.Fatalf("a stale completion changed the row: %+v", listed)
	}
	// The real token still completes it.
	if lost := complete(t, d, outcome(rows[0], dialects.OutcomeDelivered)); len(lost) != 0 {
		t.Fatalf("the holder's completion was lost")
	}
}

func testRenew(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, testkit.Rows(3, anyTopic, nil)...)
	a, err := rowsOf(d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: 2, Lease: lease, Token: uuid.New(), Walk: h.walk()}))
	if err != nil || len(a) != 2 {
		t.Fatalf("claim: %v %v", a, err)
	}
	b, err := rowsOf(d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: 1, Lease: 0, Token: uuid.New(), Walk: h.walk()}))
	if err != nil || len(b) != 1 {
		t.Fatal(err)
	}
	var claims []dialects.Claim
	for _, r := range append(a, b...) {
		claims = append(claims, r.Claim)
	}
	lost, err := d.OutboxRenewLeases(ctx(t), claims, lease)
	if err != nil || len(lost) != 0 {
		t.Fatalf("renewing held claims: lost %v, %v", lost, err)
	}
	// A row is held by its own claim's token, not by any token held: a's
	// first row paired with b's token (which holds b's row) is not held.
	crossed := dialects.Claim{ID: a[0].ID, Token: b[0].Token}
	lost, err = d.OutboxRenewLeases(ctx(t), []dialects.Claim{crossed, a[1].Claim}, lease)
	if err != nil || len(lost) != 1 || lost[0] != crossed {
		t.Fatalf("renewing a row with another claim's token: lost %v, %v; want that claim lost", lost, err)
	}
	// b's lease was 0 but is now renewed: it must not be released.
	if n, _ := releaseExpired(t, d, 10, nil); n != 0 {
		t.Fatalf("released %d renewed rows", n)
	}
	complete(t, d, outcome(a[0], dialects.OutcomeDelivered))
	lost, err = d.OutboxRenewLeases(ctx(t), claims, lease)
	if err != nil || len(lost) != 1 || lost[0] != a[0].Claim {
		t.Fatalf("after a completion, renewal reported lost %v, want the completed claim", lost)
	}
}

func testOutcomes(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, testkit.Row("a"), testkit.Row("b"), testkit.Row("c"), testkit.Row("d"))
	rows := h.claim(t, d, 10)
	topic := map[string]dialects.Row{}
	for _, r := range rows {
		topic[r.Topic] = r
	}
	complete(t, d,
		outcome(topic["a"], dialects.OutcomeDelivered),
		dialects.Outcome{Claim: topic["b"].Claim, Kind: dialects.OutcomeRetry, Delay: time.Hour, Error: "HTTP 500: boom"},
		dialects.Outcome{Claim: topic["c"].Claim, Kind: dialects.OutcomeDead, Error: "dead reason"},
		outcome(topic["d"], dialects.OutcomeRelease))
	listed := list(t, d, dialects.Filter{States: dialects.States}, 10)
	got := map[string]dialects.ListedRow{}
	for _, r := range listed {
		got[r.Topic] = r
	}
	check := func(topic string, state dialects.State, attempt int, lastErr string) {
		t.Helper()
		r := got[topic]
		le := ""
		if r.LastError != nil {
			le = *r.LastError
		}
		if r.State != state || r.Attempt != attempt || le != lastErr {
			t.Errorf("%s: state=%s attempt=%d last_error=%q; want %s %d %q", topic, r.State, r.Attempt, le, state, attempt, lastErr)
		}
	}
	check("a", dialects.Delivered, 0, "")
	check("b", dialects.Pending, 1, "HTTP 500: boom")
	check("c", dialects.Dead, 0, "dead reason")
	check("d", dialects.Pending, 0, "")
	// Only the released row is claimable now: b waits an hour.
	next := h.claim(t, d, 10)
	if len(next) != 1 || next[0].Topic != "d" {
		t.Fatalf("claimable after the outcomes: %+v", next)
	}
}

func testReplay(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, testkit.Row("order.created"), testkit.Row("order.paid"), testkit.Row("user.created"), testkit.Row("held"))
	rows := h.claim(t, d, 10)
	var out []dialects.Outcome
	var held dialects.Row
	for _, r := range rows {
		if r.Topic == "held" {
			held = r
			continue
		}
		out = append(out, dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeDead, Error: "boom " + r.Topic})
	}
	complete(t, d, out...)
	n, err := dialects.Replay(ctx(t), d, dialects.Filter{TopicMatch: func(s string) bool { return len(s) > 6 && s[:6] == "order." }}, true, "")
	if err != nil || n != 2 {
		t.Fatalf("dry run counted %d, %v; want 2", n, err)
	}
	if st, _ := d.OutboxStats(ctx(t)); st.Rows[dialects.Dead] != 3 {
		t.Fatalf("a dry run changed rows: %v", st.Rows)
	}
	n, err = dialects.Replay(ctx(t), d, dialects.Filter{ErrorContains: "order.paid"}, false, "")
	if err != nil || n != 1 {
		t.Fatalf("replay by error text: %d, %v", n, err)
	}
	// A processing row is never touched, even by id.
	n, err = dialects.Replay(ctx(t), d, dialects.Filter{IDs: []uuid.UUID{held.ID}, States: dialects.States}, false, "")
	if err != nil || n != 0 {
		t.Fatalf("replay touched a processing row: %d, %v", n, err)
	}
	again := h.claim(t, d, 10)
	if len(again) != 1 || again[0].Topic != "order.paid" || again[0].Attempt != 0 {
		t.Fatalf("the replayed row: %+v", again)
	}
	complete(t, d, outcome(again[0], dialects.OutcomeDelivered))
	// Delivered rows are replayed when asked for by id.
	n, err = dialects.Replay(ctx(t), d, dialects.Filter{IDs: []uuid.UUID{again[0].ID}}, false, "")
	if err != nil || n != 1 {
		t.Fatalf("replay of a delivered row by id: %d, %v", n, err)
	}
	listed := list(t, d, dialects.Filter{IDs: []uuid.UUID{again[0].ID}, States: dialects.States}, 1)
	if len(listed) != 1 || listed[0].State != dialects.Pending || listed[0].LastError != nil || listed[0].ID != again[0].ID {
		t.Fatalf("after replay: %+v", listed)
	}
}

// OutboxRowsOf reads rows whole (payload, headers, the variables a route
// filter reads); a Filter's Rows decides the rows of the topics it names
// by them, in a replay and in a listing, and leaves the other topics to
// TopicMatch.
func testRowMatch(t *testing.T, h Harness) {
	d := h.New(t, 0)
	big, small, other := uuid.New(), uuid.New(), uuid.New()
	insert(t, d,
		testkit.Row("payment.made", testkit.ID(big), testkit.Key("acct-1"), testkit.Payload(`{"amount": 150}`), testkit.Headers(`{"X-Tenant": "acme"}`), testkit.AggregateType("account")),
		testkit.Row("payment.made", testkit.ID(small), testkit.Payload(`{"amount": 5}`)),
		testkit.Row("order.created", testkit.ID(other), testkit.Payload(`{"amount": 5}`)))
	rows, err := d.OutboxRowsOf(ctx(t), []uuid.UUID{big, small, uuid.New()})
	if err != nil || len(rows) != 2 {
		t.Fatalf("OutboxRowsOf: %d rows, %v; want the two that exist", len(rows), err)
	}
	byID := map[uuid.UUID]dialects.Row{}
	for _, r := range rows {
		byID[r.ID] = r
	}
	b := byID[big]
	if b.Topic != "payment.made" || b.Key != "acct-1" || b.AggregateType == nil || *b.AggregateType != "account" || b.Sequence == 0 || b.CreatedAt.IsZero() ||
		!strings.Contains(string(b.Payload), "150") || !strings.Contains(string(b.Headers), "acme") || byID[small].Key != "" {
		t.Fatalf("OutboxRowsOf read %+v and %+v", b, byID[small])
	}
	if l := list(t, d, dialects.Filter{IDs: []uuid.UUID{big}, States: dialects.States}, 1); len(l) != 1 || l[0].Attempt != b.Attempt ||
		l[0].MaxAttempts != b.MaxAttempts || l[0].Sequence != b.Sequence || !l[0].CreatedAt.Equal(b.CreatedAt) || b.MaxAttempts == 0 {
		t.Fatalf("OutboxRowsOf read attempt %d of %d, sequence %d, created %s; the listing %+v", b.Attempt, b.MaxAttempts, b.Sequence, b.CreatedAt, l)
	}
	var all []dialects.Outcome
	for _, r := range h.claim(t, d, 10) {
		all = append(all, dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeDead, Error: "boom"})
	}
	complete(t, d, all...)
	read := 0
	f := dialects.Filter{Rows: &dialects.RowMatch{
		ByRow: func(topic string) bool { return topic == "payment.made" },
		Keep: func(r dialects.Row) bool {
			read++
			return strings.Contains(string(r.Payload), "150")
		},
	}}
	if listed := list(t, d, f, 10); len(listed) != 2 || read != 2 || slices.ContainsFunc(listed, func(r dialects.ListedRow) bool { return r.ID == small }) {
		t.Fatalf("a listing by the whole row: %+v (%d rows read whole); want the big payment and the order", listed, read)
	}
	f.TopicMatch = func(topic string) bool { return topic == "payment.made" }
	n, err := dialects.Replay(ctx(t), d, f, false, "")
	if err != nil || n != 1 {
		t.Fatalf("a replay by the whole row: %d, %v; want the big payment alone", n, err)
	}
	again := h.claim(t, d, 10)
	if len(again) != 1 || again[0].ID != big {
		t.Fatalf("after the replay: %+v", again)
	}
}

func testPurge(t *testing.T, h Harness) {
	d := h.New(t, 0)
	for range 3 {
		insert(t, d, testkit.Rows(3, anyTopic, nil)...)
	}
	rows := h.claim(t, d, 100)
	var out []dialects.Outcome
	for i, r := range rows {
		kind := dialects.OutcomeDelivered
		if i%3 == 0 {
			kind = dialects.OutcomeDead
		}
		out = append(out, outcome(r, kind))
	}
	complete(t, d, out...)
	if n, err := d.OutboxPurge(ctx(t), dialects.PurgeParams{State: dialects.Delivered, OlderThan: time.Hour, Batch: 100}); err != nil || n != 0 {
		t.Fatalf("purged %d fresh rows (%v)", n, err)
	}
	// Rows delivered just now are an hour from being old enough; with none
	// in a state, a row that enters it now is.
	wait := func(state dialects.State, age time.Duration) time.Duration {
		t.Helper()
		w, err := d.OutboxPurgeWait(ctx(t), state, age)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	if w := wait(dialects.Delivered, time.Hour); w < 59*time.Minute || w > time.Hour {
		t.Fatalf("rows delivered just now are old enough in %s, want just under an hour", w)
	}
	if w := wait(dialects.Pending, 2*time.Hour); w != 2*time.Hour {
		t.Fatalf("with no pending row, a pending row is old enough in %s, want the age, 2h", w)
	}
	h.Exec(t, d, h.BackdateUpdated, "delivered", 2)
	if w := wait(dialects.Delivered, time.Hour); w > -59*time.Minute {
		t.Fatalf("rows delivered two hours ago are old enough in %s, want an hour ago", w)
	}
	total := 0
	for {
		n, err := d.OutboxPurge(ctx(t), dialects.PurgeParams{State: dialects.Delivered, OlderThan: time.Hour, Batch: 4})
		if err != nil {
			t.Fatal(err)
		}
		if n > 4 {
			t.Fatalf("purged %d rows with a batch of 4", n)
		}
		if n == 0 {
			break
		}
		total += n
	}
	st, _ := d.OutboxStats(ctx(t))
	if total != 6 || st.Rows[dialects.Delivered] != 0 || st.Rows[dialects.Dead] != 3 {
		t.Fatalf("purged %d; left %v", total, st.Rows)
	}
}

func testStats(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, testkit.Row("a"), testkit.Row("a"), testkit.Row("b"), testkit.Row("c"))
	rows := h.claim(t, d, 3)
	var out []dialects.Outcome
	for _, r := range rows {
		out = append(out, dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeDead, Error: "x"})
	}
	complete(t, d, out...)
	st, err := d.OutboxStats(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows[dialects.Dead] != 3 || st.Rows[dialects.Pending] != 1 || st.OldestDue <= 0 || st.ScheduledLater != 0 {
		t.Fatalf("stats %+v", st)
	}
	sum := int64(0)
	for _, n := range st.DeadByTopic {
		sum += n
	}
	if sum != 3 {
		t.Fatalf("dead by topic %v", st.DeadByTopic)
	}
}

// MaxHeads bounds the heads of a claim; the rest of its limit goes to the
// rows right behind each head, in sequence order.
func testMaxHeads(t *testing.T, h Harness) {
	d := h.New(t, 0)
	for _, k := range []string{"a", "b", "c", "d"} {
		insert(t, d, keyed(k, 6)...)
	}
	rows, err := rowsOf(d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: 10, Lease: lease, Token: uuid.New(), MaxHeads: 2, Walk: h.walk()}))
	if err != nil {
		t.Fatal(err)
	}
	runs := byKey(rows)
	if len(runs) != 2 {
		t.Fatalf("a claim of at most 2 heads took rows of %d keys: %v", len(runs), runs)
	}
	for k, run := range runs {
		if len(run) != 5 {
			t.Errorf("key %s: a run of %d rows, want the head and 4 followers ((10-2)/2)", k, len(run))
		}
		for i := 1; i < len(run); i++ {
			if run[i].Sequence <= run[i-1].Sequence {
				t.Errorf("key %s: rows out of sequence order", k)
			}
		}
	}
	// Unkeyed rows are heads of their own: MaxHeads bounds them too.
	d2 := h.New(t, 0)
	insert(t, d2, testkit.Rows(6, anyTopic, nil)...)
	rows, err = rowsOf(d2.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: 10, Lease: lease, Token: uuid.New(), MaxHeads: 3, Walk: h.walk()}))
	if err != nil || len(rows) != 3 {
		t.Fatalf("claimed %d unkeyed rows with 3 heads at most (%v)", len(rows), err)
	}
}

// List returns rows newest update first, keyset-paginated, and applies a
// topic pattern above the dialect without losing rows across pages.
func testList(t *testing.T, h Harness) {
	d := h.New(t, 0)
	var rows []dialects.NewRow
	for i := range 25 {
		topic := "order.created"
		if i%3 == 0 {
			topic = "user.created"
		}
		rows = append(rows, testkit.Row(topic))
	}
	insert(t, d, rows...)
	claimed := h.claim(t, d, 100)
	var out []dialects.Outcome
	for _, r := range claimed {
		out = append(out, dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeDead, Error: "no"})
	}
	complete(t, d, out...)
	orders := func(topic string) bool { return len(topic) > 6 && topic[:6] == "order." }
	seen := map[uuid.UUID]bool{}
	var after *dialects.Cursor
	var prev *dialects.ListedRow
	pages := 0
	for {
		page, next, err := dialects.List(ctx(t), d, dialects.Filter{TopicMatch: orders}, after, 4)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for i := range page {
			r := page[i]
			if !orders(r.Topic) {
				t.Fatalf("listed topic %q, which the pattern does not match", r.Topic)
			}
			if seen[r.ID] {
				t.Fatalf("row %s listed twice across pages", r.ID)
			}
			seen[r.ID] = true
			if prev != nil && (r.UpdatedAt.After(prev.UpdatedAt) || (r.UpdatedAt.Equal(prev.UpdatedAt) && r.Sequence > prev.Sequence)) {
				t.Fatalf("not newest first: %v/%d after %v/%d", r.UpdatedAt, r.Sequence, prev.UpdatedAt, prev.Sequence)
			}
			prev = &r
		}
		if next == nil {
			break
		}
		after = next
		if pages > 20 {
			t.Fatal("the listing does not end")
		}
	}
	if len(seen) != 16 {
		t.Fatalf("listed %d order rows over %d pages, want 16", len(seen), pages)
	}
	// A key narrows the selection in the database.
	k := "only"
	insert(t, d, testkit.Row("order.created", testkit.Key(k)))
	if got := list(t, d, dialects.Filter{Key: &k, States: []dialects.State{dialects.Pending}}, 10); len(got) != 1 || got[0].Key == nil || *got[0].Key != k {
		t.Fatalf("by key: %+v", got)
	}
}

// The oldest due pending row is measured from when it became due; a row
// scheduled ahead is counted apart and does not count as waiting.
func testPendingDue(t *testing.T, h Harness) {
	d := h.New(t, 0)
	p, err := d.OutboxPending(ctx(t))
	if err != nil || p.OldestDue != 0 || p.ScheduledLater != 0 {
		t.Fatalf("an empty outbox: %+v, %v", p, err)
	}
	ahead := time.Now().Add(time.Hour)
	insert(t, d, testkit.Rows(2, "ahead", nil, testkit.ScheduledAt(ahead))...)
	p, err = d.OutboxPending(ctx(t))
	if err != nil || p.OldestDue != 0 || p.ScheduledLater != 2 {
		t.Fatalf("two rows scheduled an hour ahead: %+v, %v; want nothing due and 2 later", p, err)
	}
	insert(t, d, testkit.Row("late", testkit.ScheduledAt(time.Now().Add(-90*time.Minute))), testkit.Row("now"))
	p, err = d.OutboxPending(ctx(t))
	if err != nil || p.OldestDue < 89*time.Minute || p.OldestDue > 91*time.Minute || p.ScheduledLater != 2 {
		t.Fatalf("a row due 90 minutes ago: %+v, %v", p, err)
	}
	st, err := d.OutboxStats(ctx(t))
	if err != nil || st.ScheduledLater != 2 || st.OldestDue < 89*time.Minute || st.Rows[dialects.Pending] != 4 {
		t.Fatalf("stats: %+v, %v", st, err)
	}
	testPendingDueBehindHeldRows(t, h)
}

// A due row behind an earlier row of its key that is pending (held by a
// retry, a pause or an open circuit, or due itself) or being delivered
// waits for that row, not for the relay: it does not count as due. Rows
// that the relay could claim (heads and unkeyed rows) do.
func testPendingDueBehindHeldRows(t *testing.T, h Harness) {
	d := h.New(t, 0)
	ago := func(d time.Duration) testkit.RowOption { return testkit.ScheduledAt(time.Now().Add(-d)) }
	oldest := func(want, slack time.Duration, what string) {
		t.Helper()
		p, err := d.OutboxPending(ctx(t))
		if err != nil || p.OldestDue < want || p.OldestDue > want+slack {
			t.Fatalf("%s: oldest due %v (%v); want %v", what, p.OldestDue, err, want)
		}
	}
	// A key whose head waits an hour ahead (as a paused destination's row
	// does), with a row behind it due for an hour.
	insert(t, d, testkit.Row("order.held", testkit.Key("k1"), testkit.ScheduledAt(time.Now().Add(time.Hour))),
		testkit.Row("order.held", testkit.Key("k1"), ago(time.Hour)))
	oldest(0, 0, "a due row behind a head scheduled later")
	insert(t, d, testkit.Row("order.free", ago(10*time.Minute)), testkit.Row("order.free", testkit.Key("k2"), ago(30*time.Minute)))
	oldest(30*time.Minute, time.Minute, "a head due 30 minutes ago, and an unkeyed row 10")
	// Both are claimed: k2's head is being delivered, and a row of k2
	// due long ago waits behind it.
	if rows := h.claim(t, d, 10); len(rows) != 2 {
		t.Fatalf("claimed %d rows, want the two due heads", len(rows))
	}
	insert(t, d, testkit.Row("order.free", testkit.Key("k2"), ago(50*time.Minute)))
	oldest(0, 0, "a due row behind a head being delivered")
	insert(t, d, testkit.Row("order.free", ago(20*time.Minute)))
	oldest(20*time.Minute, time.Minute, "an unkeyed row due 20 minutes ago")
	// A head that came due a minute ago (as a paused destination's row
	// does, back from its deferral) and a row behind it due for two hours:
	// the relay can claim the head only, and the head has waited a minute.
	d = h.New(t, 0)
	insert(t, d, testkit.Row("order.back", testkit.Key("k3"), ago(time.Minute)),
		testkit.Row("order.back", testkit.Key("k3"), ago(2*time.Hour)))
	oldest(time.Minute, time.Minute, "a head due a minute ago with a row behind it due for two hours")
}

// Counts per topic and state include states that are none of the four:
// rows written by hand, which QueueBox never touches, are not invisible.
func testCountByTopic(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, testkit.Row("a"), testkit.Row("a"), testkit.Row("b"), testkit.Row("c"))
	rows := h.claim(t, d, 10)
	for _, r := range rows {
		if r.Topic == "b" {
			complete(t, d, dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeDead, Error: "x"})
		} else {
			complete(t, d, outcome(r, dialects.OutcomeRelease))
		}
	}
	h.Exec(t, d, `UPDATE {{t}} SET {{c "state"}} = $1 WHERE {{c "topic"}} = $2`, "paused", "c")
	got := map[string]int64{}
	counts, err := d.OutboxCountByTopic(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range counts {
		got[c.Topic+"/"+string(c.State)] += c.Rows
	}
	want := map[string]int64{"a/pending": 2, "b/dead": 1, "c/paused": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("counts by topic and state: %v, want %v", got, want)
	}
	st, err := d.OutboxStats(ctx(t))
	if err != nil || st.Rows["paused"] != 1 || st.Rows[dialects.Pending] != 2 || st.Rows[dialects.Processing] != 0 {
		t.Fatalf("stats do not show the row written by hand: %v, %v", st.Rows, err)
	}
}

// A key whose head waits for a retry is blocked; a key whose head is
// scheduled ahead by the application, an unkeyed retry and a key whose
// head is being delivered are not.
func testBlockedKeys(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, keyed("stuck", 3)...)
	insert(t, d, keyed("busy", 2)...)
	insert(t, d, testkit.Row("unkeyed"))
	insert(t, d, testkit.Row(anyTopic, testkit.Key("planned"), testkit.ScheduledAt(time.Now().Add(time.Hour))))
	var out []dialects.Outcome
	var head dialects.Row
	for _, r := range h.claim(t, d, 100) {
		switch {
		case r.Key == "stuck" && head.Key == "":
			head = r
			out = append(out, dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeRetry, Delay: time.Hour, Error: "HTTP 503: try later"})
		case r.Topic == "unkeyed":
			out = append(out, dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeRetry, Delay: time.Hour, Error: "HTTP 503"})
		case r.Key == "busy":
			// held: its head stays processing
		default:
			out = append(out, outcome(r, dialects.OutcomeRelease))
		}
	}
	complete(t, d, out...)
	keys, err := d.OutboxBlockedKeys(ctx(t), dialects.BlockedKeysParams{Scan: 1000, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 {
		t.Fatalf("blocked keys: %+v, want only stuck", keys)
	}
	k := keys[0]
	if k.Key != "stuck" || k.ID != head.ID || k.Attempt != 1 || k.MaxAttempts != 5 || k.LastError == nil || *k.LastError != "HTTP 503: try later" ||
		k.Behind != 2 || k.NextAttemptIn < 59*time.Minute || k.NextAttemptIn > time.Hour || k.Waiting < 0 || k.Waiting > 5*time.Minute {
		t.Fatalf("the blocked key: %+v", k)
	}
	if keys, err := d.OutboxBlockedKeys(ctx(t), dialects.BlockedKeysParams{Scan: 1000, Limit: 0}); err != nil || len(keys) != 0 {
		t.Fatalf("a limit of 0: %+v, %v", keys, err)
	}
}

// Dead rows group by topic and error start, over the newest rows only.
func testDeadGroups(t *testing.T, h Harness) {
	d := h.New(t, 0)
	if g, err := d.OutboxDeadGroups(ctx(t), 100); err != nil || len(g) != 0 {
		t.Fatalf("no dead rows: %+v, %v", g, err)
	}
	insert(t, d, testkit.Row("old"), testkit.Row("a"), testkit.Row("a"), testkit.Row("a"), testkit.Row("b"))
	rows := h.claim(t, d, 10)
	// One completion per row, in insert order, so that each gets its own
	// updated_at and "old" is the oldest.
	byTopic := map[string][]uuid.UUID{}
	order := append([]dialects.Row{}, rows...)
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && order[j].Sequence < order[j-1].Sequence; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	for i, r := range order {
		e := "HTTP 410: gone"
		if r.Topic == "a" && i == 3 {
			e = "HTTP 500: boom"
		}
		if r.Topic == "b" {
			e = ""
		}
		o := dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeDead, Error: e}
		complete(t, d, o)
		byTopic[r.Topic+"|"+e] = append([]uuid.UUID{r.ID}, byTopic[r.Topic+"|"+e]...)
		time.Sleep(5 * time.Millisecond) // distinct updated_at on coarse clocks
	}
	groups, err := d.OutboxDeadGroups(ctx(t), 4) // "old" is the fifth newest: left out
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]dialects.DeadGroup{}
	var total int64
	for _, g := range groups {
		got[g.Topic+"|"+g.Error] = g
		total += g.Rows
		if g.Newest.IsZero() || int64(len(g.IDs)) != g.Rows {
			t.Errorf("group %+v", g)
		}
	}
	if total != 4 || len(groups) != 3 {
		t.Fatalf("groups of the 4 newest dead rows: %+v", groups)
	}
	if _, ok := got["old|HTTP 410: gone"]; ok {
		t.Fatal("a row beyond the newest 4 was grouped")
	}
	a := got["a|HTTP 410: gone"]
	if a.Rows != 2 || fmt.Sprint(a.IDs) != fmt.Sprint(byTopic["a|HTTP 410: gone"]) {
		t.Fatalf("group a/410: %+v, want ids %v newest first", a, byTopic["a|HTTP 410: gone"])
	}
	if g := got["a|HTTP 500: boom"]; g.Rows != 1 {
		t.Fatalf("group a/500: %+v", g)
	}
	if g := got["b|"]; g.Rows != 1 {
		t.Fatalf("a dead row without an error: %+v", got)
	}
}

// OtherRelays counts the sessions of other relays (the same application
// name), never the dialect's own nor those of another name, and forgets a
// relay that closed.
func testOtherRelays(t *testing.T, h Harness) {
	ctx := context.Background()
	app := "qb-relays-" + uuid.NewString()[:8]
	others := func(d dialects.Dialect) int {
		t.Helper()
		n, err := d.OtherRelays(ctx)
		if err != nil {
			t.Fatalf("OtherRelays: %v", err)
		}
		return n
	}
	// busy opens a few sessions of d, on every pool it has.
	busy := func(d dialects.Dialect) {
		t.Helper()
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := d.Ping(ctx); err != nil {
					t.Error(err)
				}
				if _, err := d.OutboxProbe(ctx); err != nil && !errors.Is(err, dialects.ErrNotPermitted) {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	a, b, lone := h.Named(t, app), h.Named(t, app), h.Named(t, app+"-x")
	busy(a)
	busy(b)
	busy(lone)
	// A session counts once it is a few seconds old (a relay's own may not
	// be known to it yet while it connects): once the two relays of one
	// name count each other, every session is that old.
	testkit.Eventually(t, "two relays of one name count each other's sessions", 30*time.Second,
		testkit.True(func() bool { return others(a) > 0 && others(b) > 0 }))
	if n := others(lone); n != 0 {
		t.Fatalf("a relay alone with its name counts %d sessions of other relays, want 0: neither its own nor those of another name count", n)
	}
	b.Close()
	testkit.Eventually(t, "a relay stops counting the sessions of another that closed", 10*time.Second,
		testkit.True(func() bool { return others(a) == 0 }))
}

// Native errors a user can act on come back as the seam's own.
func testErrors(t *testing.T, h Harness) {
	if h.Empty == nil || h.Unreachable == nil {
		t.Fatal("the harness must offer Empty and Unreachable")
	}
	empty := h.Empty(t)
	if _, err := rowsOf(empty.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: 10, Lease: lease, Token: uuid.New()})); !errors.Is(err, dialects.ErrNoTable) {
		t.Errorf("claim without a table: %v, want ErrNoTable", err)
	}
	if _, err := empty.OutboxStats(ctx(t)); !errors.Is(err, dialects.ErrNoTable) {
		t.Errorf("stats without a table: %v, want ErrNoTable", err)
	}
	if _, err := dialects.Replay(ctx(t), empty, dialects.Filter{}, true, ""); !errors.Is(err, dialects.ErrNoTable) {
		t.Errorf("replay without a table: %v, want ErrNoTable", err)
	}
	gone := h.Unreachable(t)
	c, cancel := context.WithTimeout(ctx(t), 20*time.Second)
	defer cancel()
	if err := gone.Ping(c); !errors.Is(err, dialects.ErrUnreachable) {
		t.Errorf("ping of a database that is not there: %v, want ErrUnreachable", err)
	}
	if _, err := rowsOf(gone.OutboxClaim(c, dialects.ClaimParams{Limit: 10, Lease: lease, Token: uuid.New()})); !errors.Is(err, dialects.ErrUnreachable) {
		t.Errorf("claim against a database that is not there: %v, want ErrUnreachable", err)
	}
	// A server that answers and refuses the login is ErrLoginRefused with
	// the server's reason, and still ErrUnreachable, which the engine
	// waits out like any outage.
	if h.RefusedLogin == nil {
		t.Fatal("the harness must offer RefusedLogin")
	}
	err := h.RefusedLogin(t)
	if !errors.Is(err, dialects.ErrLoginRefused) || !errors.Is(err, dialects.ErrUnreachable) {
		t.Errorf("ping refused at login: %v, want ErrLoginRefused and ErrUnreachable", err)
	} else if !strings.Contains(err.Error(), h.RefusedBecause) || !strings.Contains(err.Error(), "refused the login") {
		t.Errorf("a refused login does not say why (want %q): %v", h.RefusedBecause, err)
	}
}

// The history reads nothing before the first migration, records what a
// session applies, and records nothing of a migration that failed.
func testMigrationHistory(t *testing.T, h Harness) {
	d := h.Empty(t)
	if got, err := d.MigrationHistory(ctx(t)); err != nil || got != nil {
		t.Fatalf("history of an empty namespace: %v, %v; want nothing", got, err)
	}
	s, err := d.MigrationSession(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	applied, err := s.Applied(ctx(t))
	if err != nil || len(applied) != 0 {
		t.Fatalf("applied before any migration: %v, %v", applied, err)
	}
	if err := s.Apply(ctx(t), dialects.ApplyParams{Version: 1, Name: "first", Checksum: "c1", Batches: []string{"SELECT 1"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx(t), dialects.ApplyParams{Version: 2, Name: "broken", Checksum: "c2",
		Batches: []string{"SELECT 1", "SELECT * FROM qb_no_such_table_anywhere"}}); err == nil {
		t.Fatal("a migration with a failing batch was applied")
	}
	if err := s.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
	got, err := d.MigrationHistory(ctx(t))
	if err != nil || len(got) != 1 || got[0].Version != 1 || got[0].Name != "first" || got[0].Checksum != "c1" || got[0].AppliedAt.IsZero() {
		t.Fatalf("history after one good and one failed migration: %+v, %v", got, err)
	}
	// The lock is released: a second session can take it at once.
	c, cancel := context.WithTimeout(ctx(t), 10*time.Second)
	defer cancel()
	s2, err := d.MigrationSession(c)
	if err != nil {
		t.Fatalf("the lock was not released: %v", err)
	}
	_ = s2.Close(ctx(t))
}
