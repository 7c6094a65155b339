package benchmarks_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/queuebox/queuebox/benchmarks"
	"github.com/queuebox/queuebox/internal/testdb"
)

// The fanout scenario drains through a route to one destination and a
// route to three, in turns; every row ends delivered, and the lines of
// three carry their ratio to the mean of one.
func TestFanOutScenario(t *testing.T) {
	var table, progress bytes.Buffer
	const rows = 1500
	results, err := benchmarks.Run(context.Background(), benchmarks.Options{
		DatabaseURL: testdb.Database(t), Scenarios: []string{"fanout"}, Rows: rows, Out: &table, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	want := []string{"1 destination (1)", "3 destinations (1)", "3 destinations (2)", "1 destination (2)"}
	if len(results) != len(want) {
		t.Fatalf("results %+v", results)
	}
	for i, w := range want {
		r := results[i]
		wide := w[0] == '3'
		if r.Scenario != "fanout" || r.Variant != w || r.Failed != 0 || r.RowsPerSec <= 0 || r.Rows != rows || (r.Ratio != nil) != wide {
			t.Errorf("result %d: %+v, want %q", i, r, w)
		}
	}
	t.Logf("\n%s", table.String())
}
