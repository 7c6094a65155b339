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

// An outcome that carries an attempt puts it in the completion's JSON
// parameter, and the completion then runs the statement that records it;
// one without sends only what the transition table says.
func TestCompleteArgWithAttempt(t *testing.T) {
	id, tok := uuid.New(), uuid.New()
	at := time.Date(2026, 3, 4, 5, 6, 7, 891234500, time.FixedZone("x", 3600))
	with := []dialects.Outcome{
		{Claim: dialects.Claim{ID: id, Token: tok}, Kind: dialects.OutcomeRetry, Error: "HTTP 500", Attempt: &dialects.Attempt{
			At: at, Duration: 1500 * time.Microsecond, Try: 2, Destination: "hook", Status: "HTTP 500 Internal Server Error", Error: "HTTP 500", Response: "oops"}},
		{Claim: dialects.Claim{ID: uuid.New(), Token: tok}, Kind: dialects.OutcomeRelease},
	}
	if !sqlserver.HasAttempts(with) || sqlserver.HasAttempts(with[1:]) {
		t.Fatal("HasAttempts")
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(sqlserver.CompleteArg(with)), &got); err != nil {
		t.Fatal(err)
	}
	a := got[0]
	if a["at"] != "2026-03-04T04:06:07.8912345" || a["us"] != 1500.0 || a["n"] != 2.0 || a["k"] != "retry" ||
		a["ds"] != "hook" || a["st"] != "HTTP 500 Internal Server Error" || a["er"] != "HTTP 500" || a["rs"] != "oops" {
		t.Errorf("attempt arg %v", a)
	}
	if _, ok := got[1]["at"]; ok {
		t.Errorf("an outcome without an attempt carries one: %v", got[1])
	}
}

// The statement that records attempts writes the outcomes first and
// records only the attempts of the rows it wrote, in the history table of
// the renamed outbox.
func TestCompleteAttemptsStatement(t *testing.T) {
	q, err := sqlserver.Queries(renamed)
	if err != nil {
		t.Fatal(err)
	}
	sql := q.OutboxCompleteAttempts
	for _, want := range []string{
		"OUTPUT inserted.[id] INTO @done",
		"INSERT INTO [app].[events_out_attempts]",
		"v.i IN (SELECT id FROM @done)",
		"CONVERT(DATETIME2, v.at, 126)",
		"SELECT CAST(id AS NVARCHAR(36)) FROM @done;",
	} {
		if !strings.Contains(sql, want) {
			t.Errorf("OutboxCompleteAttempts lacks %q:\n%s", want, sql)
		}
	}
	if strings.Contains(q.OutboxComplete, "attempts") {
		t.Errorf("OutboxComplete touches the history:\n%s", q.OutboxComplete)
	}
	if !strings.Contains(q.AttemptsPurge, "DELETE TOP (@p2) FROM [app].[events_out_attempts]") {
		t.Errorf("AttemptsPurge:\n%s", q.AttemptsPurge)
	}
}
