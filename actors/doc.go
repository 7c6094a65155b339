// Package actors is QueueBox's engine: the actors that claim outbox rows,
// deliver them to their destinations and write their outcomes, on
// protoactor-go.
//
// # The actors, and where they live
//
//	Engine supervisor            supervisor.go
//	├── Claimer                  claimer.go (claim heuristics: claimpolicy.go)
//	│   └── Key actor (per key)  keyactor.go
//	├── Unordered pool           pool.go
//	├── Lease keeper             leasekeeper.go (a claim's lease: lease.go)
//	├── Completer                completer.go
//	├── Sink supervisor          sinksupervisor.go
//	│   └── Sink actor           sinkactor.go (the sink it builds: sinkhandle.go)
//	├── (destination watch)      destwatch.go (pauses, open circuits; a loop)
//	├── Janitor                  janitor.go
//	└── Inbox relay              inboxrelay.go (inbox rows -> outbox rows)
//
// Key actors and the pool deliver through one path, delivery.go: a queue of
// claimed rows, batches published by goroutines, and the outcomes. A row is
// routed and checked in prepare.go; its outcome (delivered, retried after a
// backoff, dead) is decided in outcome.go.
//
// Each actor is built with what it works with: the addresses of the actors
// it sends to, the dialect, the options, the logger, the counters and the
// Observer (observer.go, the hook for metrics). The supervisor spawns them
// downstream first (lease keeper, completer, pool, claimer) so that every
// address exists before it is handed down; no actor looks another up in
// shared state.
//
// # The flow of one row
//
//	Claimer ──run──▶ Key actor (one per active key) ──┐
//	   │      └─run──▶ Unordered pool               ├─finished──▶ Completer
//	   └─track──▶ Lease keeper ──cancel──▶ key actor │
//	                                                 ▼
//	                 (flush goroutine) ──credit──▶ Claimer, ──untrack──▶ Lease keeper
//
// No trigger or notification wakes the relay: the Claimer learns of new rows
// from clocks (background.go; how fast they tick, pace.go). Between claims it
// probes every probe interval (slower while idle) where the outbox sequence
// and the transaction horizon stand, and claims when rows arrived or
// settled; a slower poll, written outcomes and a wake from the Janitor or the
// Inbox relay (rows back to pending, rows relayed) also make it claim. Each
// claim probes first and is gated: keyed rows are claimed only once settled,
// when no transaction that could still commit an earlier row of their key is
// open (dialects.Watermark), so rows that producers commit out of sequence
// order are still delivered in it. A keyed row that waits long for an open
// transaction is reported (gate.go).
//
// The Claimer claims a batch no larger than its free credit (so memory is
// bounded by outbox.maxInFlight), groups it by key and sends each key's run,
// in sequence order, to that key's actor, spawning it on demand; unkeyed rows
// go to the pool. A key actor delivers its rows strictly one delivery after
// another; on a failure that is retried it stops, reschedules the failed row
// and releases every other row it holds, untouched, in the same completion
// statement. A dead row does not stop it. The pool delivers unkeyed rows
// concurrently, each on its own. Each step's outcomes go to the Completer,
// which writes them in few statements (group commit: one statement runs
// while the next batch gathers, two at most) and, from the goroutine that
// wrote them, returns the credit to the Claimer and tells the Lease keeper to
// forget the claims.
//
// # No deadlock at any mailbox size
//
// protoactor's bounded mailbox makes a sender wait while it is full, so a
// cycle of actors sending to each other through full mailboxes would
// deadlock. Here, inside Receive, actors send only downstream along an
// acyclic graph: Claimer → {key actors, pool, Lease keeper}, Lease keeper →
// key actors and pool, key actors and pool → Completer; the Completer sends
// to no actor. Everything that flows back
// (claim results, delivery results, credit, renewal results, "I am idle",
// ticks, wake-ups) is sent by a goroutine that owns the I/O or the clock,
// never by an actor. The Completer therefore always makes progress, then the
// key actors and pool, then the Lease keeper, then the Claimer. Mailbox
// sizes (engine.mailbox.*) only tune throughput; a size of 1 is served as 2,
// because the ring buffer behind protoactor's bounded mailbox loses messages
// at capacity 1 (see mailbox in mailbox.go). Engine.MailboxLength reads how
// full the mailboxes of each kind of actor are.
//
// # Holding a destination's rows
//
// Before a delivery starts, its destination's handle decides whether it may
// (destctl.Handle.admit): not while an operator has paused the destination
// (read from the database by the destination watch, destwatch.go), nor
// while its circuit is open (circuit.go: every attempt failed for a window;
// one probe per interval goes out), nor while its flow control has as many
// rows waiting as it lets wait (flow.go: a token bucket and a semaphore,
// shared by every key actor and the pool). A delivery that may not start
// is deferred: its row goes back to pending with scheduled_at moved on and
// its attempt unchanged (dialects.OutcomeDefer); a key's rows behind it go
// back untouched. A delivery that may start waits for its permits in its
// publish goroutine, never in an actor, and looks again before it
// publishes.
//
// # Leases and trust
//
// Each claim statement has one token and one lease; the lease's trust window
// ends trustMargin before the database's lease would, measured from when the
// claim (or the last successful renewal) was sent. A delivery starts only
// inside the window; outside it, the row is released instead (the write
// matches the token, so it changes nothing if the row is no longer ours). The
// Lease keeper renews every in-flight claim in one statement every
// claimTimeout/3; a claim the database no longer holds is reported to the
// actor holding it, which cancels that delivery and abandons the row: nothing
// is written for it. The Janitor returns rows whose lease has passed to
// pending (attempt unchanged), and deletes old rows in small batches.
//
// # Shutdown
//
// Stop sends drain to the Claimer, which stops claiming and tells every key
// actor and the pool to release the rows they have not started. In-flight
// deliveries finish for up to shutdown.drainTimeoutMs; then their contexts
// are cancelled and the rows released. Stop returns when every outcome is
// written (the credit is full again).
//
// # Crashes
//
// Only a panic is a failure to a supervisor. The Claimer, Completer, Lease
// keeper and key actors hold the replica's claims in memory; restarting them
// would forget claims, so a panic there is a bug that stops the replica
// (Fatal), and the leases hand its rows to the other replicas. A sink actor
// that fails to build its sink is restarted with backoff; deliveries to it
// fail meanwhile and are retried by the usual rules.
package actors
