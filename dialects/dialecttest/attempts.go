package dialecttest

import (
	"encoding/json"
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
	}
}

func withAttempt(o dialects.Outcome, a dialects.Attempt) dialects.Outcome {
	o.Attempt = &a
	return o
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

// Outcomes without attempts (the history is off) record nothing.
func testAttemptsOff(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, testkit.Rows(2, anyTopic, nil)...)
	rows := h.claim(t, d, 2)
	dead := outcome(rows[1], dialects.OutcomeDead)
	dead.Error = "no"
	complete(t, d, outcome(rows[0], dialects.OutcomeDelivered), dead)
	for _, r := range rows {
		if got := rowDetail(t, d, r.ID, 10); len(got.Attempts) != 0 {
			t.Errorf("row %s has attempts %+v", r.ID, got.Attempts)
		}
	}
	if got := rowDetail(t, d, rows[1].ID, 10); got.State != dialects.Dead || got.LastError == nil || *got.LastError != "no" {
		t.Errorf("dead row %+v", got.ListedRow)
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
		if got := rowDetail(t, d, rows[i].ID, 10); len(got.Attempts) != want {
			t.Errorf("row %d: %d attempts after the purge, want %d", i, len(got.Attempts), want)
		}
	}
}
