package dialects

import "time"

// Writer is an open transaction that may still commit outbox rows.
type Writer struct {
	// PID is the server process (PostgreSQL) or session (SQL Server); 0 for
	// a prepared transaction.
	PID int64
	// Xid is its transaction id, 64-bit.
	Xid int64
	// Since is when the transaction began (zero when the user may not see it).
	Since       time.Time
	State       string
	Application string
	// Query is the start of its last statement, when the user may see it.
	Query string
}

// Horizon is what holds back the database's horizon (the oldest snapshot
// that vacuum must keep row versions for), and what that costs the outbox:
// while any transaction stays open, no version the relay leaves behind can
// be removed.
type Horizon struct {
	// Holder is the oldest holder; nil when none could be seen (nothing
	// open, or the user may not see other sessions' snapshots).
	Holder *HorizonHolder
	// DeadVersions is how many dead row versions the outbox table holds,
	// from the server's statistics (a few seconds behind); -1 when the
	// database does not say.
	DeadVersions int64
	// ReadAt is when it was read (zero: not known).
	ReadAt time.Time
}

// HeldAtRead says whether, when it was read, a holder whose start is known
// had held the horizon back for d or longer. Unlike HeldFor it does not
// assume that the holder is still open: a look that caught a transaction
// one second old says nothing of whether it is open four seconds later.
func (h *Horizon) HeldAtRead(d time.Duration) bool {
	return h != nil && h.Holder != nil && !h.Holder.Since.IsZero() && !h.ReadAt.IsZero() && h.ReadAt.Sub(h.Holder.Since) >= d
}

// HeldFor says whether a holder whose start is known has held the horizon
// back for d or longer.
func (h *Horizon) HeldFor(d time.Duration) bool {
	return h != nil && h.Holder != nil && !h.Holder.Since.IsZero() && time.Since(h.Holder.Since) >= d
}

// HorizonHolder is a transaction, prepared transaction, standby or
// replication slot that holds the horizon back.
type HorizonHolder struct {
	// Kind is "transaction", "standby" (a replica's feedback), "prepared
	// transaction" or "replication slot".
	Kind string
	// PID is the server process (0 for a slot or a prepared transaction).
	PID int64
	// Since is when its transaction began (zero when not known); Name is
	// its application name, the slot's name or the prepared transaction's.
	Since, QueryStart  time.Time
	State, Name, Query string
	// Transactions is how many transaction ids the server has handed out
	// since its snapshot was taken.
	Transactions int64
}
