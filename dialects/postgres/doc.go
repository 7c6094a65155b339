// Package postgres is the PostgreSQL dialect, on pgx.
//
// # Statements
//
// Every statement is in queries.sql (wakeups.sql holds the replication
// listener's one), rendered once for the configured names into a typed
// Catalog when the dialect opens. Pieces that statements share are
// "-- fragment:" sections.
//
// A statement with more than a few parameters names them (@limit,
// @continue_keys) and is a dialects.Named in the Catalog, bound from a
// struct whose fields carry the same names (args.go); statements that share
// a fragment (the gate, the operator filter, the completion's update) embed
// the fragment's struct. The catalog renders the names as $1, $2, ... once,
// when it loads, and refuses to load when a name is missing on either
// side: pgx binds by position, and its own named arguments would scan the
// text of every claim again on every call. The claims' bounds fragment
// takes its parameters as its dot, so that the look for stragglers can
// give it NULLs for the positions. Statements with few parameters number
// them ($1).
//
// # Two pools, two kinds of plan
//
// The statements want opposite plans, so the dialect keeps two connection
// pools over one configuration:
//
//   - the claim pool (a third of the connections, at most three) runs the
//     claims, the probes, the floors and the look for stragglers with
//     generic plans (plan_cache_mode = force_generic_plan), planned once
//     per connection. A custom plan costs more to make than a small claim
//     takes to run, and, seeing the real LIMIT and a large pending count,
//     picks a sequential scan and a sort over the index walk that stops
//     early. Those sessions also rule out every plan shape a claim never
//     wants (sequential and bitmap scans, sorts, hash and merge joins):
//     a session that planned on an empty table (a new deployment) would
//     otherwise keep a plan made for one once a backlog builds.
//   - the main pool runs everything else with custom plans
//     (force_custom_plan): a generic plan cannot see how many ids an array
//     holds, and the statistics of the small, transient set of processing
//     rows are always stale.
//
// JIT is off on both: a hot key's estimates make PostgreSQL compile a claim
// that stops after a few rows. A setting given in the database URL wins
// over all of these.
//
// The claims' plans are checked by tests on large tables
// (TestClaimPlanUsesIndexes, TestAClaimPlannedOnAnEmptyTableStaysOnItsIndexes)
// and written down in docs/internals.md, with the measurements behind
// these choices in docs/decisions.md.
//
// # Claims commit asynchronously
//
// The claim sessions run with synchronous_commit = off: a claim returns
// without waiting for its WAL to be flushed, which saved a flush per claim
// (claims took half as long at 1,000 rows a second on a durable cluster).
// A claim is the one write whose loss costs nothing but a duplicate: if
// the server crashes before the claim's WAL reached the disk, its rows are
// pending again after recovery, the relay's outcomes for them are refused
// as lost claims, and the rows are delivered again, in key order (a row
// behind them in its key waits for them, as after an expired lease). Any
// later synchronous commit on the server, such as the completion of the
// claim's rows, flushes the claim's WAL with its own. Completions, lease
// renewals, releases and every operator statement run on the main pool
// and commit synchronously. A synchronous_commit in the database URL wins
// here too; one set with ALTER ROLE or ALTER DATABASE does not.
//
// # Wake-ups: one stream per database
//
// Wakeups returns a Listener per outbox (dialects.Wakeups), but the
// listeners do not stream alone: a WAL sender decodes all the WAL of its
// database whatever it publishes, so one stream serves every outbox of a
// database, in every relay on it (wakeshare.go has the design, wakehub.go
// the hubs, wakestream.go the stream):
//
//   - In a process, the listeners of one server, database and role join
//     one hub, from a process-wide registry; the last to leave stops it.
//   - The hubs of a database, in all processes, take turns on one advisory
//     lock named for the database's wake-ups. The holder streams from one
//     temporary slot the publications of its outboxes and of those that the
//     others announce, so relays with different outboxes share it; when
//     an outbox comes or goes it moves the stream to a new slot, made
//     before the old one is dropped, and it tells the others what it
//     covers with a shared advisory lock per publication. The others hear
//     it through NOTIFY, per outbox.
//   - Each outbox's status is its own: listening only while the stream
//     covers it; probing, with the reason, while its publication is
//     missing, the server has no room for the slot, or the holder does
//     not cover it yet. A nudge is a hint: one missed costs the relay's
//     safety-net probe, never a row.
//
// So relays need one replication slot and one WAL sender per database,
// whatever the number of outboxes and replicas; WakeupSlot reports that
// slot for every outbox of the database.
//
// # Sessions
//
// Both pools name their sessions with the relay's application name; the
// dialect keeps the process ids of its own sessions (and of its wake-up
// hub's lock connection and walsender), so that OtherRelays counts only
// other relays.
package postgres
