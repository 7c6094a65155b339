// Package inbox will hold the receiving side (spec/inbox.md): HTTP and broker
// sources that store incoming messages once, de-duplicated by (source,
// message_id), and the relay that turns inbox rows into outbox rows.
//
// The inbox table itself already exists: migrations V5 and V6 create it, and
// the configuration keys under inbox: are read and validated. Its behaviour
// arrives in a later release.
package inbox
