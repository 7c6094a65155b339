package dialects

import (
	"strings"
	"testing"
	"time"
)

// A replay read back between the attempts that came after it (stamped by a
// relay whose clock is behind the database's) goes back right after the
// attempt that ended the row before it; a history in its true order is
// left as it is.
func TestPlaceReplays(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"retry dead", "retry dead"},
		{"retry dead R retry delivered", "retry dead R retry delivered"},
		{"retry dead retry delivered R", "retry dead R retry delivered"},
		{"dead delivered R", "dead R delivered"},
		{"dead delivered R dead R", "dead R delivered R dead"},
		{"dead delivered dead R R", "dead R delivered R dead"},
		{"dead R retry delivered R retry", "dead R retry delivered R retry"},
		{"retry R", "retry R"}, // the row's end is older than the history
		{"R retry delivered", "R retry delivered"},
	} {
		var h []RecordedAttempt
		for _, o := range strings.Fields(c.in) {
			if o == "R" {
				o = OutcomeReplayed
			}
			h = append(h, RecordedAttempt{Outcome: o})
		}
		if got := outcomes(placeReplays(h)); got != c.want {
			t.Errorf("%s: got %s, want %s", c.in, got, c.want)
		}
	}
}

// outcomes writes a history as TestPlaceReplays reads it: R a replay, a
// delivery told by the row in capitals.
func outcomes(h []RecordedAttempt) string {
	var got []string
	for _, a := range h {
		o := a.Outcome
		switch {
		case o == OutcomeReplayed:
			o = "R"
		case a.FromRow:
			o = strings.ToUpper(o)
		}
		got = append(got, o)
	}
	return strings.Join(got, " ")
}

// A replay of a delivered row carries the row's delivery: when no entry
// before the replay records it (the relay records no first try that
// succeeds), it is shown from the row right before the replay, with the
// row's try and time; the entries stamped after it, by a relay whose clock
// is behind the database's, go after the replay. A recorded delivery is
// not shown twice, and a replay of a dead row adds nothing.
func TestPlaceReplaysShowsTheDeliveryAReplaySetBack(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	delivered := &RowDelivery{Try: 1, At: at(10)}
	for _, c := range []struct {
		name string
		in   []RecordedAttempt
		want string
	}{
		{"a first try that succeeded", []RecordedAttempt{
			{Attempt: Attempt{At: at(100)}, Outcome: OutcomeReplayed, RowDelivered: delivered},
		}, "DELIVERED R"},
		{"after a failure not counted", []RecordedAttempt{
			{Attempt: Attempt{At: at(5), Try: 1, Uncounted: true}, Outcome: "retry"},
			{Attempt: Attempt{At: at(100)}, Outcome: OutcomeReplayed, RowDelivered: delivered},
			{Attempt: Attempt{At: at(101), Try: 1}, Outcome: "retry"},
		}, "retry DELIVERED R retry"},
		{"a try after the replay stamped before it", []RecordedAttempt{
			{Attempt: Attempt{At: at(5), Try: 1, Uncounted: true}, Outcome: "retry"},
			{Attempt: Attempt{At: at(99), Try: 1}, Outcome: "dead"},
			{Attempt: Attempt{At: at(100)}, Outcome: OutcomeReplayed, RowDelivered: delivered},
		}, "retry DELIVERED R dead"},
		{"a recorded delivery", []RecordedAttempt{
			{Attempt: Attempt{At: at(5), Try: 1}, Outcome: "retry"},
			{Attempt: Attempt{At: at(9), Try: 2}, Outcome: "delivered"},
			{Attempt: Attempt{At: at(100)}, Outcome: OutcomeReplayed, RowDelivered: &RowDelivery{Try: 2, At: at(10)}},
		}, "retry delivered R"},
		{"a recorded delivery, and a try after the replay stamped before it", []RecordedAttempt{
			{Attempt: Attempt{At: at(9), Try: 1, Probe: true}, Outcome: "delivered"},
			{Attempt: Attempt{At: at(99), Try: 1}, Outcome: "delivered"},
			{Attempt: Attempt{At: at(100)}, Outcome: OutcomeReplayed, RowDelivered: delivered},
		}, "delivered R delivered"},
		{"twice", []RecordedAttempt{
			{Attempt: Attempt{At: at(100)}, Outcome: OutcomeReplayed, RowDelivered: delivered},
			{Attempt: Attempt{At: at(200)}, Outcome: OutcomeReplayed, RowDelivered: &RowDelivery{Try: 1, At: at(150)}},
		}, "DELIVERED R DELIVERED R"},
		{"a dead row", []RecordedAttempt{
			{Attempt: Attempt{At: at(5), Try: 1}, Outcome: "dead"},
			{Attempt: Attempt{At: at(100)}, Outcome: OutcomeReplayed},
		}, "dead R"},
	} {
		got := placeReplays(c.in)
		if s := outcomes(got); s != c.want {
			t.Errorf("%s: got %s, want %s", c.name, s, c.want)
			continue
		}
		for _, a := range got {
			if a.FromRow && (a.Try != 1 || !a.At.Equal(at(10)) && !a.At.Equal(at(150)) || a.Duration != 0 || a.Destination != "") {
				t.Errorf("%s: the delivery told by the row: %+v", c.name, a)
			}
		}
	}
}

// The replay of one destination's copy ("r": it names its destination)
// sets the row back in nothing: it stays where its time put it, and a
// replay of the row after it is placed as if it were an attempt.
func TestPlaceReplaysOfCopies(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"retry delivered r", "retry delivered r"},
		{"retry r delivered", "retry r delivered"},
		{"dead delivered r R", "dead R delivered r"},
	} {
		var h []RecordedAttempt
		for _, o := range strings.Fields(c.in) {
			a := RecordedAttempt{Outcome: o}
			switch o {
			case "R":
				a.Outcome = OutcomeReplayed
			case "r":
				a.Outcome, a.Destination = OutcomeReplayed, "b"
			}
			h = append(h, a)
		}
		var got []string
		for _, a := range placeReplays(h) {
			o := a.Outcome
			if o == OutcomeReplayed {
				o = "R"
				if a.Destination != "" {
					o = "r"
				}
			}
			got = append(got, o)
		}
		if s := strings.Join(got, " "); s != c.want {
			t.Errorf("%s: got %s, want %s", c.in, s, c.want)
		}
	}
	h := []RecordedAttempt{{Outcome: "retry"}, {Outcome: OutcomeReplayed, Attempt: Attempt{Destination: "b"}}}
	if i := lastReplay(h); i != -1 {
		t.Errorf("the replay of a copy was taken for the row's: %d", i)
	}
}
