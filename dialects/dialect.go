package dialects

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
)

// State is the life-cycle position of an outbox row.
type State string

// The states of an outbox row, in the order of its life cycle (docs/how-it-works.md, "The life of a row").
const (
	Pending    State = "pending"
	Processing State = "processing"
	Delivered  State = "delivered"
	Dead       State = "dead"
)

// States lists every state in life-cycle order.
var States = []State{Pending, Processing, Delivered, Dead}

// Valid reports whether s is one of the four states.
func (s State) Valid() bool {
	switch s {
	case Pending, Processing, Delivered, Dead:
		return true
	}
	return false
}

// Claim identifies one claimed row: its id and the token of the claim that
// holds it. Every write that ends a claim matches both.
type Claim struct {
	ID    uuid.UUID
	Token uuid.UUID
}

// Row is an outbox row as a claim returns it.
type Row struct {
	Claim
	Topic string
	// Key is the ordering key; "" for a null or empty key (unkeyed).
	Key     string
	Payload []byte
	Headers []byte
	// AggregateType is nil when the column is null.
	AggregateType *string
	Attempt       int
	MaxAttempts   int
	Sequence      int64
	CreatedAt     time.Time
	// TypedJSON is set when Payload and Headers come from JSON-typed
	// columns (PostgreSQL's jsonb): the database has already checked that
	// they are valid JSON. On SQL Server they are text and may not be.
	TypedJSON bool
	// CopyOf is set on a row a copies claim returned (see Copies): ID is
	// the copy's, CopyOf.RowID the outbox row's.
	CopyOf *CopyOf
}

// Keyed reports whether the row takes part in per-key ordering.
func (r *Row) Keyed() bool { return r.Key != "" }

// OutcomeKind says how a claim ends.
type OutcomeKind uint8

// The ways a claim can end.
const (
	// OutcomeDelivered: the destination accepted the row.
	OutcomeDelivered OutcomeKind = iota + 1
	// OutcomeRetry: the delivery failed; attempt+1, scheduled_at = now+Delay.
	OutcomeRetry
	// OutcomeDead: the row will not be tried again; attempt unchanged.
	OutcomeDead
	// OutcomeRelease: back to pending untouched (attempt unchanged); the
	// delivery never started or was abandoned.
	OutcomeRelease
	// OutcomeDefer: back to pending, due again after Delay, attempt and
	// last_error unchanged: the destination was held (paused, its circuit
	// open, or its flow limit full), so no attempt was made.
	OutcomeDefer
)

func (k OutcomeKind) String() string {
	switch k {
	case OutcomeDelivered:
		return "delivered"
	case OutcomeRetry:
		return "retry"
	case OutcomeDead:
		return "dead"
	case OutcomeRelease:
		return "release"
	case OutcomeDefer:
		return "defer"
	}
	return "unknown"
}

// Outcome is the end of one claim, as the Completer writes it.
type Outcome struct {
	Claim
	Kind OutcomeKind
	// Delay before the next attempt (OutcomeRetry and OutcomeDefer only).
	Delay time.Duration
	// Error is written to last_error (OutcomeRetry and OutcomeDead only). It
	// must already be redacted and cut.
	Error string
	// Attempt, when set, is recorded in the attempt history by the same
	// statement that writes the outcome (OutcomeDelivered, OutcomeRetry,
	// OutcomeDead, and OutcomeDefer for a failure the circuit breaker did
	// not count: the others made no attempt). Nil records nothing: the
	// history is off, or no delivery was tried.
	Attempt *Attempt
	// Copies are the destinations of a fan-out row whose delivery did not
	// end well in the row's pass (OutcomeDelivered only): the statement
	// creates their copies in the same transaction (see Copies).
	Copies []Copy
	// Attempts are more entries for the attempt history, recorded like
	// Attempt: a fan-out row's pass tries several destinations. Each is
	// recorded with its destination's end in the pass (RecordedOutcomeOf).
	Attempts []Attempt
}

// ClaimWalk says how a claim finds heads beyond the keys it continues.
type ClaimWalk uint8

// The walks of a claim. Each considers every due row it may look at and
// takes only heads (see the package doc): the rule and what may be claimed
// are the same, only the order in which heads are found differs.
const (
	// WalkSchedule finds heads in schedule order (scheduled_at): cheapest
	// when heads are plentiful (unkeyed rows, many keys with few rows
	// each). The default.
	WalkSchedule ClaimWalk = iota
	// WalkKeys finds heads key by key, going on after ClaimParams.After and
	// wrapping around to the first key (a skip scan over the keys that
	// have pending or processing rows), then takes unkeyed rows: cheapest
	// when few keys hold many rows, and the keys take turns
	// (Claimed.Cursor).
	WalkKeys
	// WalkNone takes only the heads of the keys in ClaimParams.Continue,
	// and no unkeyed rows: no walk at all, whose cost follows every row
	// version the runs left behind.
	WalkNone
)

func (w ClaimWalk) String() string {
	switch w {
	case WalkSchedule:
		return "schedule"
	case WalkKeys:
		return "keys"
	case WalkNone:
		return "none"
	}
	return "unknown"
}

// ClaimParams are the inputs of one claim statement: what the database
// needs to claim, and nothing that a dialect would have to remember between
// claims (the key a walk by key goes on after travels in After and comes
// back in Claimed.Cursor).
type ClaimParams struct {
	// Limit is the most rows to claim.
	Limit int
	// MaxHeads bounds the heads (rows that start a key's run, and unkeyed
	// rows) of the claim; the rest of Limit goes to the rows right behind
	// each keyed head. 0 means Limit (see Heads). Fewer heads make the
	// claim's scan shorter when most keys are busy, and hand each key a
	// longer run.
	MaxHeads int
	// Lease is the lease length, added to the database clock.
	Lease time.Duration
	// Token is written to claim_token of every row of this claim.
	Token uuid.UUID
	// Gate, when set, restricts keyed rows to settled ones (see Gate); nil
	// claims every head, as a database that cannot tell must.
	Gate *Gate
	// Walk says how the claim finds heads beyond the keys in Continue.
	Walk ClaimWalk
	// After is the key after which WalkKeys goes on ("": from the first
	// key): the last claim's Claimed.Cursor. Other walks ignore it.
	After string
	// Continue lists keys whose run this replica finished: their heads are
	// taken first, in the order given, each found in one probe that starts
	// past the run while Bounds hold (from the key's first row otherwise).
	Continue []KeyPosition
	// Bounds, when set, narrow the claim's walks by what the relay knows
	// (see Bounds); nil walks from the start. A dialect whose walks do not
	// slow down under a long transaction ignores them.
	Bounds *Bounds
	// Settle, when set, makes the claim probe first (as OutboxProbe does)
	// and claim with the gate that Settle returns for that probe, in place
	// of Gate: the claim then takes every row that arrived and settled up
	// to that moment. A dialect runs the probe in the claim's own
	// transaction where it can, so that the two cost one transaction.
	// Claimed.Probe is what it read.
	Settle func(Probe) *Gate
	// Lanes: the relay has fan-out routes. The claim then also returns
	// Claimed.Blocked, read after the rows were claimed (in the claim's
	// transaction where the dialect can).
	Lanes bool
}

// Claimed is what one claim statement returned.
type Claimed struct {
	// Rows are the claimed rows, ordered by key, then sequence
	// (SortClaimed).
	Rows []Row
	// Cursor is the key after which the next WalkKeys claim goes on: the
	// greatest key whose head this claim's walk over the keys took. "" when
	// this claim learnt none (it walked no keys, or took no keyed head on
	// its walk): the caller keeps its last one.
	Cursor string
	// Walk is what the claim tells about its walk in schedule order.
	Walk ClaimReport
	// Probe is the probe the claim ran first (ClaimParams.Settle; nil
	// without).
	Probe *Probe
	// Blocked are the lanes of the claimed keyed rows' keys that have a
	// pending or processing copy (ClaimParams.Lanes; see Copies): a pass
	// delivers none of those lanes' rows directly.
	Blocked []Lane
}

// Heads returns the effective MaxHeads.
func (p ClaimParams) Heads() int {
	if p.MaxHeads <= 0 || p.MaxHeads > p.Limit {
		return p.Limit
	}
	return p.MaxHeads
}

// NewRow is a row as an application inserts it. Nil fields take the column
// default.
type NewRow struct {
	ID            *uuid.UUID
	Topic         string
	Key           *string
	Payload       []byte
	Headers       []byte
	AggregateType *string
	MaxAttempts   *int
	ScheduledAt   *time.Time
}

// Filter selects rows for replay, listing and operator commands.
type Filter struct {
	// IDs, when set, selects exactly these rows (other fields but State
	// still narrow the selection).
	IDs []uuid.UUID
	// States to select; empty means the command's default.
	States []State
	// TopicMatch, when set, keeps rows whose topic it accepts. It runs in
	// Go, so that topic patterns mean the same everywhere.
	TopicMatch func(topic string) bool
	Key        *string
	// Since and Until bound updated_at (inclusive, exclusive).
	Since, Until  *time.Time
	ErrorContains string
	// Rows, when set, selects by the whole row among the rows of the
	// topics it reads (see RowMatch). It runs in Go, after TopicMatch.
	Rows *RowMatch
}

// RowMatch selects rows by their payload and variables where their topic
// does not tell: a route filter decides which destination a row of such a
// topic goes to.
type RowMatch struct {
	// ByRow names the topics whose rows Keep decides; rows of the other
	// topics are kept as TopicMatch says.
	ByRow func(topic string) bool
	// Keep reports whether the row is selected.
	Keep func(r Row) bool
}

// ListedRow is a row as operator commands show it.
type ListedRow struct {
	ID            uuid.UUID
	Topic         string
	Key           *string
	AggregateType *string
	State         State
	Attempt       int
	MaxAttempts   int
	Sequence      int64
	CreatedAt     time.Time
	UpdatedAt     time.Time
	LastError     *string
}

// Cursor is a position in a listing, newest update first: the listing goes
// on with the rows updated before UpdatedAt (or at it, with a smaller
// sequence).
type Cursor struct {
	UpdatedAt time.Time
	Sequence  int64
}

// CursorOf returns the cursor just past r.
func CursorOf(r ListedRow) Cursor { return Cursor{UpdatedAt: r.UpdatedAt, Sequence: r.Sequence} }

// ListParams are the inputs of one page of OutboxList.
type ListParams struct {
	// Filter selects the rows; its TopicMatch is ignored by dialects (List
	// applies it above them). Empty States means dead.
	Filter Filter
	// After, when set, continues a listing past this cursor.
	After *Cursor
	// Limit is the most rows of the page.
	Limit int
}

// SelectParams are the inputs of one chunk of OutboxSelect.
type SelectParams struct {
	// Filter selects the rows; its TopicMatch is ignored by dialects. Its
	// States must be set.
	Filter Filter
	// AfterSequence continues past this sequence (keyset, oldest first).
	AfterSequence int64
	Limit         int
}

// Selected is a row that OutboxSelect found: enough to filter by topic and
// to replay it.
type Selected struct {
	ID       uuid.UUID
	Topic    string
	Sequence int64
}

// PurgeParams are the inputs of one retention delete.
type PurgeParams struct {
	State State
	// OlderThan is the age, measured from updated_at on the database clock.
	OlderThan time.Duration
	// Batch is the most rows one statement deletes.
	Batch int
}

// Stats summarises the outbox table.
type Stats struct {
	// Rows counts rows per state, the four of the life cycle (always
	// present) and any other value found in the state column: rows written
	// by hand that QueueBox never touches.
	Rows map[State]int64
	PendingSummary
	DeadByTopic map[string]int64
}

// PendingSummary describes the pending rows as operators read them.
type PendingSummary struct {
	// OldestDue is how long the oldest row that the relay could claim now
	// has waited since it became due (its scheduled_at, on the database
	// clock); zero when none is due. A row scheduled ahead counts only once
	// it is due. Only a key's head and an unkeyed row can be claimed: a due
	// row behind an earlier row of its key that is pending (due or held by
	// a retry, a pause, an open circuit) or being delivered waits for that
	// row, not for the relay, and does not count.
	OldestDue time.Duration
	// ScheduledLater counts the pending rows not due yet: waiting for a
	// retry, or scheduled ahead by the application.
	ScheduledLater int64
}

// TopicCount is how many rows of one topic are in one state.
type TopicCount struct {
	Topic string
	State State
	Rows  int64
}

// BlockedKeysParams are the inputs of OutboxBlockedKeys.
type BlockedKeysParams struct {
	// Scan bounds the work: at most this many rows scheduled later are
	// examined, the earliest due first.
	Scan int
	// Limit is the most keys returned.
	Limit int
}

// BlockedKey is a key whose head row (its first pending or processing row)
// waits for a retry: no row of the key is delivered until the head is.
type BlockedKey struct {
	Key string
	// The head row.
	ID          uuid.UUID
	Topic       string
	Attempt     int
	MaxAttempts int
	LastError   *string
	// Waiting is how long the head has existed undelivered (since its
	// created_at); NextAttemptIn how long until its retry is due. Both on
	// the database clock.
	Waiting, NextAttemptIn time.Duration
	// Behind counts the key's rows waiting behind the head, up to
	// BehindCap.
	Behind int64
}

// BehindCap bounds the count of rows behind a blocked key's head, so that a
// hot key with millions of rows costs no more than any other.
const BehindCap = 10000

// DeadGroup is the dead rows of one topic that share the start of their
// last_error (DeadErrorPrefix characters), among the newest dead rows.
type DeadGroup struct {
	Topic string
	// Error is the first DeadErrorPrefix characters of last_error ("" when
	// it is null).
	Error string
	Rows  int64
	// Newest is the latest updated_at of the group.
	Newest time.Time
	// IDs are the group's rows, newest first.
	IDs []uuid.UUID
}

// DeadErrorPrefix is how much of last_error OutboxDeadGroups groups by.
const DeadErrorPrefix = 300

// ConnectOptions are what a dialect opens its database with.
type ConnectOptions struct {
	URL            string
	Names          Names
	MaxConnections int
	// ApplicationName names the sessions (PostgreSQL's application_name,
	// SQL Server's program name) unless the URL does; default
	// RelayApplicationName. Relays know each other by it (OtherRelays), so
	// tools that are not relays take another.
	ApplicationName string
}

// RelayApplicationName is the name a relay's database sessions go by,
// unless the database URL gives another, and ToolApplicationName that of
// the command-line tools' sessions. A relay counts the sessions with its own
// name as other relays (Relay.OtherRelays).
const (
	RelayApplicationName = "queuebox"
	ToolApplicationName  = "queuebox-cli"
)

// Relay is what a relay's engine runs, on its hot path and in the
// background: claims, lease renewals, completions, releases, retention.
//
// Implementations are safe for concurrent use. Every method measures time on
// the database clock.
type Relay interface {
	// OutboxClaim claims up to p.Limit claimable rows (see the package doc)
	// in one statement, and returns them ordered by key, then sequence,
	// with where a walk by key goes on and what the walk in schedule order
	// saw.
	OutboxClaim(ctx context.Context, p ClaimParams) (Claimed, error)
	// OutboxRenewLeases extends the lease of every claim that is still held,
	// in one statement, and returns the claims that are no longer held. It
	// finds the rows by id, so that its cost is that of the claims it
	// renews, not of the rows claimed since a long transaction elsewhere
	// began.
	OutboxRenewLeases(ctx context.Context, claims []Claim, lease time.Duration) (lost []Claim, err error)
	// OutboxComplete writes many outcomes in one statement and returns the
	// outcomes whose claim was lost (nothing was written for them).
	OutboxComplete(ctx context.Context, outcomes []Outcome) (lost []Claim, err error)
	// OutboxReleaseExpired returns up to limit processing rows whose lease has
	// passed (or that have none) to pending, attempt unchanged, except rows of
	// the claims in keep: the caller still holds those and will write them.
	// A from that is not zero bounds the look: rows claimed before it are
	// not looked at (see Released). A dialect may ignore it.
	OutboxReleaseExpired(ctx context.Context, limit int, keep []uuid.UUID, from time.Time) (Released, error)
	// OutboxPurge deletes up to p.Batch rows in p.State that were last
	// updated more than p.OlderThan ago.
	OutboxPurge(ctx context.Context, p PurgeParams) (int, error)
	// OutboxPurgeWait is how long until a row in state was last updated
	// more than olderThan ago: until its oldest row is that old (0 or less:
	// one is), or olderThan when none is in the state. A row's updated_at
	// only moves forward, so a purge before then would find nothing.
	OutboxPurgeWait(ctx context.Context, state State, olderThan time.Duration) (time.Duration, error)
	// OutboxProbe reads where the outbox sequence stands, then the
	// database's running transactions: cheap enough to run every few
	// milliseconds, it is how an idle relay learns that rows arrived, and
	// what settles rows (see Gate). ErrNotPermitted when the database user
	// may not see other transactions.
	OutboxProbe(ctx context.Context) (Probe, error)
	// OutboxWriters lists the open transactions that may still commit outbox
	// rows (on PostgreSQL: those that drew outbox sequence values), oldest
	// first. They are what holds back keyed rows inserted after them.
	OutboxWriters(ctx context.Context) ([]Writer, error)
	// OutboxHorizon says what holds the database's horizon back, and how
	// many dead row versions the outbox holds.
	OutboxHorizon(ctx context.Context) (Horizon, error)
	// OutboxNextDue says how long until the earliest pending row scheduled
	// later comes due (false: none is); an idle relay claims again then.
	OutboxNextDue(ctx context.Context) (time.Duration, bool, error)
	// OutboxStragglers finds the oldest due row that a claim with gate g
	// would take but that a walk looking back only b.Lookback would not
	// see, and that became due no longer than b.Within ago (0: at any
	// time), and says how long ago it became due (false: there is none).
	// It reads every row version in that span: the relay runs it off its
	// claims' path, and rarely from the start. A dialect whose claims
	// ignore Bounds leaves no row behind a bound, and finds none.
	OutboxStragglers(ctx context.Context, g *Gate, b Bounds) (time.Duration, bool, error)
	// OutboxRewind moves the rewind counter (see Bounds): rows went back to
	// pending behind what the relays have looked at, and claims set aside
	// the bounds made before. A dialect whose claims ignore Bounds has
	// nothing to set aside, and keeps no counter.
	OutboxRewind(ctx context.Context) error
	// OutboxFloors reads the floor of every group of keys (see Bounds):
	// every pending and processing row, so it is run rarely. settled is the
	// gate's watermark: rows up to it are visible to the statement. prev
	// are the floors read before (none: Groups nil): while the counter has
	// not moved since, no live row lies below the lowest of them, and the
	// read may start there, past the versions a long transaction keeps of
	// every row delivered before it. A dialect whose claims ignore Bounds
	// returns none (Groups nil) at its counter.
	OutboxFloors(ctx context.Context, settled int64, prev Floors) (Floors, error)
	// InboxRelay turns received inbox rows into outbox rows in one
	// transaction (see the package doc, "The inbox relay"): up to p.Limit
	// rows in sequence order, keyed ones only once settled by p.Gate,
	// inserted into the outbox in that order and marked relayed. One relay
	// transaction runs at a time per inbox table; a call that finds another
	// running returns Busy at once.
	InboxRelay(ctx context.Context, p InboxRelayParams) (InboxRelayResult, error)
	// InboxProbe is OutboxProbe for the inbox sequence: it settles inbox
	// rows for InboxRelay's gate.
	InboxProbe(ctx context.Context) (Probe, error)
	// InboxWriters lists the open transactions that may still commit inbox
	// rows, oldest first (see OutboxWriters).
	InboxWriters(ctx context.Context) ([]Writer, error)
	// OtherRelays counts the sessions that other relays hold on this
	// database server: sessions with this dialect's application name that
	// are not its own. Relays that share a server run fewer statements at
	// once (see actors, "share").
	OtherRelays(ctx context.Context) (int, error)
	// Ping checks that the database answers.
	Ping(ctx context.Context) error
}

// Operator is what people who run QueueBox use, through the command line
// and the admin API: counts, listings, replay, and inserts as an application
// makes them (the dev mode, benchmarks and tests).
type Operator interface {
	// OutboxStats counts rows per state and dead rows per topic, and reads
	// OutboxPending. It counts the whole table: status runs it once, the
	// admin listener samples OutboxCountByTopic instead.
	OutboxStats(ctx context.Context) (Stats, error)
	// OutboxPending reads the oldest due pending row's wait and how many
	// rows are scheduled later, from the index the claim reads: cheap.
	OutboxPending(ctx context.Context) (PendingSummary, error)
	// OutboxCountByTopic counts the rows of every topic in every state
	// found (one pass over the table).
	OutboxCountByTopic(ctx context.Context) ([]TopicCount, error)
	// OutboxBlockedKeys lists keys whose head row waits for a retry, the
	// longest waiting first.
	OutboxBlockedKeys(ctx context.Context, p BlockedKeysParams) ([]BlockedKey, error)
	// OutboxDeadGroups groups the newest dead rows (at most newest, by
	// updated_at) by topic and the start of last_error.
	OutboxDeadGroups(ctx context.Context, newest int) ([]DeadGroup, error)
	// OutboxWriters: see Relay. Status shows them.
	OutboxWriters(ctx context.Context) ([]Writer, error)
	// OutboxList returns one page of rows matching p.Filter (all but its
	// TopicMatch), newest update first. List applies the topic pattern.
	OutboxList(ctx context.Context, p ListParams) ([]ListedRow, error)
	// OutboxSelect returns one chunk of rows matching p.Filter (all but its
	// TopicMatch), oldest first by sequence. Replay walks it.
	OutboxSelect(ctx context.Context, p SelectParams) ([]Selected, error)
	// OutboxReplayIDs puts the rows ids that are in one of states back to
	// pending (attempt 0, no error, due now); never a processing row. With
	// by set, it records the replay in the attempt history of each row it
	// put back (OutcomeReplayed), in the same transaction: by says who or
	// what replayed (cut to 255 characters); "" records nothing (the
	// history is off). It removes the copies of the rows it puts back: a
	// fan-out row's new pass delivers to every destination again.
	OutboxReplayIDs(ctx context.Context, ids []uuid.UUID, states []State, by string) (int, error)
	// OutboxRowsOf reads the rows ids (those that exist), whole: payload,
	// headers and the variables a route filter reads. The commands that
	// select rows by destination run the filters on them where a filter
	// decides (Filter.Rows).
	OutboxRowsOf(ctx context.Context, ids []uuid.UUID) ([]Row, error)
	// OutboxInsert inserts rows the way an application would, in one
	// transaction.
	OutboxInsert(ctx context.Context, rows []NewRow) error
	// InboxStats counts inbox rows per state.
	InboxStats(ctx context.Context) (InboxStats, error)
	// InboxOldestReceived is how long the received row with the smallest
	// sequence has waited (0 when none waits): one index probe, cheap
	// enough to read every few seconds.
	InboxOldestReceived(ctx context.Context) (time.Duration, error)
}

// Migrator is what the migration runner needs: the dialect's quoting, for
// rendering the migration templates, and the migration history.
type Migrator interface {
	// Name is "postgresql" or "sqlserver": the folder of its migrations.
	Name() string
	// Names are the configured table and column names.
	Names() Names
	// Quoting quotes identifiers and literals in this database's syntax.
	Quoting() Quoting
	// MigrationHistory reads the applied migrations without a lock and
	// without creating anything: nil when the history table does not exist.
	MigrationHistory(ctx context.Context) ([]AppliedMigration, error)
	// MigrationSession takes the migration lock and returns a session that
	// applies migrations under it.
	MigrationSession(ctx context.Context) (MigrationSession, error)
}

// Dialect is every statement QueueBox runs against its database, grouped by
// who runs it.
type Dialect interface {
	Relay
	Operator
	Migrator
	Inbox
	Destinations
	History
	Copies
	Close()
}

// AppliedMigration is one row of the migration history.
type AppliedMigration struct {
	Version   int
	Name      string
	Checksum  string
	AppliedAt time.Time
}

// ApplyParams are one migration, rendered and split into batches.
type ApplyParams struct {
	Version  int
	Name     string
	Checksum string
	Batches  []string
}

// MigrationSession holds the migration lock of one database: two processes
// migrating at once serialise on it.
type MigrationSession interface {
	// Applied lists the applied migrations, creating the history table (and
	// the schema) when missing.
	Applied(ctx context.Context) ([]AppliedMigration, error)
	// Apply runs the batches of one migration and records it, in one
	// transaction.
	Apply(ctx context.Context, p ApplyParams) error
	// Close releases the lock.
	Close(ctx context.Context) error
}

// ErrNoTable means the outbox table does not exist: the migrations have not
// run against this database, schema and table name.
var ErrNoTable = errors.New("the outbox table does not exist")

// ErrUnreachable means the database did not accept a connection.
var ErrUnreachable = errors.New("could not reach the database")

// ErrLoginRefused means a server answered but refused the connection: the
// user, the password or the database name is wrong, or the user may not
// connect. An error that is ErrLoginRefused is also ErrUnreachable: the
// engine waits and retries alike, and only the message differs.
var ErrLoginRefused = errors.New("the database server refused the login")

// LoginRefused wraps the server's reason for refusing a login.
func LoginRefused(reason string) error { return &loginRefused{reason} }

type loginRefused struct{ reason string }

func (e *loginRefused) Error() string { return ErrLoginRefused.Error() + ": " + e.reason }

func (e *loginRefused) Is(target error) bool {
	return target == ErrLoginRefused || target == ErrUnreachable
}

// ErrNotSupported is what a dialect returns for a statement its database
// cannot run. The dialects of this module implement every method of the
// seam; Blind treats it as ErrNotPermitted, for a dialect that cannot show
// other transactions.
var ErrNotSupported = errors.New("not supported by this database")

// ErrNotPermitted means the database user lacks a permission a statement
// needs (on SQL Server, VIEW SERVER STATE for the transaction views).
var ErrNotPermitted = errors.New("the database user is not permitted to run this statement")

// Blind reports whether err says that the database will not show this user
// other transactions (ErrNotPermitted), or cannot (ErrNotSupported): what
// the gate, the count of other relays and the long-transaction view need.
func Blind(err error) bool {
	return errors.Is(err, ErrNotPermitted) || errors.Is(err, ErrNotSupported)
}

// LostClaims returns the claims of want that are not in held.
func LostClaims(want []Claim, held map[uuid.UUID]struct{}) []Claim {
	var lost []Claim
	for _, c := range want {
		if _, ok := held[c.ID]; !ok {
			lost = append(lost, c)
		}
	}
	return lost
}
