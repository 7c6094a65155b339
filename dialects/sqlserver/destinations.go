package sqlserver

import (
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// destinationTables are the destinations' state (dialects.DestinationTables)
// on the pool: a list of names travels as one JSON parameter, a count of
// milliseconds as an INT (DATEADD refuses a BIGINT).
func (d *Dialect) destinationTables() dialects.DestinationTables {
	return dialects.DestinationTables{Conn: conn{e: d.db}, Statements: &d.q.DestinationStatements,
		List:   func(names []string) any { return jsonArg(names) },
		Millis: func(t time.Duration) any { return dateaddArg(t.Milliseconds()) }}
}
