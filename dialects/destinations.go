package dialects

import (
	"context"
	"errors"
	"time"
)

// MaxDestinationName is the longest destination name the destination tables
// hold (their name columns are 255 characters wide).
const MaxDestinationName = 255

// DestinationState is what the database holds about one destination that
// an operator paused or resumed. A destination that was never paused has no
// state.
type DestinationState struct {
	Name   string
	Paused bool
	// Reason is the text given with the pause ("" for none; a resume clears
	// it).
	Reason string
	// Since is when the destination was paused, or resumed (database
	// clock). Pausing a paused destination again changes its reason, not
	// Since.
	Since time.Time
}

// OpenCircuit is a destination whose circuit one replica holds open: every
// delivery to it failed for a while, and that replica sends it only a probe
// now and then (see the actors package). Each replica keeps its own
// circuits; this is what it tells operators of them.
type OpenCircuit struct {
	Destination string
	// Replica names the relay that holds it open (host, process and a
	// random part: a restarted replica is a new one).
	Replica string
	// OpenedAt is when the replica first reported it open; SeenAt when it
	// last said it still is (database clock).
	OpenedAt, SeenAt time.Time
	// LastError is the last failure the replica saw, redacted and cut.
	LastError string
}

// Destinations is what pauses and resumes destinations, and shows the
// circuits relays opened. Operators change the pause state (the command
// line, the admin API); every relay reads it about twice a second and holds
// the rows of a paused destination (OutcomeDefer). Relays report the
// circuits they open, refresh them while open, and remove them when closed.
type Destinations interface {
	// DestinationStates reads the state of every destination that was ever
	// paused.
	DestinationStates(ctx context.Context) ([]DestinationState, error)
	// DestinationPause pauses a destination, or changes the reason of a
	// paused one, and returns its state; changed is false when it was
	// paused already.
	DestinationPause(ctx context.Context, name, reason string) (st DestinationState, changed bool, err error)
	// DestinationResume resumes a paused destination and returns its
	// state; changed is false (and the state has only its name) when it
	// was not paused.
	DestinationResume(ctx context.Context, name string) (st DestinationState, changed bool, err error)
	// DestinationCircuitOpen records that replica holds destination's
	// circuit open, or that it still does (SeenAt moves, OpenedAt stays).
	DestinationCircuitOpen(ctx context.Context, c OpenCircuit) error
	// DestinationCircuitsClosed removes the circuits of replica for the
	// destinations named, and the circuits no replica has refreshed for
	// a day (replicas that stopped without removing theirs).
	DestinationCircuitsClosed(ctx context.Context, replica string, destinations []string) error
	// DestinationCircuits lists the open circuits that their replicas
	// refreshed within fresh.
	DestinationCircuits(ctx context.Context, fresh time.Duration) ([]OpenCircuit, error)
}

// DestinationStatements are a dialect's statements of the destinations'
// state; a dialect's catalog embeds them. Their parameters, in order:
// DestinationPause name and reason (NULL for none), DestinationResume name,
// DestinationCircuitOpen destination, replica and last error,
// DestinationCircuitsClosed replica and a list of destinations,
// DestinationCircuits how recent in milliseconds. The rows they return are
// read by DestinationTables.
type DestinationStatements struct {
	DestinationStates, DestinationPause, DestinationResume                 string
	DestinationCircuitOpen, DestinationCircuitsClosed, DestinationCircuits string
}

// DestinationTables is Destinations over a dialect's connection pool,
// written once for every dialect: a dialect embeds it, with its statements
// and how its driver takes a list of names and a count of milliseconds.
type DestinationTables struct {
	Conn       Conn
	Statements *DestinationStatements
	// List binds a list of names (an array, or a JSON array); Millis a
	// duration in milliseconds.
	List   func([]string) any
	Millis func(time.Duration) any
}

// scanState reads name, paused, reason and since (and, with changed,
// whether the statement changed the state).
func scanState(s Scanner, changed *bool) (st DestinationState, err error) {
	dest := []any{&st.Name, &st.Paused, &st.Reason, &st.Since}
	if changed != nil {
		dest = append(dest, changed)
	}
	err = s.Scan(dest...)
	return st, err
}

func (t DestinationTables) DestinationStates(ctx context.Context) ([]DestinationState, error) {
	var out []DestinationState
	err := t.Conn.Query(ctx, t.Statements.DestinationStates, nil, func(s Scanner) error {
		st, err := scanState(s, nil)
		out = append(out, st)
		return err
	})
	return out, err
}

// one runs a statement that returns one state (or none: found is false).
func (t DestinationTables) one(ctx context.Context, query string, args []any, changed *bool) (st DestinationState, found bool, err error) {
	err = t.Conn.Query(ctx, query, args, func(s Scanner) error {
		found = true
		st, err = scanState(s, changed)
		return err
	})
	return st, found, err
}

func (t DestinationTables) DestinationPause(ctx context.Context, name, reason string) (DestinationState, bool, error) {
	var why any
	if reason != "" {
		why = reason
	}
	var changed bool
	st, found, err := t.one(ctx, t.Statements.DestinationPause, []any{name, why}, &changed)
	if err == nil && !found {
		err = errors.New("pausing " + name + " returned no state")
	}
	return st, changed, err
}

func (t DestinationTables) DestinationResume(ctx context.Context, name string) (DestinationState, bool, error) {
	st, found, err := t.one(ctx, t.Statements.DestinationResume, []any{name}, nil)
	if err != nil || !found {
		return DestinationState{Name: name}, false, err
	}
	return st, true, nil
}

func (t DestinationTables) DestinationCircuitOpen(ctx context.Context, c OpenCircuit) error {
	return t.Conn.Exec(ctx, t.Statements.DestinationCircuitOpen, c.Destination, c.Replica, c.LastError)
}

func (t DestinationTables) DestinationCircuitsClosed(ctx context.Context, replica string, destinations []string) error {
	if destinations == nil {
		destinations = []string{}
	}
	return t.Conn.Exec(ctx, t.Statements.DestinationCircuitsClosed, replica, t.List(destinations))
}

func (t DestinationTables) DestinationCircuits(ctx context.Context, fresh time.Duration) ([]OpenCircuit, error) {
	var out []OpenCircuit
	err := t.Conn.Query(ctx, t.Statements.DestinationCircuits, []any{t.Millis(fresh)}, func(s Scanner) error {
		var c OpenCircuit
		err := s.Scan(&c.Destination, &c.Replica, &c.OpenedAt, &c.SeenAt, &c.LastError)
		out = append(out, c)
		return err
	})
	return out, err
}
