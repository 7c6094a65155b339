// Package inbox is QueueBox's receiving side: the sources that store
// messages coming into the system in the inbox table, once per source and
// message id, so that a sender that retries causes no second delivery.
//
// A source is HTTP (HTTP, a handler that the admin listener serves at
// POST /inbox/{source}) or a broker consumer (the rabbitmq, kafka and nats
// subpackages). Every source turns what it received into a
// dialects.InboxMessage the same way (Mapping: the message id, the JSON
// body, the stored headers, and the topic, aggregate type and aggregate id
// from templates over the headers), refuses what can never be stored with a
// *Rejection, and stores through dialects.Inbox. The inbox relay (package
// actors) then turns inbox rows into outbox rows, in receive order per
// aggregate id.
//
// # Once, and nothing lost
//
// HTTP answers only after the row is committed: 202 with the inbox id on
// the first receipt, 200 with the same id on a repeat (which stores
// nothing). A sender that got no answer sends again and is answered 200.
//
// Broker consumers store first and acknowledge the broker only once the
// insert committed; a duplicate counts as committed and is acknowledged. A
// consumer that dies between the two leaves the message unacknowledged: the
// broker delivers it again, and the repeat is a duplicate. A message that
// can never be stored (not JSON, a template's header missing) is refused
// to the broker (RabbitMQ: rejected without requeue, so that a dead-letter
// exchange gets it; NATS: terminated; Kafka: skipped by committing past it)
// and logged, since retrying it would stop the queue behind it for ever.
//
// Outcomes are counted through an Observer (stored, duplicate, rejected per
// source), for the metrics.
package inbox
