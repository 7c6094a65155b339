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
	if _, ok := a["p"]; ok {
		t.Errorf("an attempt that was no probe carries the mark: %v", a)
	}
}

// A failure the breaker did not count is recorded as a retry, with its
// marks; a delivered probe as a probe.
func TestCompleteArgMarks(t *testing.T) {
	tok := uuid.New()
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	var got []map[string]any
	if err := json.Unmarshal([]byte(sqlserver.CompleteArg([]dialects.Outcome{
		{Claim: dialects.Claim{ID: uuid.New(), Token: tok}, Kind: dialects.OutcomeDefer, Error: "HTTP 503", Delay: time.Second,
			Attempt: &dialects.Attempt{At: at, Try: 3, Error: "HTTP 503", Probe: true, Uncounted: true}},
		{Claim: dialects.Claim{ID: uuid.New(), Token: tok}, Kind: dialects.OutcomeDelivered, Attempt: &dialects.Attempt{At: at, Try: 3, Probe: true}},
	})), &got); err != nil {
		t.Fatal(err)
	}
	if d := got[0]; d["k"] != "retry" || d["p"] != 1.0 || d["u"] != 1.0 || d["n"] != 3.0 || d["w"] != 0.0 || d["s"] != "pending" || d["a"] != 0.0 {
		t.Errorf("a probe's failure not counted: %v", d)
	}
	if d := got[1]; d["k"] != "delivered" || d["p"] != 1.0 || d["u"] != nil {
		t.Errorf("a delivered probe: %v", d)
	}
}

// A replay records itself in the history of the rows it put back, when it
// is given who replayed, after each row's latest attempt, with the try and
// the time of a delivered row's delivery, read from the row as it stood
// before the update (the history records no first try that succeeds); the
// history is read back with the marks and those.
func TestReplayAndHistoryStatements(t *testing.T) {
	q, err := sqlserver.Queries(renamed)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		sql  string
		want []string
	}{
		"OutboxReplayIDs": {q.OutboxReplayIDs, []string{
			"DECLARE @replayed TABLE (id UNIQUEIDENTIFIER PRIMARY KEY, was NVARCHAR(50), was_attempt INT, was_at DATETIME2);",
			"OUTPUT inserted.[id], deleted.[status], deleted.[attempt], deleted.[updated_at] INTO @replayed",
			"INSERT INTO [app].[events_out_attempts] (row_id, attempted_at, duration_us, try, outcome, replayed_by, row_delivered_try, row_delivered_at)",
			"CASE WHEN l.at >= @now THEN DATEADD(microsecond, 1, l.at) ELSE @now END, 0, 0, N'replayed', @p3,",
			"CASE WHEN r.was = N'delivered' THEN r.was_attempt + 1 END,",
			"CASE WHEN r.was = N'delivered' THEN r.was_at END",
			"WHERE @p3 IS NOT NULL;",
			"SELECT COUNT(*) FROM @replayed;",
		}},
		"OutboxCompleteAttempts": {q.OutboxCompleteAttempts, []string{
			"destination, status, error, response, probe, counted)",
			"COALESCE(v.p, 0), 1 - COALESCE(v.u, 0)",
			"p INT '$.p', u INT '$.u'",
		}},
		"AttemptsOfRow": {q.AttemptsOfRow, []string{"response, probe, counted, replayed_by,\n       row_delivered_try, row_delivered_at\n"}},
	} {
		for _, w := range c.want {
			if !strings.Contains(c.sql, w) {
				t.Errorf("%s lacks %q:\n%s", name, w, c.sql)
			}
		}
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
