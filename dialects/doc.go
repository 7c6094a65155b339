// Package dialects is the seam between QueueBox and its database.
//
// Every SQL statement QueueBox runs lives behind this seam, one method per
// statement, named noun-first (OutboxClaim, OutboxRenewLeases,
// OutboxComplete, ...), in seven interfaces by who uses them: Relay (the
// engine's claims, renewals, completions, releases, retention, probes and
// the inbox relay), Inbox (what the inbox's sources store), Operator
// (counts, listings, replay and inserts for the command line and the admin
// API), Migrator (quoting and the migration history for the migration
// runner), Destinations (the destinations operators paused, which every
// relay reads, and the circuits relays opened), History (one row with its
// delivery attempts for operators, and the deletion of old attempts) and
// Copies (the copies of fan-out routes: their claim path and what
// operators do with them). Dialect is all seven, and Close. The postgres and sqlserver packages
// implement it, every method of it; the dialecttest package is one
// conformance suite that both must pass, the same cases for each. Methods
// with more than two arguments take a *Params struct.
//
// The seam carries what a database needs to run a statement, and a dialect
// keeps no state between calls that the seam does not name: what one claim
// learns for the next (where a walk by key goes on) comes back in its
// result and travels in the next one's parameters. The one exception is
// named by Bounds: a dialect may keep what it made of the bounds' slices
// for the next claim that carries the same ones.
//
// Each dialect keeps its statements in one embedded queries.sql, read into a
// typed catalog (a struct with one field per statement) when the dialect
// opens: a statement without a field, or a field without a statement, fails
// there. A statement binds at most a few parameters by position ($1, @p1);
// one with more names them (@limit), and its catalog field is a Named,
// bound from a struct whose fields carry the same names: a name missing on
// either side fails when the catalog loads too, and each dialect binds them
// as its driver wants (Binding). Loops that are the same on every database
// are written once here, above the dialects: Replay and List walk the
// selection in chunks and apply topic patterns in Go; the migration session
// runs over a small Conn that each dialect adapts its driver to. Native
// errors a user can act on are mapped to this package's sentinels:
// ErrNoTable, ErrUnreachable (and ErrLoginRefused, which is also
// ErrUnreachable), ErrNotPermitted and ErrInvalidValue (a value of an inbox
// message that the database refuses to store).
//
// # Names
//
// Table and column names come from the configuration (database.outboxTableName,
// database.columnMapping). They are validated once by Names.Validate and quoted
// once when a dialect renders its statements at construction; after that no
// statement is ever built from strings, and row values always travel as bind
// parameters.
//
// # Claims, leases and ordering
//
// A claim is one statement. It stamps up to Limit claimable rows with the
// claim's token and a lease measured on the database clock. A keyed row is
// claimable only while it is the head of its key: no row of the same key with
// a smaller sequence is pending or processing. The statement has two steps:
//
//  1. heads: due pending rows that are the first pending/processing row of
//     their key (or have no key), locked with FOR UPDATE SKIP LOCKED (SQL
//     Server: UPDLOCK, READPAST, ROWLOCK), so two replicas never take one
//     row. The heads of the keys the claim continues (Continue) come first,
//     then those its walk finds (Walk): in scheduled_at order, key by key
//     after a cursor, or none.
//  2. followers: for each keyed head, the pending rows right behind it in
//     sequence order, up to the first row that is processing or waiting for
//     a retry, at most (Limit - heads) / heads of them per key.
//
// Step 2 is safe without locks of its own: a row behind a head is never a
// head for any other claimer while the head is pending or processing, and we
// hold the head. Ordering candidates by heads first matters: a retried head
// sorts after its own released followers by scheduled_at, and a claim that
// considered followers as candidates could fill its limit with rows that it
// may not take, forever.
//
// Parameters change how the heads are found without touching the rule:
// MaxHeads (fewer heads, longer runs), Walk (key by key instead of in
// schedule order, or no walk beyond the keys the claim continues; a walk
// by key goes on after After, the Cursor of the claim before), Continue
// (keys whose runs this replica finished, each found in one probe) and
// Bounds (how far the walks need look, while a long transaction keeps
// every row version: PostgreSQL honours them, SQL Server ignores them, and
// a claim never takes a row out of order either way). Gate restricts keyed
// rows to settled ones (see Watermark and the section below). See
// ClaimParams and Claimed.
//
// Every write that ends a claim (OutboxComplete) matches id, claim token and
// state 'processing'. An outcome that matches nothing is returned as lost: the
// lease passed and the row was released or taken by another replica.
//
// Lease renewal works by claim token: one token per claim statement, so one
// renewal statement touches every row of many claims with a handful of
// parameters.
//
// "Now" is always the database's clock.
//
// # Bounds
//
// While a transaction elsewhere stays open, PostgreSQL keeps every row
// version claims and completions leave behind, and a walk from the start of
// an index reads them all. The relay therefore hands each claim Bounds: how
// far back its walk in schedule order looks, the floors of the groups of
// keys (OutboxFloors) and the keys' positions. A bound only leaves rows out
// of one claim; a look for those (OutboxStragglers) finds them for a later
// claim without it, and every rewind (a replay, a release of expired
// leases, OutboxRewind after a stopping replica's release) moves a counter
// that makes claims set older bounds aside. SQL Server's claims ignore the
// bounds (see the sqlserver package): it finds no straggler, reads no
// floors (Groups nil), keeps no counter (Probe.Rewinds 0, OutboxRewind
// does nothing) and leaves the claim's report zero. The conformance suite
// checks both ways with the same cases: whatever a bounded claim leaves
// out, a claim without bounds takes or the look for stragglers finds.
//
// # Fan-out: copies
//
// A fan-out row is delivered to each of its route's destinations in its
// own pass; a destination whose delivery did not end well there gets a
// copy, a row of the table <outbox>_copies (see Copies for the rules).
// Three things keep that cheap and in order:
//
//  1. The statement that completes the row writes its copies
//     (OutcomeDelivered with Outcome.Copies), in the same transaction, by
//     INSERT ... SELECT from the outbox row: the payload never travels
//     back. A copy of the same row and destination is replaced (a
//     replayed row's new pass). Outcomes without copies or more attempts
//     run the statement they run without fan-out routes (FanOut).
//  2. A copy's claim takes a lane's head only: no earlier copy of its
//     destination and key pending or processing, and no earlier outbox row
//     of its key pending or processing, whose pass may still write an
//     earlier copy. Followers come behind heads as in the outbox's claim,
//     and stop before the key's next live outbox row. The outbox's claim,
//     with ClaimParams.Lanes, reports the lanes of its keys that have a
//     live copy (Claimed.Blocked), read by a skip scan of the copies' lane
//     index (on PostgreSQL in the claim's transaction); the relay turns
//     the row's delivery to such a lane into a copy behind the others.
//  3. Every write that makes a copy pending draws a value of a sequence of
//     its own (copy_change), and CopyProbe reads it with when the next
//     copy scheduled later comes due: a relay with nothing to deliver
//     learns that copies arrived without reading the table.
//
// A copy's attempts and replays go to the attempt history under the
// outbox row's id, with the copy's destination: OutboxRow shows them with
// the row's, and a copy's replay, which names its destination, sets the
// row back in nothing.
//
// # The inbox relay
//
// Sources store received messages with InboxReceive: one row per (source,
// message_id), a repeat stores nothing and names the first copy's row. The
// relay (InboxRelay) turns received rows into outbox rows with the same id,
// key = aggregate_id, and marks them relayed, in one transaction. Three
// rules make it safe with any number of replicas and concurrent sources:
//
//  1. One relay transaction at a time per inbox table: each takes a
//     transaction-scoped lock first (pg_try_advisory_xact_lock,
//     sp_getapplock owned by the transaction) without waiting; a relay that
//     finds it taken does nothing this time (Busy). The lock is a statement
//     of its own, so the relay statement's snapshot sees every row the
//     previous holder marked relayed. SKIP LOCKED would let two replicas
//     relay adjacent batches at once, and the later batch could draw its
//     outbox sequence values first, breaking receive order per aggregate.
//  2. Settled rows only: inbox rows are inserted by concurrent transactions
//     that can commit out of sequence order, like outbox rows. Keyed rows (a
//     non-empty aggregate_id) are relayed only up to the watermark of
//     InboxProbe (the Gate, exactly as for the claim; the inbox has its own
//     xid_first trigger); unkeyed rows go at once. In sequence order, a
//     settled keyed row's earlier rows of its aggregate are all visible, so
//     they are relayed in the same batch or before it.
//  3. One statement inserts a batch's outbox rows ordered by inbox
//     sequence, so their outbox sequence follows receive order; the
//     outbox's own gate then orders the claim, as for any producer. An
//     outbox row that already has the id is left alone (ON CONFLICT DO
//     NOTHING; NOT EXISTS under UPDLOCK, HOLDLOCK on SQL Server), so a relay
//     never fails on a row.
package dialects
