package benchmarks

import (
	"context"
	"fmt"

	"github.com/queuebox/queuebox/bootstrap"
)

// fanOutWidth is how many null destinations the fan-out lines send each
// row to.
const fanOutWidth = 3

// runFanOut drains over 1,000 keys through a route to one null destination
// and through a route to three (fanOutWidth), in turns (offOnRuns: one,
// three, three, one), each on a fresh table. Every destination accepts at
// once, so each row's pass delivers it everywhere and writes no copy: what
// differs is the deliveries a row costs the relay. The fan-out lines carry
// their rows per second against the mean of the one-destination lines
// (Ratio); their deliveries per second are that times three.
func runFanOut(ctx context.Context, e *env) ([]Result, error) {
	var out []Result
	var one []float64
	n := map[bool]int{}
	for _, wide := range offOnRuns {
		d, h, err := e.fresh(ctx, "fanout")
		if err != nil {
			return nil, err
		}
		if err := e.seed(ctx, d, h, e.o.Rows, 1000); err != nil {
			return nil, err
		}
		r, err := e.drainSeeded(ctx, d, "fanout", e.o.Rows, 1000, func(c *bootstrap.Config) {
			if !wide {
				return
			}
			names := make([]string, fanOutWidth)
			for i := range names {
				names[i] = fmt.Sprintf("bench%d", i+1)
				c.Destinations[names[i]] = &bootstrap.DestinationConfig{Type: "null"}
			}
			delete(c.Destinations, "bench")
			c.Routes = []bootstrap.RouteConfig{{TopicPattern: "#", Destinations: names}}
		})
		if err != nil {
			return nil, err
		}
		n[wide]++
		if wide {
			r.Variant = fmt.Sprintf("%d destinations (%d)", fanOutWidth, n[wide])
		} else {
			r.Variant = fmt.Sprintf("1 destination (%d)", n[wide])
			one = append(one, r.RowsPerSec)
		}
		out = append(out, r)
	}
	mean := (one[0] + one[1]) / 2
	for i, wide := range offOnRuns {
		if wide && mean > 0 {
			out[i].Ratio = ptr(out[i].RowsPerSec / mean)
		}
	}
	return out, nil
}
