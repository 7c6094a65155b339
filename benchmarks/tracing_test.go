package benchmarks_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/queuebox/queuebox/benchmarks"
	"github.com/queuebox/queuebox/internal/testdb"
)

// The tracing scenario drains the same backlog with tracing off, on, on
// and off, exports the spans of the traced drains, and gives them a ratio
// to the mean of the others. (What the figures are is for a real run, not
// a test.)
func TestTracingScenarioRuns(t *testing.T) {
	t.Parallel()
	var table, progress bytes.Buffer
	results, err := benchmarks.Run(context.Background(), benchmarks.Options{
		DatabaseURL: testdb.Database(t), Scenarios: []string{"tracing"}, Rows: 500, Out: &table, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if len(results) != 4 {
		t.Fatalf("results %+v", results)
	}
	for i, r := range results {
		traced := i == 1 || i == 2
		if r.Failed != 0 || r.RowsPerSec <= 0 || (r.Ratio != nil) != traced || strings.HasPrefix(r.Variant, "tracing on") != traced {
			t.Errorf("drain %d: %+v", i, r)
		}
		if traced && (strings.HasPrefix(r.Note, "0 exports") || strings.Contains(r.Note, "not all exported")) {
			t.Errorf("the spans of drain %d did not reach the receiver: %s", i, r.Note)
		}
	}
	if !strings.Contains(table.String(), "tracing on (2): OTLP/HTTP, always_on") || !strings.Contains(table.String(), "tracing off (2)") {
		t.Errorf("the table lacks a drain:\n%s", table.String())
	}
}
