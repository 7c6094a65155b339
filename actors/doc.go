// Package actors is QueueBox's engine: the actors that claim outbox rows,
// deliver them to their destinations and write their outcomes, on
// protoactor-go. The decisions that are not about messages live in three
// packages beside it, each with a doc of its own:
//
//	internal/claimplan  what the next claim is, and when: modes, bounds, pace, tuning
//	internal/destctl    whether a delivery may start: pauses, the circuit breaker, flow control
//	internal/upkeep     the Janitor (expired leases, retention, the horizon) and the lease keeper
//
// # The actors, and where they live
//
//	Engine supervisor            supervisor.go (the engine's API: engine.go, options.go)
//	├── Claimer                  claimer.go (the planner's shell; claims and probes)
//	│   └── Key actor (per key)  keyactor.go
//	├── Unordered pool           pool.go
//	├── Lease keeper             upkeep (a claim's trust window: upkeep.Lease)
//	├── Completer                completer.go
//	├── Sink supervisor          sinksupervisor.go
//	│   └── Sink actor           sinkactor.go (builds the sink a destctl.Handle serves)
//	├── Janitor                  upkeep
//	├── Inbox relay              inboxrelay.go (inbox rows -> outbox rows)
//	└── the copies path          copies.go (fan-out routes only: the copies of fan-out rows)
//	    ├── Copies claimer       copies.go
//	    │   └── Key actor (per lane)
//	    ├── Copies pool, completer and lease keeper (the same actors, over the copies table)
//	    └── its loops            copies.go (expired leases and retention of copies)
//
// And the files the actors share:
//
//	delivery.go      one delivery path for key actors and the pool: queue, batch, Publish, outcomes
//	prepare.go       a row routed (filters too) and checked before it is sent
//	fanout.go        a fan-out row: split into units by lane, gathered into one outcome with its copies
//	copies.go        the copies path: its claimer, its adapter to the copies table, its loops
//	outcome.go       delivered, retried after a backoff, deferred, or dead
//	attempts.go      the attempt history's record of a delivery
//	gate.go          the log of a writer that holds keyed rows back (the claimer's and the inbox relay's)
//	budget.go        the watcher that counts other relays and sets the statement budget
//	background.go    the loops that own I/O: their lifetime
//	destinations.go  the destinations' policies and status, as the engine shows them
//	mailbox.go       bounded mailboxes, and their lengths per actor kind
//	observer.go      the hook for metrics
//	loglevel.go      protoactor's own log, at warnings only
//	doc.go           this
//
// Each actor is built with what it works with: the addresses of the actors
// it sends to, the dialect, the options, the logger, the counters, the
// clock (Options.Clock: every actor, loop and timer reads it, so tests can
// run on a fake one) and the Observer. The supervisor spawns them downstream
// first (lease keeper, completer, pool, claimer) so that every address
// exists before it is handed down; no actor looks another up in shared
// state, and none reads Stats, which is for observation only.
//
// # The flow of one row
//
//	Claimer ──run──▶ Key actor (one per active key) ──┐
//	   │      └─run──▶ Unordered pool               ├─finished──▶ Completer
//	   └─track──▶ Lease keeper ──cancel──▶ key actor │
//	                                                 ▼
//	                 (flush goroutine) ──credit──▶ Claimer, ──untrack──▶ Lease keeper
//
// Where the database allows logical replication, it tells the relay when
// rows commit (dialects.Wakeups): the Claimer claims then. Otherwise it
// probes (a cheap read of where the outbox sequence and the open
// transactions stand) at outbox.probeIntervalMs while rows flow, backing
// off while nothing happens. Each claim probes first, inside its own
// transaction on PostgreSQL, and is gated: keyed rows are claimed only once
// settled, when no transaction that could still commit an earlier row of
// their key is open (dialects.Watermark), so rows that producers commit
// out of sequence order are still delivered in it. The probe also says
// when the next row scheduled later comes due, and the Claimer claims then.
// What to claim and when is the planner's (claimplan): the Claimer turns
// each message into one of its events and does what it answers.
//
// The Claimer claims a batch no larger than its free credit (so memory is
// bounded by outbox.maxInFlight), groups it by key and sends each key's run,
// in sequence order, to that key's actor, spawning it on demand; unkeyed
// rows go to the pool. A key actor delivers its rows strictly one delivery
// after another; on a failure that is retried it stops, reschedules the
// failed row and releases every other row it holds, untouched, in the same
// completion statement. A dead row does not stop it. The pool delivers
// unkeyed rows concurrently. Each step's outcomes go to the Completer,
// which writes them in few statements (group commit) and, from the
// goroutine that wrote them, returns the credit to the Claimer (with the
// keys whose runs ended, and when the earliest retry comes due) and tells
// the Lease keeper to forget the claims.
//
// # The flow of a fan-out row
//
// A route may send a row to several destinations (routing.Route.FanOut).
// Then claims ask which lanes are blocked (dialects.ClaimParams.Lanes): a
// lane is one destination's view of one key, and it is blocked while
// copies of the key wait for that destination. The Claimer routes each row
// of the claim (splitClaim: by topic, or by topic and payload when a
// route has a filter) and splits a fan-out row into units, one per
// destination. A key with a fan-out row in the claim, or a blocked lane,
// travels in lanes: each of its rows goes, as one unit per destination of
// its route, to the key actor of that lane, so that each destination keeps
// the key's order on its own; a unit of a blocked lane is not delivered
// and becomes a copy behind at once. Other keys go to their key actor as
// they are, and an unkeyed fan-out row goes to the pool as a unit per
// destination. Before the units, the Claimer hands the fan-out rows to
// the Completer (fanClaimed), and the Lease keeper tracks each row under
// every actor that holds one of its units.
//
//	Claimer ──fanClaimed──▶ Completer
//	   ├─run (units)──▶ Key actor of lane (a, key) ──┐
//	   ├─run (units)──▶ Key actor of lane (b, key) ──┼─finished (unit ends)──▶ Completer: one outcome per row
//	   └─run (units)──▶ Unordered pool (unkeyed)   ──┘
//
// A lane's actor delivers its units as a key actor delivers rows, batching
// per destination as ever: a unit that fails and is retried, or whose
// destination is held, stops its lane (the units behind it are released,
// and become copies behind); a dead one does not. The other lanes go on.
// Each unit's end goes to the Completer, which gathers a row's units
// (fanIn) and, once every unit has ended, writes the row's one outcome:
// delivered, with a copy (dialects.Copy) for each destination whose
// delivery did not end well (retried, deferred, behind, dead) and the
// attempts of its units for the history; released, when no unit was
// tried and one was released untouched (the replica drains, the lease is
// no longer trusted); dead, when the row itself cannot be delivered (its
// payload or headers; no route and a filter that fails are found when it
// is claimed). A lost claim reaches every actor holding one of the row's
// units: they abandon them, and nothing is written for the row. A row's
// outcome waits for those of the earlier rows of its key that this
// replica claimed, so that a replica that stops between them leaves the
// key's undelivered rows behind its delivered ones. When a key's rows in
// flight have all been written delivered or dead, the Completer tells the
// Claimer where the key stands (a continuation), as a key actor's run
// does. Credit counts rows: a fan-out row returns one, however many units
// it had.
//
// Where the router has no fan-out route and no filter, none of this runs:
// a row is routed by its topic in the actor that delivers it, as ever.
//
// # The copies path
//
// A copy is a row of the copies table: one destination's part of a
// fan-out row that did not end well in the row's pass. The copies path
// delivers copies with the engine's own actors: the Copies claimer claims
// them (dialects.Copies.CopyClaim: the heads of lanes that are due, and
// the copies right behind them), and hands each lane's copies to that
// lane's key actor, unkeyed ones to a pool of its own; their outcomes go
// to a completer of its own, and a lease keeper of its own renews them.
// The completer and the lease keeper run the Relay statements of an
// adapter (copiesRelay) that writes the copies table instead. The
// destinations are the engine's: a copy waits for a paused destination,
// an open circuit or a full flow like a row, and counts its own attempts
// against its max_attempts, with the rows' backoff. A copy's message is
// its row's, with the row's id, transformed by the route that matches its
// topic now (its filter is not run again); a copy whose destination is no
// longer configured goes dead saying so. The Copies claimer does not
// probe at a pace: it claims when this replica wrote copies (the
// Completer's flush tells it, with when the first comes due), when a
// copy comes due (a retry or deferral it wrote, or what CopyProbe says),
// when copies went back to pending, as the outcomes of the copies it
// claimed are written while its claims take copies (the copies behind a
// lane's head become claimable then), and at a safety net's tick: every
// copySafetyNet a CopyProbe, and a claim when the copies' change counter
// moved, when the last claim took copies, or, once copies exist, every
// copyBlindClaim. Its loops return copies of expired leases to pending and
// delete old ones as retention says.
//
// # No deadlock at any mailbox size
//
// protoactor's bounded mailbox makes a sender wait while it is full, so a
// cycle of actors sending to each other through full mailboxes would
// deadlock. Here, inside Receive, actors send only downstream along an
// acyclic graph: Claimer → {key actors, pool, Lease keeper, Completer},
// Lease keeper → key actors and pool, key actors and pool → Completer; the
// Completer sends to no actor. The copies path has the same graph of its
// own; the nudge from the Completer's flush to the Copies claimer is sent
// by that flush's goroutine. Everything that flows back (claim results, delivery results,
// credit, renewal results, timers, wake-ups, the budget, the horizon) is
// sent by a goroutine that owns the I/O or the clock, never by an actor.
// The Completer therefore always makes progress, then the key actors and
// pool, then the Lease keeper, then the Claimer. Mailbox sizes
// (engine.mailbox.*) only tune throughput; a size of 1 is served as 2,
// because the ring buffer behind protoactor's bounded mailbox loses
// messages at capacity 1 (mailbox.go).
//
// # Holding a destination's rows
//
// Before a delivery starts, its destination's handle decides whether it may
// (destctl.Handle.Admit): not while an operator has paused the destination,
// nor while its circuit is open (one probe per interval goes out), nor
// while its flow control has as many rows waiting as it lets wait. A
// delivery that may not start is deferred: its row goes back to pending
// with scheduled_at moved on and its attempt unchanged; a key's rows behind
// it go back untouched. A delivery that may start waits for its permits in
// its publish goroutine, never in an actor, and looks again before it
// publishes.
//
// # Leases and trust
//
// Each claim statement has one token and one lease; the lease's trust
// window (upkeep.Lease) ends a margin before the database's lease would,
// measured from when the claim (or the last renewal) was sent. A delivery
// starts only inside the window; outside it, the row is released instead.
// The Lease keeper renews every in-flight claim in one statement every
// claimTimeout/3; a claim the database no longer holds is reported to the
// actor holding it, which cancels that delivery and writes nothing for it.
// The Janitor returns rows whose lease has passed to pending (attempt
// unchanged), deletes old rows, and tells the Claimer what holds the
// database's horizon back.
//
// # Shutdown and crashes
//
// Stop sends drain to the Claimer, which stops claiming and tells every key
// actor and the pool to release the rows they have not started. In-flight
// deliveries finish for up to shutdown.drainTimeoutMs; then their contexts
// are cancelled and the rows released. Stop returns when every outcome is
// written. Only a panic is a failure to a supervisor: the Claimer,
// Completer, Lease keeper and key actors hold the replica's claims in
// memory, so a panic there stops the replica (Fatal) and the leases hand its
// rows to the other replicas; a sink actor that fails to build its sink is
// restarted with backoff.
//
// # Glossary
//
//	claim        a replica's right to deliver a row until its lease ends; also the statement that takes rows
//	continuation a key whose run this replica finished: the next claim takes its next head first
//	copy         one destination's part of a fan-out row that did not end well in the row's pass: a row of the copies table
//	credit       room for rows in flight; returned as outcomes are written
//	deferral     a row put back for later without an attempt: its destination is held
//	floor        per group of keys, a sequence below which no row is pending or processing
//	gate         the rule that a keyed row is claimed only once settled
//	head         a key's first pending or processing row, or any unkeyed row
//	held         a transaction has held the database's horizon back for a while: claims behave as under a long transaction
//	horizon      the oldest snapshot still open in the database: vacuum cleans nothing newer
//	lane         one destination's view of one key: the unit of order of a fan-out
//	lease        the time limit of a claim; its trust window ends a margin before it
//	probe        a cheap read of the outbox sequence and the open transactions
//	rewind       rows went back to pending behind what the claims looked at: claims set their bounds aside
//	run          the rows of one key one claim hands to its key actor, in order
//	settled      a keyed row no earlier row of its key can still commit before
//	straggler    a due row a bounded walk passed before its transaction committed
//	unit         one destination's part of a fan-out row in the row's pass, delivered in its lane
//	wake-up      a nudge from logical replication: rows committed
//	walk         one claim's pass over an index: in schedule order, or over the keys
//
// claimplan's doc defines the words of the bounds model (anchor, lookback,
// fruitless, wide and narrow walks) where they are used.
package actors
