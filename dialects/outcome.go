package dialects

// Write is what one outcome writes to its row, independent of the database.
type Write struct {
	State            State
	AttemptIncrement int
	// Reschedule sets scheduled_at = now + Outcome.Delay.
	Reschedule bool
	// WriteError sets last_error = Outcome.Error.
	WriteError bool
}

// WriteOf translates an outcome into the columns it changes (docs/how-it-works.md,
// "The life of a row"). Every outcome also clears the claim and the lease
// and sets updated_at.
func WriteOf(o Outcome) Write {
	switch o.Kind {
	case OutcomeDelivered:
		return Write{State: Delivered}
	case OutcomeRetry:
		return Write{State: Pending, AttemptIncrement: 1, Reschedule: true, WriteError: true}
	case OutcomeDead:
		return Write{State: Dead, WriteError: true}
	case OutcomeDefer:
		return Write{State: Pending, Reschedule: true}
	default: // OutcomeRelease
		return Write{State: Pending}
	}
}
