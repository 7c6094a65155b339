package dialects

import (
	"cmp"
	"slices"
	"time"
)

// KeyPosition is where a key stands for the replica that finished a run of
// it: every row of Key with a sequence up to After is delivered or dead.
// Rows stay that way, but for a replay (see Bounds.Rewinds).
type KeyPosition struct {
	Key   string
	After int64
}

// Bounds are what the relay knows that lets a claim start its index walks
// past the row versions it left behind. While a transaction elsewhere in the
// database stays open, vacuum can remove none of them, and an index scan can
// no longer skip them cheaply: a claim that walked from the oldest entry
// would walk every version since that transaction began. A bound only ever
// leaves rows out of one claim's view, never lets a row be claimed out of
// order: rows it leaves out are found by a later claim without it (the
// relay's periodic look for stragglers, OutboxStragglers), except Floors,
// which must be exact.
//
// Bounds are the one input of a claim that a dialect may read for its
// engine alone. PostgreSQL honours them: its dead row versions stay in the
// table and its indexes until no snapshot needs them. SQL Server ignores
// them (and the from of OutboxReleaseExpired): without row versioning its
// deleted and updated rows leave ghost records that its ghost cleanup
// removes soon after the commit, whatever else runs; under read committed
// snapshot or snapshot isolation those records wait for the oldest
// snapshot, as PostgreSQL's versions do, and its claims walk them. A
// dialect that ignores Bounds leaves no row behind one: its look for
// stragglers finds none, it reads no floors and it keeps no rewind counter.
//
// A caller never changes Floors or Positions once it has handed them to a
// claim: a dialect may keep what it made of them for the next claim that
// carries the same slices (the PostgreSQL dialect keeps their text form).
type Bounds struct {
	// Rewinds is the rewind counter (Probe.Rewinds, Floors.Rewinds) that
	// the bounds were made at. A replay, a lease that expired, or the
	// release of a stopping replica's rows may put a row back below any of
	// them, and each moves the counter in the same transaction: a claim
	// that finds it moved in its own snapshot ignores them.
	Rewinds int64
	// Lookback is how long ago the oldest due row that the walk in schedule
	// order looks at became due; 0 looks from the start.
	Lookback time.Duration
	// Floors, indexed by a hash of the key (FloorGroups of them), is a
	// sequence per group of keys below which no row of those keys is
	// pending or processing (OutboxFloors); nil when not known.
	Floors []int64
	// Positions, in key order (bytewise), are keys' positions, which bound
	// the head rule's probe of a row of their key as a floor does, only
	// closer (see KeyPosition). A dialect may ignore them.
	Positions []KeyPosition
	// Within, for a look for stragglers only, is how long before the look
	// the oldest row it looks at became due: 0 looks from the start.
	Within time.Duration
}

// FloorGroups is how many groups of keys Bounds.Floors has: more groups
// make a key whose head waits for a retry hold back fewer other keys' floors.
const FloorGroups = 1024

// Floors are the floors of the groups of keys, and the rewind counter they
// hold for (see Bounds).
type Floors struct {
	Rewinds int64
	Groups  []int64
}

// Lowest is the lowest floor of every group, and whether there is one:
// while the counter stays at f.Rewinds, no pending or processing row of any
// key has a smaller sequence (a floor only rises).
func (f Floors) Lowest() (int64, bool) {
	if len(f.Groups) == 0 {
		return 0, false
	}
	return slices.Min(f.Groups), true
}

// ClaimReport is what a claim tells about its walk in schedule order.
type ClaimReport struct {
	// Cut is true when the walk stopped at its limit of heads: rows due
	// after Reach (on the database clock) were not looked at.
	Cut   bool
	Reach time.Time
	// Now is the claim's time on the database clock, which is its rows'
	// claimed_at.
	Now time.Time
	// Earliest is when the earliest row the walk took became due (its
	// scheduled_at; zero: the walk took none).
	Earliest time.Time
	// Empty is true when the claim took no row, so that the statement
	// returned no time either (the rest is zero): its walk looked at every
	// due row it may look at and found no head. A dialect that ignores
	// Bounds leaves the report zero: no walk of its leaves a row behind.
	Empty bool
}

// SortClaimed orders claimed rows by key, then sequence, so that the rows of
// one key form one run in sequence order.
func SortClaimed(rows []Row) {
	slices.SortFunc(rows, func(a, b Row) int {
		if c := cmp.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return cmp.Compare(a.Sequence, b.Sequence)
	})
}

// Released is what a look for expired leases did, and what it saw that
// lets the next look start later than the oldest entry of the processing
// index: a long transaction elsewhere keeps there the entry of every row
// claimed since it began, and a look from the start reads them all.
type Released struct {
	// Rows is how many rows went back to pending.
	Rows int
	// Oldest is when the oldest row that was processing, from the look's
	// from on, was claimed (zero: none was, or the dialect does not say),
	// and At the database's clock at the look.
	Oldest, At time.Time
}
