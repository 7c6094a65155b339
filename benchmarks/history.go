package benchmarks

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/bootstrap"
)

// historyRuns are the drains of the history scenario, in order: off, on,
// on, off, so that a server that slows as the run goes on weighs on both
// alike.
var historyRuns = []bool{false, true, true, false}

// runHistory drains over 1,000 keys to the null destination with the
// attempt history off and on (historyRuns): the null destination answers
// at once, so what the history costs the database is all that differs.
// The lines with it on carry their rate against the mean of those with it
// off (Ratio), and how many attempts they recorded.
func runHistory(ctx context.Context, e *env) ([]Result, error) {
	var out []Result
	var off []float64
	for i, on := range historyRuns {
		d, h, err := e.fresh(ctx, "history")
		if err != nil {
			return nil, err
		}
		if err := e.seed(ctx, d, h, e.o.Rows, 1000); err != nil {
			return nil, err
		}
		r, err := e.drainSeeded(ctx, d, "history", e.o.Rows, 1000, func(c *bootstrap.Config) {
			c.Outbox.History.Enabled = on
		})
		if err != nil {
			return nil, err
		}
		var recorded int64
		table := pgx.Identifier{d.Names().Schema, d.Names().Object("attempts")}.Sanitize()
		if err := d.Pool().QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&recorded); err != nil {
			return nil, err
		}
		r.Variant = fmt.Sprintf("history off (%d)", i/2+1)
		if on {
			r.Variant = fmt.Sprintf("history on (%d)", i)
		} else {
			off = append(off, r.RowsPerSec)
		}
		r.Note = fmt.Sprintf("%d attempts recorded; ", recorded) + r.Note
		out = append(out, r)
	}
	mean := (off[0] + off[1]) / 2
	for i, on := range historyRuns {
		if on && mean > 0 {
			out[i].Ratio = ptr(out[i].RowsPerSec / mean)
		}
	}
	return out, nil
}
