package benchmarks_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/queuebox/queuebox/benchmarks"
	"github.com/queuebox/queuebox/internal/testdb"
)

// The tracing scenario drains the same backlog with tracing off and on,
// exports the spans of the second drain, and gives it a ratio to the
// first. (What the figures are is for a real run, not a test.)
func TestTracingScenarioRuns(t *testing.T) {
	t.Parallel()
	var table, progress bytes.Buffer
	results, err := benchmarks.Run(context.Background(), benchmarks.Options{
		DatabaseURL: testdb.Database(t), Scenarios: []string{"tracing"}, Rows: 500, Out: &table, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if len(results) != 2 {
		t.Fatalf("results %+v", results)
	}
	off, on := results[0], results[1]
	if off.Variant != "tracing off" || off.Failed != 0 || off.RowsPerSec <= 0 || off.Ratio != nil {
		t.Errorf("tracing off: %+v", off)
	}
	if !strings.HasPrefix(on.Variant, "tracing on") || on.Failed != 0 || on.RowsPerSec <= 0 || on.Ratio == nil {
		t.Errorf("tracing on: %+v", on)
	}
	if strings.HasPrefix(on.Note, "0 exports") || strings.Contains(on.Note, "not all exported") {
		t.Errorf("the spans did not reach the receiver: %s", on.Note)
	}
	if !strings.Contains(table.String(), "tracing on: OTLP/HTTP, always_on") {
		t.Errorf("the table lacks the traced drain:\n%s", table.String())
	}
}
