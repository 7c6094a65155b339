package postgres

import (
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// destinationTables are the destinations' state (dialects.DestinationTables)
// on the pool of custom plans: a list of names is a text[], a count of
// milliseconds a bigint.
func (d *Dialect) destinationTables() dialects.DestinationTables {
	return dialects.DestinationTables{Conn: poolConn(d.pool), Statements: &d.q.DestinationStatements,
		List:   func(names []string) any { return names },
		Millis: func(t time.Duration) any { return ms(t) }}
}
