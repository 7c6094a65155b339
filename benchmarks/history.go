package benchmarks

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/bootstrap"
)

// runHistory drains over 1,000 keys to the null destination with the
// attempt history off and on (offOnOnOff): the null destination answers at
// once, so what the history costs the database is all that differs. The
// lines with it on carry their rate against the mean of those with it off
// (Ratio), and how many attempts they recorded.
func runHistory(ctx context.Context, e *env) ([]Result, error) {
	return offOnOnOff(func(i int, on bool) (Result, error) {
		d, h, err := e.fresh(ctx, "history")
		if err != nil {
			return Result{}, err
		}
		if err := e.seed(ctx, d, h, e.o.Rows, 1000); err != nil {
			return Result{}, err
		}
		r, err := e.drainSeeded(ctx, d, "history", e.o.Rows, 1000, func(c *bootstrap.Config) {
			c.Outbox.History.Enabled = on
		})
		if err != nil {
			return r, err
		}
		var recorded int64
		table := pgx.Identifier{d.Names().Schema, d.Names().Object("attempts")}.Sanitize()
		if err := d.Pool().QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&recorded); err != nil {
			return r, err
		}
		r.Variant = fmt.Sprintf("history off (%d)", i/2+1)
		if on {
			r.Variant = fmt.Sprintf("history on (%d)", i)
		}
		r.Note = fmt.Sprintf("%d attempts recorded; ", recorded) + r.Note
		return r, nil
	})
}

// offOnRuns is the order of the drains of a scenario that measures what a
// feature costs: off, on, on, off, so that a server that speeds up or
// slows down as the run goes on weighs on both alike.
var offOnRuns = []bool{false, true, true, false}

// offOnOnOff runs drain for each of offOnRuns (its index, and whether the
// feature is on), and gives the lines with it on their rate against the
// mean of those with it off (Ratio).
func offOnOnOff(drain func(i int, on bool) (Result, error)) ([]Result, error) {
	var out []Result
	var off []float64
	for i, on := range offOnRuns {
		r, err := drain(i, on)
		if err != nil {
			return nil, err
		}
		if !on {
			off = append(off, r.RowsPerSec)
		}
		out = append(out, r)
	}
	mean := (off[0] + off[1]) / 2
	for i, on := range offOnRuns {
		if on && mean > 0 {
			out[i].Ratio = ptr(out[i].RowsPerSec / mean)
		}
	}
	return out, nil
}
