package dialects

import (
	"strings"
	"testing"
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
		placeReplays(h)
		var got []string
		for _, a := range h {
			o := a.Outcome
			if o == OutcomeReplayed {
				o = "R"
			}
			got = append(got, o)
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%s: got %s, want %s", c.in, strings.Join(got, " "), c.want)
		}
	}
}
