package benchmarks_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/queuebox/queuebox/benchmarks"
	"github.com/queuebox/queuebox/internal/testdb"
)

// The history scenario drains with the attempt history off, on, recording
// every delivery, and back: with it on, the null destination's first tries
// record nothing (the rows tell them); recording every delivery records one
// attempt per row; both carry their ratio to the drains with it off, which
// record none.
func TestHistoryScenario(t *testing.T) {
	var table, progress bytes.Buffer
	const rows = 1500
	results, err := benchmarks.Run(context.Background(), benchmarks.Options{
		DatabaseURL: testdb.Database(t), Scenarios: []string{"history"}, Rows: rows, Out: &table, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	want := []struct{ variant, note string }{
		{"history off (1)", "0 attempts recorded"},
		{"history on (1)", "0 attempts recorded"},
		{"history, every delivery (1)", "1500 attempts recorded"},
		{"history, every delivery (2)", "1500 attempts recorded"},
		{"history on (2)", "0 attempts recorded"},
		{"history off (2)", "0 attempts recorded"},
	}
	if len(results) != len(want) {
		t.Fatalf("results %+v", results)
	}
	for i, w := range want {
		r := results[i]
		if r.Scenario != "history" || r.Failed != 0 || r.RowsPerSec <= 0 || r.Keys != 1000 {
			t.Errorf("result %d: %+v", i, r)
		}
		on := !strings.HasPrefix(w.variant, "history off")
		if r.Variant != w.variant || !strings.HasPrefix(r.Note, w.note) || (r.Ratio != nil) != on {
			t.Errorf("result %d: variant %q, note %q, ratio %v; want %q, %q", i, r.Variant, r.Note, r.Ratio, w.variant, w.note)
		}
	}
	t.Logf("\n%s", table.String())
	if !strings.Contains(table.String(), "history on (1)") {
		t.Errorf("the table:\n%s", table.String())
	}
}
