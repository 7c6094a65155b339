package dialects

// What the dialects share of a fan-out row's completion (see Copies).

// State is the state a copy of kind k is written in: dead for CopyDead,
// pending otherwise.
func (k CopyKind) State() State {
	if k == CopyDead {
		return Dead
	}
	return Pending
}

// FanOut reports whether any outcome carries what only a fan-out row's
// completion writes: copies of a delivered row, or more attempts. The
// completion of outcomes that carry neither runs the statement it runs
// without fan-out routes.
func FanOut(outcomes []Outcome) bool {
	for i := range outcomes {
		if len(outcomes[i].Attempts) > 0 || len(outcomes[i].WrittenCopies()) > 0 {
			return true
		}
	}
	return false
}

// WrittenCopies are the copies the completion of o creates: those of a
// delivered row (Outcome.Copies is read for OutcomeDelivered only), one per
// destination, the last one given when a destination comes twice (one
// statement cannot write a copy twice).
func (o Outcome) WrittenCopies() []Copy {
	if o.Kind != OutcomeDelivered || len(o.Copies) == 0 {
		return nil
	}
	last := make(map[string]int, len(o.Copies))
	for i, c := range o.Copies {
		last[c.Destination] = i
	}
	if len(last) == len(o.Copies) {
		return o.Copies
	}
	out := make([]Copy, 0, len(last))
	for i, c := range o.Copies {
		if last[c.Destination] == i {
			out = append(out, c)
		}
	}
	return out
}

// RecordedOutcomeOf is the outcome that attempt a of outcome o is recorded
// with. In a fan-out row's pass each destination ends on its own: an
// attempt whose destination got a copy is recorded as that copy's end
// (dead for CopyDead, retry for the others: it is tried again), and one
// whose destination got none was delivered. Any other attempt is recorded
// as RecordedOutcome(o.Kind).
func RecordedOutcomeOf(o Outcome, a Attempt) string {
	if o.Kind == OutcomeDelivered {
		for _, c := range o.Copies {
			if c.Destination == a.Destination {
				if c.Kind == CopyDead {
					return OutcomeDead.String()
				}
				return OutcomeRetry.String()
			}
		}
	}
	return RecordedOutcome(o.Kind)
}

// FanAttempts are the attempts the completion of o records: Attempt, then
// Attempts.
func (o Outcome) FanAttempts() []Attempt {
	if o.Attempt == nil {
		return o.Attempts
	}
	return append([]Attempt{*o.Attempt}, o.Attempts...)
}
