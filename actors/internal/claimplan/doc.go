// Package claimplan decides what a replica's next claim is, and when it
// runs. It does no I/O and reads no clock: the claimer actor (package
// actors) feeds it what happened, as events, with the time, and does what
// the returned Actions say (start claims, a probe, a look; arm timers).
// Everything here can therefore be tested by stepping time by hand.
//
// # What a claim must respect
//
//   - Credit: no claim asks for more rows than the replica has room for
//     (outbox.maxInFlight less the rows in flight), and none starts for a
//     handful of rows (Tuning.CreditShare).
//   - The statement budget: at most Config.Statements claims run at once
//     (two alone on the server, one beside other relays; see Budget).
//   - The gate: keyed rows are taken only once settled (see
//     dialects.Watermark): the planner keeps the watermark, and every claim
//     probes into a copy of it first.
//   - Bounds only narrow: a claim's bounds may leave rows out of its view,
//     never let a row be taken out of order. What a bounded walk leaves is
//     found by a look for stragglers or a walk from the start.
//
// # Modes
//
// The planner is in exactly one Mode:
//
//	Quiet    the last claim took everything it could see.
//	Ready    there may be rows to take: claim when credit and a statement allow.
//	Backlog  the last claim was full: claim back to back, up to the budget at once.
//	Paced    the horizon is held and the last claim was not full: wait
//	         Tuning.HeldClaimEvery from the last start.
//	Failing  the database refused a claim or probe: wait for the back-off.
//	Draining the engine stops: no claim starts again.
//
// A claim's end sets the mode: full → Backlog; news during it, keys to
// continue, or keys left waiting by a walk → Ready (and claim); otherwise
// Quiet. A quiet planner becomes Ready on news: a wake-up, a probe that saw
// rows arrive or settle, a retry or deferral coming due (its timer), rows
// released back to pending, a finished run whose key may have a next row
// (one arrived after its run was claimed), a straggler found, and the idle
// poll (Tuning.IdlePoll; every poll while the horizon is held, or when the
// database will not show other transactions). A refused statement →
// Failing, whose timer makes it Ready. Paced's timer makes it Ready.
//
// Two facts of the world are kept beside the mode, each changed by an event
// of its own:
//
//   - wake-ups: Listening (logical replication says when rows commit) or
//     probing. Listening, the planner claims when a wake-up comes and
//     probes only as a safety net, or while rows wait to settle; probing,
//     it probes at the base interval while active and backs off while idle
//     (see Pace). A wake-up source that stops listening says so with a
//     wake-up, and the probes take over.
//   - the horizon: held once the Janitor saw a transaction hold it back for
//     Tuning.HeldAfter (HorizonSeen), clear otherwise. Held, claims are
//     paced, walks in schedule order take narrow margins, walks over the
//     keys come only as their cost allows, and claims carry keys' positions.
//
// # Bounds: claims that start past what they left behind
//
// Every claim and completion leaves row versions in the outbox's indexes.
// Vacuum removes them soon, but not while a transaction anywhere in the
// database keeps the horizon back; a walk from the first index entry would
// then pass over every version since that transaction began. So each claim
// carries bounds (dialects.Bounds), kept by reach:
//
//   - continuations: the keys whose runs this replica finished start one
//     probe past the run's last sequence;
//   - the lookback: a walk in schedule order looks only at rows that became
//     due since the last walk, less a margin for transactions that
//     committed meanwhile (narrowed to the lateness seen lately while held),
//     and back to when a writer its probe sees open was first seen;
//   - floors: per group of keys, a sequence below which nothing is pending
//     or processing, read off the claims' path as its cost allows;
//   - positions: while held, the keys' positions from finished runs.
//
// A row whose transaction began before the lookback and committed after
// the walk that passed it is a straggler: a look for stragglers (narrow,
// about every second while rows arrive; from the start as its cost allows)
// finds it and sends the next walk back to it. Rows that go back to pending
// behind the bounds (a replay, an expired lease, a stopping replica's
// releases) move the rewind counter, and a claim that finds it moved sets
// its bounds aside.
//
// # Files
//
//	planner.go  the Planner: modes, events, actions, Step
//	reach.go    the bounds: continuations, lookback, floors, positions, stragglers
//	heads.go    the kinds of claim (in schedule order, by key) and how many heads
//	pace.go     when the next probe comes
//	tuning.go   every tuning value, with its default
//
// # Glossary
//
//	anchor       when the rows the next walk in schedule order must see began to become due
//	blind        the database will not show other transactions: no gate, no probes
//	by key       a claim that finds heads key by key (a skip scan); cheap on few deep keys
//	continuation a key whose run this replica finished, claimed next from past its run
//	credit       room for rows in flight; returned as outcomes are written
//	floor        per group of keys, a sequence below which no row is pending or processing
//	fruitless    a claim in schedule order, made instead of a walk over the keys, that found nothing
//	full         a claim that came back nearly full, or with every head it could take
//	head         a key's first pending or processing row, or any unkeyed row: the rows a claim may take first
//	held         a transaction has held the database's horizon back for HeldAfter
//	horizon      the oldest snapshot still open: what vacuum may not clean past
//	lookback     how far back a walk in schedule order looks for due rows
//	news         anything that says more rows may be claimable
//	probe        a cheap read of where the outbox sequence and the transactions stand
//	rewind       rows went back to pending behind the bounds; claims set their bounds aside
//	run          the rows of one key that one claim hands to its key actor, in order
//	settled      a keyed row no earlier row of its key can still commit before
//	straggler    a due row a bounded walk passed before its transaction committed
//	walk         one claim's pass over an index: in schedule order, or over the keys
//	wide, narrow a walk with the whole lookback margin, or one narrowed to recent lateness (held)
package claimplan
