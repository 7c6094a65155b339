package dialecttest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testkit"
)

// attemptTests are the attempt history's subtests.
func attemptTests() []subtest {
	return []subtest{
		{"AttemptsRecordedWithOutcomes", testAttemptsRecorded},
		{"AttemptsWithoutHistory", testAttemptsOff},
		{"AttemptsPurge", testAttemptsPurge},
		{"AttemptsMarkProbesAndUncounted", testAttemptsMarked},
		{"ReplayRecordedInTheHistory", testReplayRecorded},
		{"DeliveryToldByTheRow", testDeliveryToldByTheRow},
	}
}

func withAttempt(o dialects.Outcome, a dialects.Attempt) dialects.Outcome {
	o.Attempt = &a
	return o
}

// recorded is the entries of h that the history recorded: not those told
// by the row.
func recorded(h []dialects.RecordedAttempt) []dialects.RecordedAttempt {
	var out []dialects.RecordedAttempt
	for _, a := range h {
		if !a.FromRow {
			out = append(out, a)
		}
	}
	return out
}

func rowDetail(t *testing.T, d dialects.Dialect, id uuid.UUID, attempts int) dialects.RowDetail {
	t.Helper()
	r, found, err := d.OutboxRow(ctx(t), id, attempts)
	if err != nil || !found {
		t.Fatalf("OutboxRow(%s): found=%v, %v", id, found, err)
	}
	return r
}

// A row that failed once and was then delivered has both attempts, oldest
// first, with what each recorded; an attempt whose claim was lost is not
// recorded, like its outcome.
func testAttemptsRecorded(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, testkit.Row(anyTopic, testkit.Payload(`{"order":7}`), testkit.Headers(`{"trace":"abc"}`), testkit.Key("k")))
	r := h.claim(t, d, 1)[0]
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	fail := dialects.Attempt{At: t0, Duration: 1500 * time.Microsecond, Try: 1, Destination: "webhook",
		Status: "HTTP 500 Internal Server Error", Error: "HTTP 500 Internal Server Error: boom", Response: "boom"}
	retry := outcome(r, dialects.OutcomeRetry)
	retry.Error, retry.Delay = fail.Error, time.Hour
	if lost := complete(t, d, withAttempt(retry, fail)); len(lost) != 0 {
		t.Fatalf("lost %v", lost)
	}
	r = claimAgainDue(t, h, d, r)
	// A stale claim's attempt is not recorded.
	stale := r.Claim
	stale.Token = uuid.New()
	complete(t, d, withAttempt(dialects.Outcome{Claim: stale, Kind: dialects.OutcomeDelivered}, dialects.Attempt{At: t0, Try: 9}))
	ok := dialects.Attempt{At: t0.Add(30 * time.Second), Duration: 2 * time.Millisecond, Try: 2, Destination: "webhook", Status: "HTTP 200 OK", Response: `{"ok":true}`}
	if lost := complete(t, d, withAttempt(outcome(r, dialects.OutcomeDelivered), ok)); len(lost) != 0 {
		t.Fatalf("lost %v", lost)
	}

	got := rowDetail(t, d, r.ID, 50)
	if got.State != dialects.Delivered || got.Attempt != 1 || got.Topic != anyTopic || got.Key == nil || *got.Key != "k" {
		t.Errorf("row %+v", got.ListedRow)
	}
	var payload, headers map[string]any
	if err := json.Unmarshal([]byte(got.Payload), &payload); err != nil || payload["order"] != 7.0 {
		t.Errorf("payload %q (%v)", got.Payload, err)
	}
	if err := json.Unmarshal([]byte(got.Headers), &headers); err != nil || headers["trace"] != "abc" {
		t.Errorf("headers %q (%v)", got.Headers, err)
	}
	if len(got.Attempts) != 2 || got.MoreAttempts {
		t.Fatalf("want the failed and the delivered attempt, got %+v (more: %v)", got.Attempts, got.MoreAttempts)
	}
	a, b := got.Attempts[0], got.Attempts[1]
	if a.Outcome != "retry" || a.Try != 1 || a.Status != fail.Status || a.Error != fail.Error || a.Response != "boom" ||
		a.Destination != "webhook" || a.Duration != fail.Duration || !a.At.Equal(fail.At) {
		t.Errorf("first attempt %+v, want %+v", a, fail)
	}
	if b.Outcome != "delivered" || b.Try != 2 || b.Status != "HTTP 200 OK" || b.Error != "" || b.Response != `{"ok":true}` || !b.At.Equal(ok.At) {
		t.Errorf("second attempt %+v, want %+v", b, ok)
	}
	// A cap keeps the newest attempts.
	if got := rowDetail(t, d, r.ID, 1); len(got.Attempts) != 1 || got.Attempts[0].Try != 2 || !got.MoreAttempts {
		t.Errorf("with a cap of 1: %+v (more: %v)", got.Attempts, got.MoreAttempts)
	}
	if _, found, err := d.OutboxRow(ctx(t), uuid.New(), 10); found || err != nil {
		t.Errorf("an unknown id: found=%v, %v", found, err)
	}
}

// Outcomes without attempts (the history is off) record nothing; the
// delivered row's delivery is still shown, told by the row.
func testAttemptsOff(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, testkit.Rows(2, anyTopic, nil)...)
	rows := h.claim(t, d, 2)
	dead := outcome(rows[1], dialects.OutcomeDead)
	dead.Error = "no"
	complete(t, d, outcome(rows[0], dialects.OutcomeDelivered), dead)
	for _, r := range rows {
		if got := rowDetail(t, d, r.ID, 10); len(recorded(got.Attempts)) != 0 {
			t.Errorf("row %s has attempts %+v", r.ID, got.Attempts)
		}
	}
	if got := rowDetail(t, d, rows[1].ID, 10); got.State != dialects.Dead || got.LastError == nil || *got.LastError != "no" || len(got.Attempts) != 0 {
		t.Errorf("dead row %+v, attempts %+v", got.ListedRow, got.Attempts)
	}
	if got := rowDetail(t, d, rows[0].ID, 10); len(got.Attempts) != 1 || !got.Attempts[0].FromRow {
		t.Errorf("delivered row: attempts %+v, want its delivery told by the row", got.Attempts)
	}
}

// Retention deletes the attempts made before its age, and no others.
func testAttemptsPurge(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, testkit.Rows(3, anyTopic, nil)...)
	rows := h.claim(t, d, 3)
	now := time.Now()
	complete(t, d,
		withAttempt(outcome(rows[0], dialects.OutcomeDelivered), dialects.Attempt{At: now.Add(-3 * time.Hour), Try: 1}),
		withAttempt(outcome(rows[1], dialects.OutcomeDelivered), dialects.Attempt{At: now.Add(-2 * time.Hour), Try: 1}),
		withAttempt(outcome(rows[2], dialects.OutcomeDelivered), dialects.Attempt{At: now, Try: 1}))
	n, err := d.AttemptsPurge(ctx(t), time.Hour, 1)
	if err != nil || n != 1 {
		t.Fatalf("purge with a batch of 1: %d, %v", n, err)
	}
	n, err = d.AttemptsPurge(ctx(t), time.Hour, 100)
	if err != nil || n != 1 {
		t.Fatalf("purge: %d, %v", n, err)
	}
	for i, want := range []int{0, 0, 1} {
		if got := rowDetail(t, d, rows[i].ID, 10); len(recorded(got.Attempts)) != want {
			t.Errorf("row %d: %d attempts after the purge, want %d", i, len(got.Attempts), want)
		}
	}
}

// A failure the circuit breaker did not count (a deferred outcome with an
// attempt) is recorded as a retry, marked as not counted, and as the probe
// when it was one; the row keeps its attempt and last_error, so the next
// try has the same number. A probe that succeeds is recorded as a probe,
// counted.
func testAttemptsMarked(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, testkit.Row(anyTopic))
	r := h.claim(t, d, 1)[0]
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	retry := outcome(r, dialects.OutcomeRetry)
	retry.Error = "HTTP 503: first"
	complete(t, d, withAttempt(retry, dialects.Attempt{At: t0, Try: 1, Destination: "hook", Error: retry.Error}))
	for i, a := range []dialects.Attempt{
		{At: t0.Add(time.Second), Try: 2, Destination: "hook", Error: "HTTP 503: probe", Probe: true, Uncounted: true},
		{At: t0.Add(2 * time.Second), Try: 2, Destination: "hook", Error: "HTTP 503: down", Uncounted: true},
	} {
		r = h.claim(t, d, 1)[0]
		if r.Attempt != 1 {
			t.Fatalf("claim %d: attempt %d, want 1", i, r.Attempt)
		}
		deferred := outcome(r, dialects.OutcomeDefer)
		deferred.Error = a.Error
		if lost := complete(t, d, withAttempt(deferred, a)); len(lost) != 0 {
			t.Fatalf("lost %v", lost)
		}
		if got := rowDetail(t, d, r.ID, 0); got.State != dialects.Pending || got.Attempt != 1 || got.LastError == nil || *got.LastError != retry.Error {
			t.Fatalf("after a failure not counted: state %s, attempt %d, last error %v; want pending, 1, %q", got.State, got.Attempt, deref(got.LastError), retry.Error)
		}
	}
	r = h.claim(t, d, 1)[0]
	complete(t, d, withAttempt(outcome(r, dialects.OutcomeDelivered), dialects.Attempt{At: t0.Add(3 * time.Second), Try: 2, Destination: "hook", Probe: true}))

	got := rowDetail(t, d, r.ID, 10)
	type mark struct {
		try          int
		outcome      string
		probe, uncnt bool
	}
	var marks []mark
	for _, a := range got.Attempts {
		marks = append(marks, mark{a.Try, a.Outcome, a.Probe, a.Uncounted})
	}
	want := []mark{{1, "retry", false, false}, {2, "retry", true, true}, {2, "retry", false, true}, {2, "delivered", true, false}}
	if len(marks) != len(want) {
		t.Fatalf("attempts %+v, want %+v", marks, want)
	}
	for i := range want {
		if marks[i] != want[i] {
			t.Errorf("attempt %d: %+v, want %+v", i, marks[i], want[i])
		}
	}
	if got.Attempts[1].Error != "HTTP 503: probe" || got.Attempts[2].Error != "HTTP 503: down" {
		t.Errorf("the errors of the failures not counted: %q, %q", got.Attempts[1].Error, got.Attempts[2].Error)
	}
}

// A replay with a name records itself in the history of every row it puts
// back, after the row's attempts, even one stamped by a relay whose clock
// is ahead of the database's; the try after it, stamped by a relay whose
// clock is behind, is still shown after it. A replay without a name records
// nothing, and a long name is cut.
func testReplayRecorded(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, testkit.Rows(3, anyTopic, nil)...)
	rows := h.claim(t, d, 3)
	behind, ahead, none := rows[0], rows[1], rows[2]
	var out []dialects.Outcome
	for _, r := range rows {
		o := outcome(r, dialects.OutcomeDead)
		o.Error = "HTTP 410"
		out = append(out, o)
	}
	out[0] = withAttempt(out[0], dialects.Attempt{At: time.Now().Add(-time.Minute), Try: 1, Destination: "hook", Error: "HTTP 410"})
	aheadAt := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	out[1] = withAttempt(out[1], dialects.Attempt{At: aheadAt, Try: 1, Destination: "hook", Error: "HTTP 410"})
	complete(t, d, out...)
	before := time.Now()
	n, err := dialects.Replay(ctx(t), d, dialects.Filter{IDs: []uuid.UUID{behind.ID, ahead.ID, none.ID}}, false, "queuebox replay, user ops")
	if err != nil || n != 3 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	got := rowDetail(t, d, behind.ID, 10)
	if len(got.Attempts) != 2 {
		t.Fatalf("after the replay: %+v", got.Attempts)
	}
	rep := got.Attempts[1]
	if rep.Outcome != dialects.OutcomeReplayed || rep.ReplayedBy != "queuebox replay, user ops" || rep.Try != 0 || rep.Destination != "" ||
		rep.At.Before(before.Add(-time.Minute)) || rep.At.After(time.Now().Add(time.Minute)) {
		t.Errorf("the replay's entry %+v; want it now", rep)
	}
	if got := rowDetail(t, d, ahead.ID, 10); len(got.Attempts) != 2 || got.Attempts[1].Outcome != dialects.OutcomeReplayed || !got.Attempts[1].At.After(aheadAt) {
		t.Errorf("a row whose attempt was stamped ahead: %+v; want the replay after %v", got.Attempts, aheadAt)
	}
	if got := rowDetail(t, d, none.ID, 10); len(got.Attempts) != 1 || got.Attempts[0].Outcome != dialects.OutcomeReplayed {
		t.Errorf("a row replayed without attempts: %+v", got.Attempts)
	}
	// The next try, stamped by a relay whose clock is behind the
	// database's, comes after the replay all the same.
	for _, r := range h.claim(t, d, 3) {
		o := outcome(r, dialects.OutcomeDelivered)
		if r.ID == behind.ID {
			o = withAttempt(o, dialects.Attempt{At: rep.At.Add(-10 * time.Millisecond), Try: 1, Destination: "hook"})
		}
		complete(t, d, o)
	}
	got = rowDetail(t, d, behind.ID, 10)
	var order []string
	for _, a := range got.Attempts {
		order = append(order, a.Outcome)
	}
	if strings.Join(order, " ") != "dead replayed delivered" {
		t.Errorf("the history reads %v, want dead, replayed, delivered", order)
	}
	// Without a name, nothing is recorded; a long one is cut.
	if n, err := dialects.Replay(ctx(t), d, dialects.Filter{IDs: []uuid.UUID{behind.ID}}, false, ""); err != nil || n != 1 {
		t.Fatalf("replay without a name: %d, %v", n, err)
	}
	if got := rowDetail(t, d, behind.ID, 10); len(got.Attempts) != 3 {
		t.Errorf("a replay without a name recorded %+v", got.Attempts[3:])
	}
	// (none was delivered at its first try, not recorded: the replay
	// keeps the delivery, shown before it.)
	if n, err := dialects.Replay(ctx(t), d, dialects.Filter{IDs: []uuid.UUID{none.ID}}, false, strings.Repeat("é", 300)); err != nil || n != 1 {
		t.Fatalf("replay with a long name: %d, %v", n, err)
	}
	if got := rowDetail(t, d, none.ID, 10); len(got.Attempts) != 3 || !got.Attempts[1].FromRow || got.Attempts[2].ReplayedBy != strings.Repeat("é", 255) {
		t.Errorf("a long name: %+v", got.Attempts)
	}
}

// A delivery the relay did not record (a first try that succeeded) is
// shown from the row: its try, and when it was written; and a replay,
// which sets the row back, keeps it in its entry, so that the delivery is
// still shown before the replay. A delivery the history recorded is not
// shown twice, before a replay or at the end.
func testDeliveryToldByTheRow(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, testkit.Rows(2, anyTopic, nil)...)
	rows := h.claim(t, d, 2)
	complete(t, d, outcome(rows[0], dialects.OutcomeDelivered), outcome(rows[1], dialects.OutcomeDelivered))
	first := rowDetail(t, d, rows[0].ID, 10)
	if len(first.Attempts) != 1 {
		t.Fatalf("a first try that succeeded: %+v", first.Attempts)
	}
	if a := first.Attempts[0]; !a.FromRow || a.Outcome != "delivered" || a.Try != 1 || !a.At.Equal(first.UpdatedAt) ||
		a.Duration != 0 || a.Destination != "" || a.Status != "" || a.Probe || a.Uncounted {
		t.Errorf("the delivery told by the row: %+v; want try 1 at %v, nothing else", a, first.UpdatedAt)
	}

	ids := []uuid.UUID{rows[0].ID, rows[1].ID}
	if n, err := dialects.Replay(ctx(t), d, dialects.Filter{IDs: ids}, false, "ops"); err != nil || n != 2 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	got := rowDetail(t, d, rows[0].ID, 10)
	if len(got.Attempts) != 2 || len(recorded(got.Attempts)) != 1 {
		t.Fatalf("after the replay: %+v", got.Attempts)
	}
	if a, r := got.Attempts[0], got.Attempts[1]; !a.FromRow || a.Try != 1 || !a.At.Equal(first.UpdatedAt) ||
		r.Outcome != dialects.OutcomeReplayed || r.ReplayedBy != "ops" || r.RowDelivered == nil || r.RowDelivered.Try != 1 {
		t.Errorf("the delivery the replay set back, then the replay: %+v, %+v; want the delivery at %v", a, r, first.UpdatedAt)
	}

	// After the replay: rows[0] fails once and is delivered at its second
	// try, both recorded; rows[1] is delivered at its first, not recorded.
	rows = h.claim(t, d, 2)
	var zero, one dialects.Row
	for _, r := range rows {
		if r.ID == ids[0] {
			zero = r
		} else {
			one = r
		}
	}
	if zero.ID != ids[0] || one.ID != ids[1] {
		t.Fatalf("the replayed rows were not claimed: %+v", rows)
	}
	retry := outcome(zero, dialects.OutcomeRetry)
	retry.Error, retry.Delay = "HTTP 500", time.Hour
	t0 := time.Now().Truncate(time.Millisecond)
	complete(t, d, withAttempt(retry, dialects.Attempt{At: t0, Try: 1, Destination: "hook", Error: "HTTP 500"}), outcome(one, dialects.OutcomeDelivered))
	zero = claimAgainDue(t, h, d, zero)
	complete(t, d, withAttempt(outcome(zero, dialects.OutcomeDelivered), dialects.Attempt{At: t0.Add(time.Second), Try: 2, Destination: "hook", Status: "HTTP 200 OK"}))

	history := func(id uuid.UUID) string {
		var entries []string
		for _, a := range rowDetail(t, d, id, 10).Attempts {
			o := a.Outcome
			if a.FromRow {
				o = "told"
			}
			entries = append(entries, fmt.Sprintf("%s %d", o, a.Try))
		}
		return strings.Join(entries, ", ")
	}
	if got, want := history(ids[0]), "told 1, replayed 0, retry 1, delivered 2"; got != want {
		t.Errorf("a row delivered at its second try after the replay: %s; want %s", got, want)
	}
	if got, want := history(ids[1]), "told 1, replayed 0, told 1"; got != want {
		t.Errorf("a row delivered at its first try after the replay: %s; want %s", got, want)
	}
	// Replayed again: the delivery at the second try was recorded, and is
	// not shown twice.
	if n, err := dialects.Replay(ctx(t), d, dialects.Filter{IDs: ids[:1]}, false, "ops"); err != nil || n != 1 {
		t.Fatalf("second replay: %d, %v", n, err)
	}
	if got, want := history(ids[0]), "told 1, replayed 0, retry 1, delivered 2, replayed 0"; got != want {
		t.Errorf("replayed again: %s; want %s", got, want)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
