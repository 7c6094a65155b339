package claimplan

import "time"

// Tuning holds every tuning value of the claim path, with its default
// (Default). Nothing else in the engine defines one. Each field says what it
// trades; what a run measured belongs in the commit that set it.
type Tuning struct {
	// Claims and credit.

	// CreditShare is the share of a claim's size (the smaller of the batch
	// size and the credit) that must be free before a claim starts: claims
	// of a handful of rows would cost a statement each.
	CreditShare int
	// WaitCreditShare: after a claim that came back less than half full, the
	// next claim waits until this share of the batch size has finished, so
	// that it does not scan the same busy keys again.
	WaitCreditShare int
	// SlowClaimAfter and SlowClaimFactor: a claim that runs longer than
	// both this and the factor times the typical claim gets a probe beside
	// it, so that one stalled claim does not hold back rows that commit
	// meanwhile.
	SlowClaimAfter  time.Duration
	SlowClaimFactor int
	// FailFirst and FailMax bound the backoff between claims while the
	// database refuses them, so that an outage is not hammered.
	FailFirst, FailMax time.Duration
	// IdlePoll is the longest the planner goes without a claim: the last
	// safety net for rows that no wake-up, probe or schedule announced.
	IdlePoll time.Duration
	// StatementsAlone and StatementsShared are how many claims (and
	// completions) run at once alone on the database server, and beside
	// other relays (see the actors package doc): n relays keep n of each
	// running rather than 2n that wait on each other. BudgetLookEvery is
	// how often a replica counts the other relays' sessions (a relay that
	// joins is counted within it).
	StatementsAlone, StatementsShared int
	BudgetLookEvery                   time.Duration
	// WaitLogAfter is how long keyed rows wait for an open writer before
	// the log names it (and how often it looks again while they wait).
	WaitLogAfter time.Duration

	// Probes.

	// IdleAfter is how long after the last news a probing claimer stays at
	// the base probe interval (outbox.probeIntervalMs) before it backs off.
	IdleAfter time.Duration
	// IdleProbe and IdleProbeMax: the backed-off probe interval starts at
	// the first and doubles up to the second, so that a quiet relay costs a
	// few transactions a second and the first row after a quiet spell
	// waits little. While wake-ups listen, the same range paces the probes
	// that look for rows to settle (a writer that rolled back sends no
	// wake-up).
	IdleProbe, IdleProbeMax time.Duration
	// SafetyProbe is the probe interval while wake-ups listen and no row
	// waits to settle: it finds what sends no wake-up (a replay, rows
	// another replica released).
	SafetyProbe time.Duration

	// Kinds of claim and runs.

	// ShallowRun is the run length at or below which keys count as
	// shallow, and claims go in schedule order.
	ShallowRun int
	// MaxRun is the longest run a claim aims for per key: longer runs mean
	// fewer busy keys and fewer claims, but one key's run holds its actor
	// longer.
	MaxRun int

	// The long-transaction horizon.

	// HeldAfter is how long a transaction must have held the database's
	// horizon back before claims behave as under a long transaction: a bulk
	// insert of a few seconds should not switch them.
	HeldAfter time.Duration
	// HorizonEvery is how often the horizon is looked at while nothing
	// holds it, HorizonSoon how often while a transaction does (so that
	// claims leave held mode soon after it ends).
	HorizonEvery, HorizonSoon time.Duration
	// HeldClaimEvery is the least time between the starts of two claims that
	// are not full while the horizon is held: each walk reads the versions
	// the transaction keeps, so fewer, larger claims cost less.
	HeldClaimEvery time.Duration

	// Bounds (see the package doc: lookback, floors, positions).

	// LookbackMargin is how far before the last walk a walk in schedule
	// order looks again: a row's scheduled_at is its transaction's start,
	// and a transaction that began before a walk may commit after it.
	LookbackMargin time.Duration
	// MinMargin is the narrow walks' margin beyond the lateness seen
	// lately, while held; WideEvery how often a walk still takes the whole
	// LookbackMargin; LateWindow the window over which lateness is kept.
	MinMargin, WideEvery, LateWindow time.Duration
	// FullLookFactor: a walk over the keys comes this many times its last
	// duration after the last one, within MinFullLook and MaxFullLook.
	FullLookFactor           int
	MinFullLook, MaxFullLook time.Duration
	// BackgroundLookFactor: a look off the claims' path (stragglers, the
	// floors, expired leases) comes this many times its last duration after
	// the last, so that together they stay a small share of the database's
	// time however long a transaction keeps versions.
	BackgroundLookFactor int
	// MaxFloorsLook bounds the time between two reads of the floors.
	MaxFloorsLook time.Duration
	// LookAfterRows and QuietLookEvery: while the horizon is clear, a look
	// off the claims' path (stragglers, floors) waits for this many rows
	// claimed since the last one, or this long: at a trickle, a look per
	// claim would cost the database more than the claims.
	LookAfterRows  int
	QuietLookEvery time.Duration
	// MinStragglerLook is the least time between two looks for stragglers;
	// StragglerSpan how far back the narrow looks between two looks from
	// the start reach (longer transactions' rows wait for a look from the
	// start).
	MinStragglerLook, StragglerSpan time.Duration
	// MaxContinuing bounds the keys remembered to continue; MaxPositions
	// the keys' positions a claim carries.
	MaxContinuing, MaxPositions int
	// PositionsAfter is how old the floors must be before held claims carry
	// keys' positions; PositionsEvery how often their sorted copy is made.
	PositionsAfter, PositionsEvery time.Duration
}

// Default is the tuning QueueBox runs with.
func Default() Tuning {
	return Tuning{
		CreditShare:     4,
		WaitCreditShare: 2,
		SlowClaimAfter:  5 * time.Millisecond,
		SlowClaimFactor: 3,
		FailFirst:       100 * time.Millisecond,
		FailMax:         5 * time.Second,
		IdlePoll:        30 * time.Second,

		StatementsAlone:  2,
		StatementsShared: 1,
		BudgetLookEvery:  5 * time.Second,
		WaitLogAfter:     10 * time.Second,

		IdleAfter:    time.Second,
		IdleProbe:    25 * time.Millisecond,
		IdleProbeMax: 250 * time.Millisecond,
		SafetyProbe:  5 * time.Second,

		ShallowRun: 8,
		MaxRun:     128,

		HeldAfter:      5 * time.Second,
		HorizonEvery:   10 * time.Second,
		HorizonSoon:    time.Second,
		HeldClaimEvery: 5 * time.Millisecond,

		LookbackMargin:       250 * time.Millisecond,
		MinMargin:            20 * time.Millisecond,
		WideEvery:            100 * time.Millisecond,
		LateWindow:           10 * time.Second,
		FullLookFactor:       20,
		MinFullLook:          10 * time.Millisecond,
		MaxFullLook:          time.Minute,
		BackgroundLookFactor: 50,
		MaxFloorsLook:        10 * time.Minute,
		LookAfterRows:        100,
		QuietLookEvery:       5 * time.Second,
		MinStragglerLook:     time.Second,
		StragglerSpan:        10 * time.Second,
		MaxContinuing:        65536,
		MaxPositions:         1024,
		PositionsAfter:       time.Second,
		PositionsEvery:       100 * time.Millisecond,
	}
}
