package benchmarks

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/bootstrap"
)

// runHistory drains over 1,000 keys to the null destination with the
// attempt history off, on, recording every delivery
// (outbox.history.allDeliveries), and back (historyRuns): the null
// destination answers at once, so what the history costs the database is
// all that differs. It accepts every row at its first try, which the
// history on records in no attempt (the row tells it): those lines measure
// the happy path, the lines of every delivery an insert per row. The
// lines with the history on carry their rate against the mean of those
// with it off (Ratio), and each how many attempts it recorded.
func runHistory(ctx context.Context, e *env) ([]Result, error) {
	var out []Result
	var off []float64
	n := map[historyMode]int{}
	for _, mode := range historyRuns {
		d, h, err := e.fresh(ctx, "history")
		if err != nil {
			return nil, err
		}
		if err := e.seed(ctx, d, h, e.o.Rows, 1000); err != nil {
			return nil, err
		}
		r, err := e.drainSeeded(ctx, d, "history", e.o.Rows, 1000, func(c *bootstrap.Config) {
			c.Outbox.History.Enabled = mode != historyOff
			c.Outbox.History.AllDeliveries = mode == historyAll
		})
		if err != nil {
			return nil, err
		}
		var recorded int64
		table := pgx.Identifier{d.Names().Schema, d.Names().Object("attempts")}.Sanitize()
		if err := d.Pool().QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&recorded); err != nil {
			return nil, err
		}
		n[mode]++
		r.Variant = fmt.Sprintf("%s (%d)", mode, n[mode])
		r.Note = fmt.Sprintf("%d attempts recorded; ", recorded) + r.Note
		if mode == historyOff {
			off = append(off, r.RowsPerSec)
		}
		out = append(out, r)
	}
	mean := (off[0] + off[1]) / 2
	for i, mode := range historyRuns {
		if mode != historyOff && mean > 0 {
			out[i].Ratio = ptr(out[i].RowsPerSec / mean)
		}
	}
	return out, nil
}

// historyMode is how a drain of the history scenario records attempts.
type historyMode string

const (
	historyOff historyMode = "history off"
	historyOn  historyMode = "history on"
	historyAll historyMode = "history, every delivery"
)

// historyRuns is the order of the history scenario's drains: off, on,
// every delivery, and back, so that a server that speeds up or slows down
// as the run goes on weighs on each alike.
var historyRuns = []historyMode{historyOff, historyOn, historyAll, historyAll, historyOn, historyOff}

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
