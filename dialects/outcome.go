package dialects

import (
	"cmp"
	"slices"

	"github.com/google/uuid"
)

// Write is what one outcome writes to its row, independent of the database.
type Write struct {
	State            State
	AttemptIncrement int
	// Reschedule sets scheduled_at = now + Outcome.Delay.
	Reschedule bool
	// WriteError sets last_error = Outcome.Error.
	WriteError bool
}

// WriteOf translates an outcome into the columns it changes (behaviour.md,
// the transition table). Every outcome also clears the claim and the lease
// and sets updated_at.
func WriteOf(o Outcome) Write {
	switch o.Kind {
	case OutcomeDelivered:
		return Write{State: Delivered}
	case OutcomeRetry:
		return Write{State: Pending, AttemptIncrement: 1, Reschedule: true, WriteError: true}
	case OutcomeDead:
		return Write{State: Dead, WriteError: true}
	default: // OutcomeRelease
		return Write{State: Pending}
	}
}

// SortClaimed orders claimed rows by key, then sequence, so that the rows of
// one key form one run in sequence order.
func SortClaimed(rows []Row) {
	slices.SortFunc(rows, func(a, b Row) int {
		if c := cmp.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return cmp.Compare(a.Sequence, b.Sequence)
	})
}

// Tokens returns the distinct claim tokens of claims.
func Tokens(claims []Claim) []uuid.UUID {
	seen := map[uuid.UUID]struct{}{}
	var out []uuid.UUID
	for _, c := range claims {
		if _, ok := seen[c.Token]; !ok {
			seen[c.Token] = struct{}{}
			out = append(out, c.Token)
		}
	}
	return out
}

// ReplayDefaultStates is the state selection of a replay that names none:
// dead rows, or, for a replay by id, dead and delivered rows (naming a row is
// asking for it).
func ReplayDefaultStates(f Filter) []State {
	if len(f.IDs) > 0 {
		return []State{Dead, Delivered}
	}
	return []State{Dead}
}
