package sqlserver_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/sqlserver"
)

// The destinations' statements name their own tables, qualified and named
// after the outbox table, and take every value as a parameter.
func TestDestinationStatementsNameTheirTables(t *testing.T) {
	q, err := sqlserver.Queries(renamed)
	if err != nil {
		t.Fatal(err)
	}
	checks := map[string][]string{
		"DestinationStates": {"FROM [app].[events_out_destinations]"},
		"DestinationPause": {"WITH (UPDLOCK, HOLDLOCK) WHERE name = @p1", "INSERT INTO [app].[events_out_destinations]",
			"CASE WHEN paused = 1 THEN changed_at ELSE @now END", "BEGIN TRANSACTION", "COMMIT TRANSACTION"},
		"DestinationResume":         {"UPDATE [app].[events_out_destinations]", "WHERE name = @p1 AND paused = 1", "OUTPUT inserted.name"},
		"DestinationCircuitOpen":    {"UPDATE [app].[events_out_circuits] WITH (UPDLOCK, HOLDLOCK)", "IF @@ROWCOUNT = 0"},
		"DestinationCircuitsClosed": {"DELETE FROM [app].[events_out_circuits]", "OPENJSON(@p2)", "DATEADD(day, -1, SYSUTCDATETIME())"},
		"DestinationCircuits":       {"FROM [app].[events_out_circuits]", "DATEADD(millisecond, -@p1, SYSUTCDATETIME())"},
	}
	stmts := dialects.Statements(q)
	for name, wants := range checks {
		for _, w := range wants {
			if !strings.Contains(stmts[name], w) {
				t.Errorf("%s lacks %q:\n%s", name, w, stmts[name])
			}
		}
	}
}

// A deferred row keeps its attempt and last_error and is rescheduled.
func TestCompleteArgOfADeferredRow(t *testing.T) {
	arg := sqlserver.CompleteArg([]dialects.Outcome{{Claim: dialects.Claim{ID: uuid.New(), Token: uuid.New()},
		Kind: dialects.OutcomeDefer, Delay: 2500 * time.Millisecond, Error: "not written"}})
	var got []map[string]any
	if err := json.Unmarshal([]byte(arg), &got); err != nil {
		t.Fatal(err)
	}
	if got[0]["s"] != "pending" || got[0]["a"] != 0.0 || got[0]["d"] != 2500.0 || got[0]["w"] != 0.0 {
		t.Errorf("defer arg %v", got[0])
	}
}
