package dialects

import (
	"context"
	"errors"
)

// Scanner reads one result row (pgx.Rows and *sql.Rows both are one).
type Scanner interface {
	Scan(dest ...any) error
}

// Conn is the little of a database driver that the migration session
// needs: one connection, held for the session, that runs statements,
// queries and transactions. Each dialect adapts its driver to it, so that
// the session itself is written once.
type Conn interface {
	Exec(ctx context.Context, query string, args ...any) error
	// Query runs a query and calls each for every row.
	Query(ctx context.Context, query string, args []any, each func(Scanner) error) error
	// Tx runs fn in one transaction on this connection: committed when fn
	// returns nil, rolled back otherwise.
	Tx(ctx context.Context, fn func(Conn) error) error
	// Release gives the connection back.
	Release()
}

// HistoryStatements are a dialect's statements for the migration history
// and its lock; a dialect's catalog embeds them. MigrationLock and
// MigrationUnlock take the lock's resource name as their only parameter.
type HistoryStatements struct {
	// SchemaCreate creates the configured schema when it is missing; it
	// runs only when a schema is configured.
	SchemaCreate  string
	HistoryCreate string
	HistoryList   string
	// HistoryInsert takes version, name and checksum.
	HistoryInsert                  string
	MigrationLock, MigrationUnlock string
}

// OpenMigrationSession takes the migration lock on conn and returns the
// session; the lock's resource is named after the schema and outbox table,
// so that two outbox tables migrate independently.
func OpenMigrationSession(ctx context.Context, conn Conn, st HistoryStatements, names Names) (MigrationSession, error) {
	resource := "queuebox.migrate." + names.Schema + "." + names.Outbox
	if err := conn.Exec(ctx, st.MigrationLock, resource); err != nil {
		conn.Release()
		return nil, err
	}
	if names.Schema == "" {
		st.SchemaCreate = ""
	}
	return &migrationSession{conn: conn, st: st, resource: resource}, nil
}

type migrationSession struct {
	conn     Conn
	st       HistoryStatements
	resource string
}

func (s *migrationSession) Applied(ctx context.Context) ([]AppliedMigration, error) {
	if s.st.SchemaCreate != "" {
		if err := s.conn.Exec(ctx, s.st.SchemaCreate); err != nil {
			return nil, err
		}
	}
	if err := s.conn.Exec(ctx, s.st.HistoryCreate); err != nil {
		return nil, err
	}
	return ReadHistory(ctx, s.conn, s.st.HistoryList)
}

func (s *migrationSession) Apply(ctx context.Context, p ApplyParams) error {
	return s.conn.Tx(ctx, func(tx Conn) error {
		for _, b := range p.Batches {
			if err := tx.Exec(ctx, b); err != nil {
				return err
			}
		}
		return tx.Exec(ctx, s.st.HistoryInsert, p.Version, p.Name, p.Checksum)
	})
}

func (s *migrationSession) Close(ctx context.Context) error {
	defer s.conn.Release()
	return s.conn.Exec(ctx, s.st.MigrationUnlock, s.resource)
}

// ReadHistory runs a history query (version, name, checksum, applied_at).
func ReadHistory(ctx context.Context, conn Conn, query string) ([]AppliedMigration, error) {
	var out []AppliedMigration
	err := conn.Query(ctx, query, nil, func(r Scanner) error {
		var m AppliedMigration
		if err := r.Scan(&m.Version, &m.Name, &m.Checksum, &m.AppliedAt); err != nil {
			return err
		}
		out = append(out, m)
		return nil
	})
	if errors.Is(err, ErrNoTable) {
		return nil, nil // no history table: nothing applied
	}
	return out, err
}

// Rows is what a driver's result set offers (pgx.Rows and *sql.Rows both
// do); the caller closes it.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// EachCount calls each for every (name, count) row of rows: the shape of
// every statement that counts rows per state or per topic, on every
// dialect.
func EachCount(rows Rows, each func(name string, n int64)) error {
	return EachRow(rows, func(r Scanner) error {
		var k string
		var n int64
		if err := r.Scan(&k, &n); err != nil {
			return err
		}
		each(k, n)
		return nil
	})
}

// EachRow calls each for every row of rows.
func EachRow(rows Rows, each func(Scanner) error) error {
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Tx is a transaction seen as a Conn that can end.
type Tx interface {
	Conn
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// RunTx runs fn in tx: committed when fn returns nil, rolled back otherwise.
func RunTx(ctx context.Context, tx Tx, fn func(Conn) error) error {
	if err := fn(tx); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}
