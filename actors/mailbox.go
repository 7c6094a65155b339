package actors

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// ActorKind names a kind of engine actor, for the lengths of their
// mailboxes.
type ActorKind uint8

// The kinds of actors whose mailboxes are measured.
const (
	KindClaimer ActorKind = iota
	KindKey
	KindPool
	KindCompleter
	KindLeaseKeeper
	KindSink
	actorKinds
)

// ActorKinds lists every kind.
func ActorKinds() []ActorKind {
	return []ActorKind{KindClaimer, KindKey, KindPool, KindCompleter, KindLeaseKeeper, KindSink}
}

func (k ActorKind) String() string {
	switch k {
	case KindClaimer:
		return "claimer"
	case KindKey:
		return "key"
	case KindPool:
		return "pool"
	case KindCompleter:
		return "completer"
	case KindLeaseKeeper:
		return "lease_keeper"
	case KindSink:
		return "sink"
	}
	return "unknown"
}

// mailboxLength counts the messages posted to the mailboxes of one kind and
// not yet handled (a message counts while its actor handles it). It is a
// protoactor mailbox middleware shared by every mailbox of the kind: one
// counter for all key actors, however many come and go. protoactor's own
// metrics (WithMetricProviders) would keep instruments per spawned actor,
// which one actor per key cannot afford. A mailbox whose actor stopped still
// runs through what was posted to it, so the count comes back to zero.
type mailboxLength struct{ n atomic.Int64 }

type mailboxLengths [actorKinds]mailboxLength

func (m *mailboxLength) MailboxStarted() {}
func (m *mailboxLength) MailboxEmpty()   {}

func (m *mailboxLength) MessagePosted(msg any) {
	if _, system := msg.(actor.SystemMessage); !system {
		m.n.Add(1)
	}
}

func (m *mailboxLength) MessageReceived(msg any) {
	if _, system := msg.(actor.SystemMessage); !system {
		m.n.Add(-1)
	}
}

// mailbox returns a bounded mailbox of size (0: unbounded) that counts its
// messages into length. A size of 1 is served as 2: protoactor's bounded
// mailbox sits on a Workiva ring buffer whose "full" test cannot work at
// capacity 1 (a second Put overwrites the unread message and the reader then
// spins forever). Sizes are rounded up to a power of two by the ring buffer
// anyway.
func mailbox(size int, length *mailboxLength) actor.MailboxProducer {
	if size <= 0 {
		return actor.Unbounded(length)
	}
	return actor.Bounded(max(size, 2), length)
}
