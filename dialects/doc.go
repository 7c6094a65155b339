// Package dialects is the seam between QueueBox and its database.
//
// Every SQL statement QueueBox runs lives behind this seam, one method per
// statement, named noun-first (OutboxClaim, OutboxRenewLeases,
// OutboxComplete, ...), in six interfaces by who uses them: Relay (the
// engine's claims, renewals, completions, releases, retention, probes and
// the inbox relay), Inbox (what the inbox's sources store), Operator
// (counts, listings, replay and inserts for the command line and the admin
// API), Migrator (quoting and the migration history for the migration
// runner), Destinations (the destinations operators paused, which every
// relay reads, and the circuits relays opened) and History (one row with
// its delivery attempts for operators, and the deletion of old attempts).
// Dialect is all six, and Close. The postgres and sqlserver packages
// implement it; the dialecttest package is one conformance suite that both
// must pass. Methods with more than two arguments take a *Params struct.
//
// Each dialect keeps its statements in one embedded queries.sql, read into a
// typed catalog (a struct with one field per statement) when the dialect
// opens: a statement without a field, or a field without a statement, fails
// there. Loops that are the same on every database are written once here,
// above the dialects: Replay and List walk the selection in chunks and apply
// topic patterns in Go; the migration session runs over a small Conn that
// each dialect adapts its driver to. Native errors a user can act on are
// mapped to this package's sentinels: ErrNoTable, ErrUnreachable (and
// ErrLoginRefused, which is also ErrUnreachable), ErrNotPermitted,
// ErrNotSupported and ErrInvalidValue (a value of an inbox message that
// the database refuses to store).
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
//     their key (or have no key), in scheduled_at order, locked with
//     FOR UPDATE SKIP LOCKED (SQL Server: UPDLOCK, READPAST, ROWLOCK), so two
//     replicas never take one row.
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
// Two parameters change how the heads are found without touching the rule:
// MaxHeads (fewer heads, longer runs) and Walk (key by key instead of in
// schedule order, or no walk beyond the keys the claim continues). Gate
// restricts keyed rows to settled ones (see Watermark and the section
// below). See ClaimParams.
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
