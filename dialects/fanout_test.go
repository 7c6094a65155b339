package dialects

import (
	"testing"
	"time"
)

// Copies are written for a delivered row only, once per destination (the
// last given); the completion runs the fan-out statement only for outcomes
// with copies or more attempts.
func TestWrittenCopies(t *testing.T) {
	o := Outcome{Kind: OutcomeDelivered, Copies: []Copy{
		{Destination: "a", Kind: CopyRetry, Attempt: 1},
		{Destination: "b", Kind: CopyBehind},
		{Destination: "a", Kind: CopyDead, Error: "no"},
	}}
	got := o.WrittenCopies()
	if len(got) != 2 || got[0].Destination != "b" || got[1].Destination != "a" || got[1].Kind != CopyDead {
		t.Errorf("written copies %+v", got)
	}
	retry := o
	retry.Kind = OutcomeRetry
	if retry.WrittenCopies() != nil || FanOut([]Outcome{retry}) {
		t.Error("a retried row's copies are written")
	}
	if !FanOut([]Outcome{{Kind: OutcomeRelease}, o}) {
		t.Error("an outcome with copies is no fan-out")
	}
	if !FanOut([]Outcome{{Kind: OutcomeDead, Attempts: []Attempt{{Try: 1}}}}) {
		t.Error("an outcome with more attempts is no fan-out")
	}
	if FanOut([]Outcome{{Kind: OutcomeDelivered, Attempt: &Attempt{Try: 1}}}) {
		t.Error("an outcome with its one attempt is a fan-out")
	}
	if CopyDead.State() != Dead || CopyRetry.State() != Pending || CopyDefer.State() != Pending || CopyBehind.State() != Pending {
		t.Error("copy states")
	}
}

// A fan-out row's attempts are recorded with their destination's end.
func TestRecordedOutcomeOf(t *testing.T) {
	o := Outcome{Kind: OutcomeDelivered, Copies: []Copy{{Destination: "b", Kind: CopyRetry}, {Destination: "c", Kind: CopyDead}, {Destination: "d", Kind: CopyDefer}}}
	for dest, want := range map[string]string{"a": "delivered", "b": "retry", "c": "dead", "d": "retry"} {
		if got := RecordedOutcomeOf(o, Attempt{Destination: dest}); got != want {
			t.Errorf("%s: %s, want %s", dest, got, want)
		}
	}
	if got := RecordedOutcomeOf(Outcome{Kind: OutcomeDefer}, Attempt{Destination: "b"}); got != "retry" {
		t.Errorf("a deferred row's attempt: %s", got)
	}
	at := time.Now()
	o.Attempt, o.Attempts = &Attempt{At: at, Destination: "a"}, []Attempt{{Destination: "b"}}
	if a := o.FanAttempts(); len(a) != 2 || a[0].Destination != "a" || a[1].Destination != "b" {
		t.Errorf("fan attempts %+v", a)
	}
}
