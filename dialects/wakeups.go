package dialects

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Wake-ups: how a relay learns that rows arrived.
//
// Every dialect can be probed ("anything new?", OutboxProbe and
// InboxProbe): cheap, but an idle replica that probes often runs
// transactions around the clock, and one that probes rarely is slow to see
// the first row after a quiet spell. On PostgreSQL with logical replication,
// the server can tell the relay instead: a listener (postgres.Listener)
// receives a nudge as each transaction that inserted into the outbox or the
// inbox table commits. A nudge is only a hint to look now. Claims, the gate
// and the head rule decide what is delivered, so a nudge that is lost or
// late costs latency, never a row; the relay keeps probing, slowly while
// nudges flow and at its probe pace while they do not.

// WakeupMode is database.wakeups: which kind of wake-up a relay may use.
type WakeupMode string

const (
	// WakeupsAuto listens when the server allows it and probes otherwise.
	WakeupsAuto WakeupMode = "auto"
	// WakeupsLogical listens, and the relay does not start when the server
	// cannot provide logical replication.
	WakeupsLogical WakeupMode = "logical"
	// WakeupsProbe never listens.
	WakeupsProbe WakeupMode = "probe"
)

// WakeupModes lists the values of database.wakeups.
var WakeupModes = []WakeupMode{WakeupsAuto, WakeupsLogical, WakeupsProbe}

// WakeupState is where a wake-up source stands.
type WakeupState string

const (
	// WakeupsListening: nudges arrive as rows commit.
	WakeupsListening WakeupState = "listening"
	// WakeupsConnecting: the listener is setting up its replication
	// connection for the first time (creating its slot waits for the
	// transactions running at that moment to end).
	WakeupsConnecting WakeupState = "connecting"
	// WakeupsReconnecting: the replication connection failed or was lost,
	// and the listener tries again with a capped backoff.
	WakeupsReconnecting WakeupState = "reconnecting"
	// WakeupsUnavailable: the server cannot provide logical replication
	// now (Reason names the missing setting or grant); the listener looks
	// again every few minutes, so a grant takes effect without a restart.
	WakeupsUnavailable WakeupState = "unavailable"
	// WakeupsOff: this relay never listens (database.wakeups is probe, or
	// the database has no logical replication).
	WakeupsOff WakeupState = "off"
)

// WakeupStatus says what wakes a relay and why. It is what the start log,
// the API, the page and the metrics report.
type WakeupStatus struct {
	// Mode is the configured database.wakeups.
	Mode WakeupMode `json:"mode"`
	// State is where the source stands; only WakeupsListening brings nudges.
	State WakeupState `json:"state"`
	// Reason says why the source is not listening: the missing setting or
	// grant, or the error the connection failed with. Empty while listening.
	Reason string `json:"reason,omitempty"`
	// Slot is the temporary replication slot while this relay listens
	// with one: one relay per database and publication holds it.
	Slot string `json:"slot,omitempty"`
	// Channel is the NOTIFY channel of a relay that listens through the
	// relay holding the slot: that relay forwards what it hears.
	Channel string `json:"channel,omitempty"`
	// Pauses: while listening, pauses and resumptions of destinations
	// come as nudges too (the publication of migration V20 exists), so the
	// relay reads them rarely rather than twice a second.
	Pauses bool `json:"pauses,omitempty"`
	// Since is when State last changed.
	Since time.Time `json:"since"`
}

// Listening reports whether nudges flow: the relay may probe rarely.
func (s WakeupStatus) Listening() bool { return s.State == WakeupsListening }

// Kind is the kind of wake-up in use now, "logical" or "probe".
func (s WakeupStatus) Kind() string {
	if s.Listening() {
		return "logical"
	}
	return "probe"
}

// WakeupSlot is where the replication slot of logical wake-ups stands, in
// bytes behind the server's current WAL position: RetainedBytes for its
// restart position (the WAL the server keeps for it), BehindBytes for its
// confirmed position (what the relay has acknowledged).
type WakeupSlot struct {
	Name          string
	RetainedBytes int64
	BehindBytes   int64
}

// WakeupSlotReader is a dialect whose relays may listen with a slot
// (PostgreSQL): it reads where the slot stands; found is false while no
// relay holds one.
type WakeupSlotReader interface {
	WakeupSlot(ctx context.Context) (s WakeupSlot, found bool, err error)
}

// Wakeups is a source of nudges for the engine.
//
// Outbox and Inbox receive a value after at least one transaction that
// inserted into that table committed. Nudges are coalesced (each channel
// holds at most one), so a consumer that is busy loses none that matter: it
// looks once for everything that arrived meanwhile. Each channel has one
// consumer: the claimer takes Outbox, the inbox relay Inbox.
//
// Every change of Status also sends a nudge on both channels: on becoming
// listening, the consumer looks once for the rows that committed before
// the listener could see them; on losing the connection, it wakes, reads
// Status and returns to its probe pace.
//
// A nudge can come an instant before the transaction it announces is
// visible to other sessions: PostgreSQL flushes the commit record and wakes
// its WAL senders before it marks the transaction ended (and, with a
// synchronous standby, waits for the standby in between). The probe that
// follows sees the sequence advanced already (sequences are not
// transactional) but the writer still open; the consumer must then keep
// probing at its busy pace until the gate settles, as it does for any
// open writer, rather than take the nudge's empty claim for "nothing new".
type Wakeups interface {
	Outbox() <-chan struct{}
	Inbox() <-chan struct{}
	// Pauses receives a nudge after a destination was paused or resumed
	// (the destinations table changed), while Status().Pauses says that
	// such changes reach the listener.
	Pauses() <-chan struct{}
	Status() WakeupStatus
}

// NoWakeups is a source that never nudges: the relay probes. Reason says
// why, for the start log and the API.
func NoWakeups(mode WakeupMode, reason string) Wakeups {
	return noWakeups{WakeupStatus{Mode: mode, State: WakeupsOff, Reason: reason, Since: time.Now()}}
}

type noWakeups struct{ st WakeupStatus }

// never is a channel that nothing sends on: a receive from it waits forever,
// which is what a select over nudges and a probe clock wants.
var never = make(chan struct{})

func (n noWakeups) Outbox() <-chan struct{} { return never }
func (n noWakeups) Inbox() <-chan struct{}  { return never }
func (n noWakeups) Pauses() <-chan struct{} { return never }
func (n noWakeups) Status() WakeupStatus    { return n.st }

// Publication names the PostgreSQL publication of the outbox and inbox
// tables' inserts (migration V16), which logical wake-ups subscribe to.
// Publications are per database, not per schema, so the name carries the
// schema when one is configured: <schema>_<outbox>_wakeups, else
// <outbox>_wakeups. A name longer than PostgreSQL's 63 bytes is cut and
// given a hash of the whole, so that it stays unique.
func (n Names) Publication() string { return n.publication("wakeups") }

// PausesPublication names the publication of the changes to the
// destinations table (migration V20): the listener hears pauses and
// resumptions in it. Named as Publication is, with "pauses".
func (n Names) PausesPublication() string { return n.publication("pauses") }

func (n Names) publication(what string) string {
	name := n.Object(what)
	if n.Schema != "" {
		name = n.Schema + "_" + name
	}
	if len(name) <= MaxIdentifierLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:MaxIdentifierLength-9] + "_" + hex.EncodeToString(sum[:4])
}
