// Package dialects is the seam between QueueBox and its database.
//
// Every SQL statement QueueBox runs lives behind this seam, one method per
// statement, named noun-first (OutboxClaim, OutboxRenewLeases,
// OutboxComplete, ...), in three interfaces by who uses them: Engine (the
// relay's claims, renewals, completions, releases and retention), Operator
// (counts, listings, replay and inserts for the command line and the admin
// API) and Migrator (quoting and the migration history for the migration
// runner). Dialect is all three. The postgres and sqlserver packages
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
// mapped to ErrNoTable and ErrUnreachable.
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
// Two parameters narrow the candidates without touching the rule: MaxHeads
// (fewer heads, longer runs) and Window (only the earliest due rows). See
// ClaimParams.
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
package dialects
