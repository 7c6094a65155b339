package dialecttest

import (
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testkit"
)

// The destinations' state: a deferred row (a destination held), pauses and
// the circuits replicas report.
func destinationTests() []subtest {
	return []subtest{
		{"ClaimDeferredHeadWaitsWithItsKeyAndKeepsItsAttempt", testDefer},
		{"DestinationPauseAndResume", testPauseResume},
		{"DestinationCircuitsOfReplicas", testCircuits},
	}
}

// A deferred row goes back to pending, due after its delay, with its
// attempt and last_error as they were: no attempt was made. Its key waits
// behind it, as behind a retry.
func testDefer(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, keyed("k", 3)...)
	insert(t, d, testkit.Row("unkeyed"))
	got := byKey(h.claim(t, d, 100))
	k, loose := got["k"], got[""]
	if len(k) != 3 || len(loose) != 1 {
		t.Fatalf("claimed %v", got)
	}
	// A first attempt fails, so that attempt and last_error have something
	// to keep.
	complete(t, d, dialects.Outcome{Claim: k[0].Claim, Kind: dialects.OutcomeRetry, Error: "HTTP 503"},
		outcome(k[1], dialects.OutcomeRelease), outcome(k[2], dialects.OutcomeRelease), outcome(loose[0], dialects.OutcomeRelease))
	head := claimAgainDue(t, h, d, k[0])
	rest := h.claim(t, d, 100)
	if len(rest) != 1 || rest[0].Key != "" { // k's followers wait behind their head
		t.Fatalf("claimed %+v besides the head, want the unkeyed row", rest)
	}
	// The head is deferred for an hour, the unkeyed row for no time at all.
	if lost := complete(t, d, dialects.Outcome{Claim: head.Claim, Kind: dialects.OutcomeDefer, Delay: time.Hour, Error: "ignored"},
		dialects.Outcome{Claim: rest[0].Claim, Kind: dialects.OutcomeDefer}); len(lost) != 0 {
		t.Fatalf("lost %v", lost)
	}
	listed := list(t, d, dialects.Filter{States: dialects.States}, 10)
	for _, r := range listed {
		le := ""
		if r.LastError != nil {
			le = *r.LastError
		}
		switch {
		case r.ID == head.ID && (r.State != dialects.Pending || r.Attempt != 1 || le != "HTTP 503"):
			t.Errorf("the deferred head: state %s, attempt %d, last_error %q; want pending, 1, \"HTTP 503\"", r.State, r.Attempt, le)
		case r.ID != head.ID && (r.State != dialects.Pending || r.Attempt != 0 || le != ""):
			t.Errorf("row %s: state %s, attempt %d, last_error %q; want pending, 0, none", r.Topic, r.State, r.Attempt, le)
		}
	}
	pending, err := d.OutboxPending(ctx(t))
	if err != nil || pending.ScheduledLater != 1 {
		t.Fatalf("rows scheduled later: %d (%v); want the deferred head only", pending.ScheduledLater, err)
	}
	// Only the unkeyed row, deferred for no time, is claimable: the key
	// waits behind its deferred head.
	again := h.claim(t, d, 100)
	if len(again) != 1 || again[0].Key != "" {
		t.Fatalf("claimed %+v while the head was deferred; want the unkeyed row only", again)
	}
	complete(t, d, outcome(again[0], dialects.OutcomeDelivered))
	// Once due, the head comes first with its followers, attempt unchanged.
	h.Exec(t, d, `UPDATE {{t}} SET {{c "scheduled_at"}} = {{c "created_at"}} WHERE {{c "state"}} = 'pending'`)
	rows := h.claim(t, d, 100)
	if len(rows) != 3 || rows[0].ID != head.ID || rows[0].Attempt != 1 {
		t.Fatalf("after the deferral came due, claimed %+v", rows)
	}
}

func testPauseResume(t *testing.T, h Harness) {
	d := h.New(t, 0)
	if st, err := d.DestinationStates(ctx(t)); err != nil || len(st) != 0 {
		t.Fatalf("states of a new table: %v, %v", st, err)
	}
	if st, changed, err := d.DestinationResume(ctx(t), "crm"); err != nil || changed || st.Name != "crm" || st.Paused {
		t.Fatalf("resuming a destination never paused: %+v, changed %v, %v", st, changed, err)
	}
	first, changed, err := d.DestinationPause(ctx(t), "crm", "the CRM is being upgraded")
	if err != nil || !changed || !first.Paused || first.Name != "crm" || first.Reason != "the CRM is being upgraded" || first.Since.IsZero() {
		t.Fatalf("pause: %+v, changed %v, %v", first, changed, err)
	}
	// Again: the reason changes, not when it was paused.
	again, changed, err := d.DestinationPause(ctx(t), "crm", "")
	if err != nil || changed || !again.Paused || again.Reason != "" || !again.Since.Equal(first.Since) {
		t.Fatalf("pausing a paused destination: %+v (first %+v), changed %v, %v", again, first, changed, err)
	}
	if _, _, err := d.DestinationPause(ctx(t), "billing", "x"); err != nil {
		t.Fatal(err)
	}
	states, err := d.DestinationStates(ctx(t))
	if err != nil || len(states) != 2 || states[0].Name != "billing" || states[1].Name != "crm" || !states[0].Paused || !states[1].Paused {
		t.Fatalf("states: %+v, %v", states, err)
	}
	resumed, changed, err := d.DestinationResume(ctx(t), "crm")
	if err != nil || !changed || resumed.Paused || resumed.Reason != "" || resumed.Since.Before(first.Since) {
		t.Fatalf("resume: %+v, changed %v, %v", resumed, changed, err)
	}
	if _, changed, err := d.DestinationResume(ctx(t), "crm"); err != nil || changed {
		t.Fatalf("resuming a resumed destination changed it: %v, %v", changed, err)
	}
	states, err = d.DestinationStates(ctx(t))
	if err != nil || len(states) != 2 || states[1].Paused || !states[0].Paused {
		t.Fatalf("states after the resume: %+v, %v", states, err)
	}
	// Paused again: a change.
	if st, changed, err := d.DestinationPause(ctx(t), "crm", "again"); err != nil || !changed || st.Since.Before(resumed.Since) {
		t.Fatalf("pausing a resumed destination: %+v, changed %v, %v", st, changed, err)
	}
}

func testCircuits(t *testing.T, h Harness) {
	d := h.New(t, 0)
	open := func(dest, replica, lastErr string) {
		t.Helper()
		if err := d.DestinationCircuitOpen(ctx(t), dialects.OpenCircuit{Destination: dest, Replica: replica, LastError: lastErr}); err != nil {
			t.Fatal(err)
		}
	}
	circuits := func(fresh time.Duration) []dialects.OpenCircuit {
		t.Helper()
		cs, err := d.DestinationCircuits(ctx(t), fresh)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	open("crm", "r1", "HTTP 502")
	open("crm", "r2", "connection refused")
	open("billing", "r1", "timeout")
	cs := circuits(time.Minute)
	if len(cs) != 3 || cs[0].Destination != "billing" || cs[1].Destination != "crm" || cs[2].Destination != "crm" {
		t.Fatalf("circuits: %+v", cs)
	}
	first := cs[1]
	if first.Replica != "r1" || first.LastError != "HTTP 502" || first.OpenedAt.IsZero() || first.SeenAt.Before(first.OpenedAt) {
		t.Fatalf("the first circuit of crm: %+v", first)
	}
	// Reported again: refreshed, still opened when it was.
	open("crm", "r1", "HTTP 503")
	cs = circuits(time.Minute)
	var again dialects.OpenCircuit
	for _, c := range cs {
		if c.Destination == "crm" && c.Replica == "r1" {
			again = c
		}
	}
	if !again.OpenedAt.Equal(first.OpenedAt) || again.SeenAt.Before(first.SeenAt) || again.LastError != "HTTP 503" {
		t.Fatalf("reported again: %+v, first %+v", again, first)
	}
	if err := d.DestinationCircuitsClosed(ctx(t), "r1", []string{"crm"}); err != nil {
		t.Fatal(err)
	}
	if cs = circuits(time.Minute); len(cs) != 2 {
		t.Fatalf("after r1 closed crm: %+v", cs)
	}
	// A replica that stopped without closing its circuits: not fresh, and
	// gone a day later, when any replica closes a circuit.
	h.Exec(t, d, `UPDATE {{q (obj "circuits") | qualify}} SET seen_at = '2000-01-01T00:00:00' WHERE replica = 'r2'`)
	if cs = circuits(time.Minute); len(cs) != 1 || cs[0].Replica != "r1" {
		t.Fatalf("a stale circuit counts: %+v", cs)
	}
	if err := d.DestinationCircuitsClosed(ctx(t), "r1", nil); err != nil {
		t.Fatal(err)
	}
	// Gone, not only stale: reported again, it is a new circuit.
	open("crm", "r2", "connection refused")
	cs = circuits(time.Minute)
	if len(cs) != 2 || cs[1].Replica != "r2" || cs[1].OpenedAt.Before(again.SeenAt) {
		t.Fatalf("the stale circuit was not removed: %+v (the last refresh before was at %v)", cs, again.SeenAt)
	}
}
