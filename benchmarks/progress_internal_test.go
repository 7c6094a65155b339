package benchmarks

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/queuebox/queuebox/internal/testdb"
)

// The bar counts the rows a scenario moves, of those it plans to move;
// not scenarios.
func TestProgressBarCountsRows(t *testing.T) {
	t.Parallel()
	var table, bar bytes.Buffer
	if _, err := Run(context.Background(), Options{DatabaseURL: testdb.Database(t), Scenarios: []string{"drain"}, Rows: 300,
		Out: &table, Progress: &bar, forceBar: true}); err != nil {
		t.Fatal(err)
	}
	out := bar.String()
	// drain brings raw along: two scenarios of 300 rows each.
	for _, want := range []string{"[1/2] raw", "[2/2] drain", "(300/300, ", " rows/s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("the bar lacks %q:\n%q", want, out)
		}
	}
	if strings.Contains(out, "(1/2") || strings.Contains(out, "(2/2") {
		t.Errorf("the bar counts scenarios:\n%q", out)
	}
}

func TestPlannedRows(t *testing.T) {
	o := Options{Rows: 1000, Rate: 100, Seconds: 5}
	for name, want := range map[string]int{"drain": 1000, "backlog": 10000, "mailbox": 5000, "http": 2000, "tracing": 4000, "history": 6000, "fanout": 4000, "replicas": 6000, "latency": 600, "producer": 0} {
		if got := plannedRows(name, o, defaultHold); got != want {
			t.Errorf("plannedRows(%s) = %d, want %d", name, got, want)
		}
	}
	for _, s := range Scenarios() {
		if got := plannedRows(s.Name, o, defaultHold); got == 0 && s.Name != "producer" && s.Name != "inbox-http" {
			t.Errorf("the scenario %s plans no rows", s.Name)
		}
	}
}
