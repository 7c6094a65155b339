// Package bootstrap turns a configuration file into a running relay: it
// reads and checks the configuration, wires the parts of the other packages
// together, and starts and stops them in order. It holds no part of the
// relay's work itself; the commands of cmd/queuebox call it.
//
// # The configuration
//
// Load reads the YAML file, substitutes ${NAME} and ${NAME:-default} from
// the environment, decodes it over the defaults and validates it, reporting
// every problem with its key path, line and what to do (Error). Validation
// also compiles what the engine needs (Compiled: the router with its topic
// patterns, jq filters and transforms and each route's destinations, the
// address templates, the signing secrets),
// so nothing is compiled twice. Every secret the configuration holds is
// registered in Secrets, which redacts them from logs, last_error and the
// configuration that `config check` prints (Loaded.Effective).
//
// A file is one outbox (a top-level database block: the outbox named
// DefaultOutbox) or several (outboxes), each with its own database block
// and, where they differ, its own outbox settings and routes
// (outboxes.go). Loaded.ForOutbox is the configuration as one outbox sees
// it: the code that runs or reads an outbox takes that view, so one outbox
// and many go through the same code.
//
// LoadForTools loads the file for the commands that only read and replay
// rows: a ${NAME} that is not set outside database.* leaves its key empty
// (Loaded.Unset) instead of failing, since an operator's shell seldom
// holds the destinations' secrets. A file that is not YAML is reported at
// the line where it stops being YAML, with the column and a hint
// (yamlerror.go).
//
// # The wiring
//
// OpenDialect opens the configured database for a relay, OpenToolDialect
// for a command that is not one (status, replay, migrate: its sessions go by
// another application name, which the relays do not count as one of
// theirs). On PostgreSQL the dialect holds two connection pools, because the
// statements want opposite plans (docs/internals.md, "Plans"): the claims
// and the probe run on sessions set to generic plans, everything else
// (completions, renewals, retention, the operator's statements) on sessions
// set to custom plans. Opening connects nothing: the pools connect on first
// use, so a relay can start while the database is still down.
//
// EngineOptions maps the configuration onto actors.Options: the dialect,
// the router, one sink factory per destination (SinkFactories; a factory
// whose settings a sink refuses is reported under the destination's key
// before anything runs), the batch, lease, poll, backoff, retention,
// mailbox and drain settings. InboxConsumers builds the inbox's broker
// sources and InboxHTTP its HTTP sources, which the admin listener serves
// at /inbox/. The admin listener (admin.go) serves package admin's handler;
// its Metrics is the engine's Observer.
//
// # The start
//
// RunOutboxes is `queuebox run` (Run, on a dialect the caller opened, for
// a file of one outbox). Each outbox runs on its own (outboxrun.go): it
// waits for its database, checks or migrates its schema, and starts its
// wake-ups and its engine, under a supervision of its own that starts it
// again after a failure when the file has several outboxes; their engines
// share the destinations (actors.SharedDestinations). For one outbox, in
// this order: the configuration's warnings are
// logged; the sinks' and the inbox sources' settings are checked; the admin
// listener starts (so that /healthz answers at once and /readyz says what
// the relay waits for; a port in use, or an address beyond loopback without
// a token, stops the start here); the database is pinged until it answers,
// with a capped, doubling backoff (internal/backoff), since a database that
// starts with the relay is common; the migrations are applied (--migrate)
// or the schema is checked to be current; the engine starts, then the
// admin sampler and the inbox's consumers.
//
// # The shutdown
//
// Run runs until its context ends. In `queuebox run` that is the first
// SIGINT or SIGTERM: StopSignals is the process's one handler of both, and
// turns them into two contexts, Stop (the first signal) and Abort (the
// second). The shutdown then goes in this order:
//
//  1. /readyz answers 503, so that the orchestrator sends no more traffic;
//  2. the inbox's consumers stop taking messages, and store and
//     acknowledge what they hold while the engine still runs;
//  3. the engine stops claiming and releases the rows it claimed but has
//     not started (back to pending at once, with no wait for the lease);
//  4. the deliveries in flight finish, for up to shutdown.drainTimeoutMs;
//     then they are cancelled and their rows released too;
//  5. every outcome is written, then the actor system shuts down and the
//     sinks close;
//  6. the admin sampler stops and the admin listener closes, last;
//  7. Run returns, and the command closes the dialect's two pools.
//
// Abort ending during the drain (the second signal) cancels steps 2 to 5
// where they are: Run returns an ExitError of code 1 once everything has
// stopped, and the rows still in flight go back to pending when their
// leases pass. Run never exits the process and leaves no goroutine of its
// own behind; cmd/queuebox turns its errors into exit codes.
//
// # The health check
//
// Healthcheck is `queuebox healthcheck`: it asks GET /readyz of the admin
// listener that the configuration names (ReadyURL: on loopback when it
// listens on every interface), with admin.token, and reports why the relay
// is not ready, always as exit code 1, since a health check's callers read
// anything but 0 as unhealthy.
//
// # Dev mode
//
// Dev is `queuebox dev`: a throwaway PostgreSQL cluster in a temporary
// folder (internal/pgcluster), an HTTP receiver on a free loopback port
// that prints every delivery, a generated configuration that routes every
// topic (#) to it with the admin listener on a free loopback port, and Run
// with the migrations applied; once the engine runs it prints a banner and
// inserts sample rows at --rate, as an application would. When its context
// ends it stops the samples, drains the relay, stops the cluster and
// removes its folder.
//
// The version and commit the build stamped are in version.go.
package bootstrap
