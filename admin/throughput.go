package admin

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Throughput keeps what this replica finished over the last minutes, for
// the page's chart and the deliveries per second of /api/stats: every step
// it records the cumulative counts per destination, and keeps the last
// ThroughputPoints records.
type Throughput struct {
	m      *Metrics
	mu     sync.Mutex
	step   time.Duration
	points []throughputPoint // oldest first
}

// ThroughputPoints is how many steps the chart holds: 15 minutes of 5 s.
const ThroughputPoints = 180

type throughputPoint struct {
	at     time.Time
	totals map[string][3]int64 // destination -> delivered, retried, dead
}

func newThroughput(m *Metrics) *Throughput { return &Throughput{m: m, step: 5 * time.Second} }

// run records a point every step until ctx ends.
func (t *Throughput) run(ctx context.Context, step time.Duration) {
	t.mu.Lock()
	t.step = step
	t.mu.Unlock()
	t.record(time.Now())
	tick := time.NewTicker(step)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			t.record(now)
		}
	}
}

func (t *Throughput) record(now time.Time) {
	p := throughputPoint{at: now, totals: t.m.destinationTotals()}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.points = append(t.points, p)
	if len(t.points) > ThroughputPoints+1 {
		t.points = append(t.points[:0], t.points[len(t.points)-ThroughputPoints-1:]...)
	}
}

// ThroughputStep is one step of the chart: the rows finished in the step
// that ended At.
type ThroughputStep struct {
	At        time.Time `json:"at"`
	Delivered int64     `json:"delivered"`
	Retried   int64     `json:"retry"`
	Dead      int64     `json:"dead"`
}

// ThroughputView is the chart and the current rates.
type ThroughputView struct {
	StepSeconds float64          `json:"stepSeconds"`
	Steps       []ThroughputStep `json:"steps"`
	// DeliveriesPerSecond per destination, over the last two steps.
	DeliveriesPerSecond map[string]float64 `json:"deliveriesPerSecond"`
}

// View returns the recorded steps, oldest first.
func (t *Throughput) View() ThroughputView {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := ThroughputView{StepSeconds: t.step.Seconds(), Steps: []ThroughputStep{}, DeliveriesPerSecond: map[string]float64{}}
	for i := 1; i < len(t.points); i++ {
		prev, cur := t.points[i-1], t.points[i]
		s := ThroughputStep{At: cur.at}
		for d, c := range cur.totals {
			p := prev.totals[d]
			s.Delivered += c[0] - p[0]
			s.Retried += c[1] - p[1]
			s.Dead += c[2] - p[2]
		}
		v.Steps = append(v.Steps, s)
	}
	if n := len(t.points); n >= 2 {
		from, to := t.points[max(0, n-3)], t.points[n-1]
		secs := to.at.Sub(from.at).Seconds()
		names := make([]string, 0, len(to.totals))
		for d := range to.totals {
			if d != "" { // rows that match no route are never delivered
				names = append(names, d)
			}
		}
		sort.Strings(names)
		for _, d := range names {
			if secs > 0 {
				v.DeliveriesPerSecond[d] = float64(to.totals[d][0]-from.totals[d][0]) / secs
			}
		}
	}
	return v
}
