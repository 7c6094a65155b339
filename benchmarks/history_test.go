package benchmarks_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/queuebox/queuebox/benchmarks"
	"github.com/queuebox/queuebox/internal/testdb"
)

// The history scenario drains with the attempt history off, on, on and
// off: the drains with it on record one attempt per row and carry their
// ratio to those with it off; those with it off record none.
func TestHistoryScenario(t *testing.T) {
	var table, progress bytes.Buffer
	const rows = 1500
	results, err := benchmarks.Run(context.Background(), benchmarks.Options{
		DatabaseURL: testdb.Database(t), Scenarios: []string{"history"}, Rows: rows, Out: &table, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if len(results) != 4 {
		t.Fatalf("results %+v", results)
	}
	for i, on := range []bool{false, true, true, false} {
		r := results[i]
		if r.Scenario != "history" || r.Failed != 0 || r.RowsPerSec <= 0 || r.Keys != 1000 {
			t.Errorf("result %d: %+v", i, r)
		}
		wantNote, wantVariant := "0 attempts recorded", "history off"
		if on {
			wantNote, wantVariant = "1500 attempts recorded", "history on"
		}
		if !strings.HasPrefix(r.Note, wantNote) || !strings.HasPrefix(r.Variant, wantVariant) || (r.Ratio != nil) != on {
			t.Errorf("result %d: variant %q, note %q, ratio %v", i, r.Variant, r.Note, r.Ratio)
		}
	}
	t.Logf("\n%s", table.String())
	if !strings.Contains(table.String(), "history on (1)") {
		t.Errorf("the table:\n%s", table.String())
	}
}
