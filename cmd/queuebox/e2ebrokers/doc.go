// Package e2ebrokers holds the end-to-end tests of the queuebox binary with
// RabbitMQ, Kafka and NATS destinations: the test process runs the brokers
// (a private RabbitMQ node; kfake as a child process, the command
// internal/testkafka/kfake; the NATS server in-process) and an independent
// consumer of each, the binary connects to them over TCP. (The bench's
// kafka scenario runs kfake inside its own process instead.)
//
// The tests live in a package of their own because they import the NATS
// server, whose first compile takes minutes.
package e2ebrokers
