// Package benchmarks is `queuebox bench`: named scenarios run against a real
// PostgreSQL and a destination, measured in one run and printed as one
// table (or written as JSON with --json).
//
// # Method
//
// Without --database-url the command starts a throwaway cluster with the
// server's durable defaults (fsync and synchronous commit on: commit costs
// decide both producer throughput and latency) and removes it at the end.
// Each scenario gets a schema of its own, migrated like production, and
// seeded through the same insert an application makes.
//
// Drains start the engine in this process with the default configuration
// (as `queuebox run` wires it) on a backlog that is already there, and time
// it from start to the last outcome written, so a drain's rate includes the
// engine's start and its claims of the last, short batches. The null
// destination accepts everything at once, so a drain measures QueueBox and
// its database, not a receiver. The raw scenario runs the same claim and
// completion statements in two loops with no engine around them: the
// drains' ratio_to_raw is the engine's overhead, measured in the same run.
//
// Latency inserts single rows at a steady rate from several producers and
// measures, for each row, from the producer's commit returning to the
// destination receiving the row. The producer scenario runs pgbench (which
// comes with the PostgreSQL server package) with 8 clients against a table
// made by the migrations and against the same table with what QueueBox
// installs in the application's transaction turned off, for three
// workloads, and reports the ratio. Replicas runs this binary as separate
// `queuebox run` processes. Peak RSS is the most memory the relay's process
// held during the scenario.
//
// The broker scenarios (rabbitmq, nats, kafka; brokers.go) drain the
// drain-keys backlog, with topics that take turns within each key, into a
// real broker, and measure in the same run a plain publisher of the same
// client library, the broker's own ceiling.
//
// Timings are never asserted in tests; they are measured here.
package benchmarks
