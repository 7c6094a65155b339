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
