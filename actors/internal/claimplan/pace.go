package claimplan

import "time"

// Pace decides when the next probe comes: how often a claimer (or the inbox
// relay, which follows the same rules) asks the database whether rows
// arrived or settled. It is pure: the caller passes the time and what it
// knows, and arms one timer for the answer.
//
// Two regimes, by whether wake-ups listen (logical replication tells when
// rows commit):
//
//   - Probing (no wake-ups): while something happened in the last
//     Tuning.IdleAfter, or rows are in flight, at the base interval
//     (outbox.probeIntervalMs); otherwise backing off from Tuning.IdleProbe,
//     doubling at each probe that finds nothing, up to Tuning.IdleProbeMax.
//   - Listening: wake-ups say when rows arrive, so there are no fast
//     probes at all. While rows wait to settle (a writer that rolled back
//     sends no wake-up; a commit may become visible an instant after its
//     wake-up), the backed-off range of the probing regime; otherwise one
//     probe every Tuning.SafetyProbe, for what sends no wake-up.
type Pace struct {
	t    Tuning
	base time.Duration
	// step is the backed-off interval reached; 0 when no back-off is
	// under way (it starts at its first step).
	step time.Duration
}

// NewPace returns a pace with base interval base (at least 1 ms).
func NewPace(t Tuning, base time.Duration) Pace {
	return Pace{t: t, base: max(base, time.Millisecond)}
}

// PaceState is what the pace needs to know.
type PaceState struct {
	// Listening: wake-ups flow.
	Listening bool
	// Active: something arrived, settled or was claimed within IdleAfter,
	// or rows are in flight.
	Active bool
	// Waiting: rows were seen that have not settled yet, or wake-ups began
	// to listen a moment ago (a commit while they set up may have sent
	// none).
	Waiting bool
}

// Interval is the delay from one probe to the next in state s.
func (p *Pace) Interval(s PaceState) time.Duration {
	switch {
	case !s.Listening && s.Active:
		return p.base
	case s.Listening && !s.Waiting:
		return max(p.base, p.t.SafetyProbe)
	case p.step == 0:
		return max(p.base, p.t.IdleProbe)
	}
	return p.step
}

// Probed moves the back-off after a probe in state s that found news or
// not: news starts it over, nothing doubles it up to its end.
func (p *Pace) Probed(s PaceState, found bool) {
	switch {
	case found || !s.Listening && s.Active || s.Listening && !s.Waiting:
		p.step = 0
	case p.step == 0:
		p.step = min(2*max(p.base, p.t.IdleProbe), max(p.base, p.t.IdleProbeMax))
	default:
		p.step = min(2*p.step, max(p.base, p.t.IdleProbeMax))
	}
}

// Idle reports whether the pace has backed off (for the metrics: the
// claimer probes at its idle pace).
func (p *Pace) Idle(s PaceState) bool { return s.Listening || !s.Active }
