package benchmarks_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/queuebox/queuebox/benchmarks"
	"github.com/queuebox/queuebox/internal/testdb"
)

// The inbox-http scenario sends to the HTTP source for a second, with and
// without the relay, and reports messages accepted with no failure (the
// scenario itself checks that each accepted message is one inbox row).
func TestInboxHTTPScenario(t *testing.T) {
	var table, progress bytes.Buffer
	results, err := benchmarks.Run(context.Background(), benchmarks.Options{
		DatabaseURL: testdb.Database(t), Scenarios: []string{"inbox-http"}, Seconds: 1, Out: &table, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if len(results) != 2 || results[0].Variant != "source alone" || results[1].Variant != "with the relay running" {
		t.Fatalf("results %+v", results)
	}
	for _, r := range results {
		if r.Scenario != "inbox-http" || r.Rows == 0 || r.RowsPerSec <= 0 || r.Failed != 0 || r.P50 == nil || !strings.Contains(r.Note, "insert statements") {
			t.Errorf("%+v", r)
		}
	}
	if !strings.Contains(table.String(), "inbox-http") {
		t.Errorf("the table:\n%s", table.String())
	}
}
