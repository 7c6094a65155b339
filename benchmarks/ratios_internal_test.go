package benchmarks

import (
	"math"
	"testing"
)

// Every drain of a run, the HTTP and replica drains included, is compared
// with the raw loop of the same run; backlog also with drain-keys; lines
// that are not drains get no ratio to raw.
func TestRatiosCompareDrainsWithRaw(t *testing.T) {
	rs := []Result{
		{Scenario: "raw", RowsPerSec: 1000},
		{Scenario: "drain", RowsPerSec: 900},
		{Scenario: "drain-keys", RowsPerSec: 800},
		{Scenario: "backlog", RowsPerSec: 600},
		{Scenario: "http", Variant: "unkeyed", RowsPerSec: 500},
		{Scenario: "replicas", Variant: "3 processes", RowsPerSec: 700},
		{Scenario: "latency", RowsPerSec: 1000},
	}
	ratios(rs)
	want := map[string]float64{"drain": 0.9, "drain-keys": 0.8, "backlog": 0.6, "http": 0.5, "replicas": 0.7}
	for _, r := range rs {
		w, ok := want[r.Scenario]
		switch {
		case !ok && r.RatioToRaw != nil:
			t.Errorf("%s got a ratio to raw (%v); only drains have one", r.Scenario, *r.RatioToRaw)
		case ok && (r.RatioToRaw == nil || math.Abs(*r.RatioToRaw-w) > 1e-9):
			t.Errorf("%s: ratio to raw %v, want %v", r.Scenario, r.RatioToRaw, w)
		}
	}
	if b := rs[3]; b.Ratio == nil || math.Abs(*b.Ratio-0.75) > 1e-9 {
		t.Errorf("backlog against drain-keys: %v, want 0.75", b.Ratio)
	}
}
