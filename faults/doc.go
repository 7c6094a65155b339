// Package faults is QueueBox's fault-injection suite. It holds tests only.
//
// The suite builds the real binary and runs several replicas of `queuebox
// run` against a throwaway PostgreSQL cluster of its own (so that it can
// kill and restart it), while producers insert rows over many keys in
// application transactions (several keys per transaction, in random order).
// The replicas reach the database and the HTTP destination through
// fault-injecting TCP proxies (Shopify's toxiproxy, run in-process), and
// publish to a private RabbitMQ node, an in-process Kafka (kfake) and an
// in-process NATS server with JetStream.
//
// Every delivery is written to a ledger: which row (id, key, sequence,
// attempt), when it arrived and when it was answered, which replica sent it
// (a static X-Replica header per replica), and how it ended. Faults are
// injected one after another: a replica killed with SIGKILL mid-delivery,
// stopped with SIGSTOP for longer than its lease and then continued,
// PostgreSQL killed and restarted, the replicas' database connections
// terminated from the server's side, the destination refusing, unreachable
// or slower than its timeout, latency, resets and a black hole on the
// network paths, each broker restarted, and a replica stopped with SIGTERM
// under load. After each fault the suite measures how long it took until
// every row written before the fault ended was delivered.
//
// Once the faults stop, the ledger gives the verdict: rows lost, keys out of
// order (first deliveries must follow sequence order per key, and over HTTP
// a row must never be sent for the first time while an earlier row of its
// key has not been accepted), rows not terminal after a bounded time,
// deliveries started by a replica that no longer held the row, producer
// transactions that failed, and duplicates, counted per fault that preceded
// them. The suite fails on anything but duplicates, and on duplicates where
// no fault could explain them.
//
// TestRollingRestart runs the same world with two replicas under 500 rows
// per second and restarts them one after the other, as a rolling update
// does: SIGTERM to one (it drains and exits 0), a new replica in its
// place, ready before the next one gets SIGTERM. No restart may cause a
// duplicate, and the verdict is the same.
//
// `make test` runs a reduced suite (a few thousand rows, the faults that
// cost little time); `make test-faults` runs all of it (QUEUEBOX_FAULTS=full)
// and writes the table that docs/reliability.md shows
// (QUEUEBOX_FAULTS_REPORT=FILE).
package faults
