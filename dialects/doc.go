// Package dialects is the seam between QueueBox and its database.
//
// Every SQL statement the engine runs lives behind the Dialect interface, one
// method per statement, named noun-first (OutboxClaim, OutboxRenewLeases,
// OutboxComplete, ...). The postgres and sqlserver packages implement it; the
// dialecttest package is one conformance suite that both must pass.
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
// A claim is one statement. It locks up to Limit claimable rows with
// FOR UPDATE SKIP LOCKED (SQL Server: UPDLOCK, READPAST, ROWLOCK), so that two
// replicas never hold one row, and stamps them with the claim's token and a
// lease measured on the database clock. A keyed row is claimable only when it
// is the head of its key: no row of the same key with a smaller sequence is
// pending or processing, except rows that the very same claim has locked. The
// claim therefore runs in two steps inside the statement:
//
//  1. candidates: pending, due rows whose key has no earlier row that is
//     processing or waiting for a retry; locked with SKIP LOCKED, LIMIT n.
//  2. eligible: the candidates whose every earlier pending/processing row of
//     the key is itself among the locked candidates.
//
// Step 2 is what makes several consecutive head rows of one key claimable at
// once while staying safe against a concurrent claimer that locked (and so made
// us skip) an earlier row of the same key. Locked but not eligible rows are
// simply not updated; their lock ends with the statement.
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
