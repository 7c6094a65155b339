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
//	└── Inbox relay              inboxrelay.go (inbox rows -> outbox rows)
//
// And the files the actors share:
//
//	delivery.go      one delivery path for key actors and the pool: queue, batch, Publish, outcomes
//	prepare.go       a row routed and checked before it is sent
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
// # No deadlock at any mailbox size
//
// protoactor's bounded mailbox makes a sender wait while it is full, so a
// cycle of actors sending to each other through full mailboxes would
// deadlock. Here, inside Receive, actors send only downstream along an
// acyclic graph: Claimer → {key actors, pool, Lease keeper}, Lease keeper →
// key actors and pool, key actors and pool → Completer; the Completer sends
// to no actor. Everything that flows back (claim results, delivery results,
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
//	credit       room for rows in flight; returned as outcomes are written
//	deferral     a row put back for later without an attempt: its destination is held
//	floor        per group of keys, a sequence below which no row is pending or processing
//	gate         the rule that a keyed row is claimed only once settled
//	head         a key's first pending or processing row, or any unkeyed row
//	held         a transaction has held the database's horizon back for a while: claims behave as under a long transaction
//	horizon      the oldest snapshot still open in the database: vacuum cleans nothing newer
//	lease        the time limit of a claim; its trust window ends a margin before it
//	probe        a cheap read of the outbox sequence and the open transactions
//	rewind       rows went back to pending behind what the claims looked at: claims set their bounds aside
//	run          the rows of one key one claim hands to its key actor, in order
//	settled      a keyed row no earlier row of its key can still commit before
//	straggler    a due row a bounded walk passed before its transaction committed
//	wake-up      a nudge from logical replication: rows committed
//	walk         one claim's pass over an index: in schedule order, or over the keys
//
// claimplan's doc defines the words of the bounds model (anchor, lookback,
// fruitless, wide and narrow walks) where they are used.
package actors
