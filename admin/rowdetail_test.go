package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
)

// rowWithAttempts inserts one keyed order row that failed once (HTTP 500)
// and was then delivered, both attempts recorded, and returns its id.
func rowWithAttempts(t *testing.T, d dialects.Dialect) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	row := testkit.Row("order.created", testkit.Key("cust-9"))
	row.Payload = []byte(`{"order":7,"total":"12.50"}`)
	row.Headers = []byte(`{"trace":"abc"}`)
	if err := d.OutboxInsert(ctx, []dialects.NewRow{row}); err != nil {
		t.Fatal(err)
	}
	claim := func() dialects.Row {
		c, err := d.OutboxClaim(ctx, dialects.ClaimParams{Limit: 1, Lease: time.Minute, Token: uuid.New()})
		rs := c.Rows
		if err != nil || len(rs) != 1 {
			t.Fatalf("claim: %v %v", rs, err)
		}
		return rs[0]
	}
	r := claim()
	at := time.Now().Add(-time.Minute)
	fail := dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeRetry, Error: "HTTP 500 Internal Server Error: boom",
		Attempt: &dialects.Attempt{At: at, Duration: 1500 * time.Microsecond, Try: 1, Destination: "orders-webhook",
			Status: "HTTP 500 Internal Server Error", Error: "HTTP 500 Internal Server Error: boom", Response: "boom"}}
	if _, err := d.OutboxComplete(ctx, []dialects.Outcome{fail}); err != nil {
		t.Fatal(err)
	}
	r = claim()
	ok := dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeDelivered,
		Attempt: &dialects.Attempt{At: at.Add(time.Second), Duration: 2 * time.Millisecond, Try: 2, Destination: "orders-webhook", Status: "HTTP 200 OK", Response: `{"ok":true}`}}
	if _, err := d.OutboxComplete(ctx, []dialects.Outcome{ok}); err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// GET /api/rows/{id} shows the row with its payload, headers, state and
// attempts; an unknown id is a 404, a malformed one a 400 that says what
// an id looks like.
func TestRowRoute(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 0)
	id := rowWithAttempts(t, d)
	_, hs := server(t, d, "")

	a := call(t, hs, "GET", "/api/rows/"+id.String(), "")
	expect(t, a, 200)
	var v RowDetailView
	a.json(t, &v)
	if v.ID != id || v.State != "delivered" || v.Topic != "order.created" || v.Key == nil || *v.Key != "cust-9" ||
		v.Destination != "orders-webhook" || v.Try != 2 || v.MaxTries != 6 {
		t.Errorf("row %+v", v.RowView)
	}
	var payload, headers map[string]any
	if json.Unmarshal(v.Payload, &payload) != nil || payload["order"] != 7.0 || json.Unmarshal(v.Headers, &headers) != nil || headers["trace"] != "abc" {
		t.Errorf("payload %s, headers %s", v.Payload, v.Headers)
	}
	if len(v.Attempts) != 2 {
		t.Fatalf("attempts %+v", v.Attempts)
	}
	if f := v.Attempts[0]; f.Try != 1 || f.Outcome != "retry" || f.Status != "HTTP 500 Internal Server Error" || f.Error == "" || f.Response != "boom" || f.DurationMs == nil || *f.DurationMs != 1.5 {
		t.Errorf("first attempt %+v", f)
	}
	if s := v.Attempts[1]; s.Try != 2 || s.Outcome != "delivered" || s.Status != "HTTP 200 OK" || s.Error != "" {
		t.Errorf("second attempt %+v", s)
	}

	expect(t, call(t, hs, "GET", "/api/rows/"+uuid.NewString(), ""), 404, "no row has the id")
	expect(t, call(t, hs, "GET", "/api/rows/not-a-uuid", ""), 400, `id "not-a-uuid"`, "is not a row id", "UUID")
	expect(t, call(t, hs, "GET", "/api/rows/"+id.String()+"?x=1", ""), 400, "x: is not a parameter")
}

// The text of `queuebox rows show`: the columns, the payload indented, and
// one line per attempt with its error and answer under it.
func TestRowDetailText(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 0)
	id := rowWithAttempts(t, d)
	v, found, err := RowDetail(context.Background(), d, id, nil, nil)
	if err != nil || !found {
		t.Fatal(found, err)
	}
	var b bytes.Buffer
	if err := v.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"id              " + id.String(), "state           delivered, try 2 of 6, attempt 1", "destination     (no route)",
		"payload:\n  {\n    \"order\": 7,", "headers:\n  {\n    \"trace\": \"abc\"\n  }",
		"attempts (2):", "retry      orders-webhook  HTTP 500 Internal Server Error\n       error: HTTP 500", "error: HTTP 500 Internal Server Error: boom\n       response: boom\n",
		"delivered  orders-webhook  HTTP 200 OK",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the text lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "retry") > strings.Index(out, "delivered  orders") {
		t.Errorf("attempts are not oldest first:\n%s", out)
	}
}

// rowWithMarks inserts a row whose history holds a try counted, a probe
// whose failure was not counted, the probe that delivered it, a replay,
// and the try after the replay, a first try that succeeded and is not
// recorded, as the relay does; and returns its id.
func rowWithMarks(t *testing.T, d dialects.Dialect) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	if err := d.OutboxInsert(ctx, []dialects.NewRow{testkit.Row("order.created")}); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Minute)
	var id uuid.UUID
	for i, o := range []dialects.Outcome{
		{Kind: dialects.OutcomeRetry, Error: "HTTP 503: down", Attempt: &dialects.Attempt{At: at, Try: 1, Destination: "hook", Status: "HTTP 503 Service Unavailable", Error: "HTTP 503: down"}},
		{Kind: dialects.OutcomeDefer, Error: "HTTP 503: still down", Attempt: &dialects.Attempt{At: at.Add(time.Second), Try: 2, Destination: "hook",
			Status: "HTTP 503 Service Unavailable", Error: "HTTP 503: still down", Probe: true, Uncounted: true}},
		{Kind: dialects.OutcomeDelivered, Attempt: &dialects.Attempt{At: at.Add(2 * time.Second), Try: 2, Destination: "hook", Status: "HTTP 200 OK", Probe: true}},
		{Kind: dialects.OutcomeDelivered},
	} {
		c, err := d.OutboxClaim(ctx, dialects.ClaimParams{Limit: 1, Lease: time.Minute, Token: uuid.New()})
		if err != nil || len(c.Rows) != 1 {
			t.Fatalf("claim %d: %v %v", i, c.Rows, err)
		}
		o.Claim, id = c.Rows[0].Claim, c.Rows[0].ID
		if _, err := d.OutboxComplete(ctx, []dialects.Outcome{o}); err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			if n, err := Replay(ctx, d, dialects.Filter{IDs: []uuid.UUID{id}}, false, "queuebox replay, user ops on h1"); n != 1 || err != nil {
				t.Fatalf("replay: %d %v", n, err)
			}
		}
	}
	return id
}

// A row's view says both numbers of each try, the try and the attempt the
// destination saw; marks the probes and the failures not counted; shows a
// replay, with who replayed, where the count starts again; and the first
// try after it, which the history did not record, from the row, with what
// the row cannot tell as unknown. The JSON says the same.
func TestRowDetailMarksProbesAndReplays(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 0)
	id := rowWithMarks(t, d)
	v, found, err := RowDetail(context.Background(), d, id, nil, nil)
	if err != nil || !found {
		t.Fatal(found, err)
	}
	var b bytes.Buffer
	if err := v.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	_, table, _ := strings.Cut(out, "attempts (5):\n")
	lines := strings.Split(table, "\n")
	want := []struct{ prefix, has string }{
		{"  TRY                     ATTEMPT  AT ", "DURATION  OUTCOME    DESTINATION  STATUS"},
		{"  1                       0        ", "retry      hook         HTTP 503 Service Unavailable"},
		{"       error: HTTP 503: down", ""},
		{"  2 (probe, not counted)  1        ", "retry      hook         HTTP 503 Service Unavailable"},
		{"       error: HTTP 503: still down", ""},
		{"  2 (probe)               1        ", "delivered  hook         HTTP 200 OK"},
		{"  -                       -        ", "  -         replayed   -            -"},
		{"       replayed by queuebox replay, user ops on h1; the tries count from 1 again", ""},
		{"  1 (from the row)        0        " + v.UpdatedAt.Format(time.RFC3339Nano), "  unknown   delivered  unknown      unknown"},
		{"       told by the row, not recorded: AT is when the delivery was written", ""},
		{"", ""},
	}
	if len(lines) != len(want) {
		t.Fatalf("the attempts:\n%s", out)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w.prefix) || !strings.Contains(lines[i], w.has) {
			t.Errorf("line %d of the attempts is %q; want it to start %q and hold %q", i, lines[i], w.prefix, w.has)
		}
	}
	if !strings.Contains(out, "state           delivered, try 1 of 6, attempt 0\n") {
		t.Errorf("the state line:\n%s", out)
	}

	_, hs := server(t, d, "")
	a := call(t, hs, "GET", "/api/rows/"+id.String(), "")
	expect(t, a, 200)
	var raw struct {
		Attempts []map[string]any `json:"attempts"`
	}
	a.json(t, &raw)
	if len(raw.Attempts) != 5 {
		t.Fatalf("attempts %v", raw.Attempts)
	}
	for i, w := range []map[string]any{
		{"try": 1.0, "attempt": 0.0, "outcome": "retry", "probe": nil, "uncounted": nil},
		{"try": 2.0, "attempt": 1.0, "outcome": "retry", "probe": true, "uncounted": true},
		{"try": 2.0, "attempt": 1.0, "outcome": "delivered", "probe": true, "uncounted": nil, "fromRow": nil},
		{"try": nil, "attempt": nil, "outcome": "replayed", "replayedBy": "queuebox replay, user ops on h1", "durationMs": nil},
		{"try": 1.0, "attempt": 0.0, "outcome": "delivered", "replayedBy": nil, "fromRow": true, "durationMs": nil, "destination": "", "status": ""},
	} {
		for k, want := range w {
			if got := raw.Attempts[i][k]; got != want {
				t.Errorf("attempt %d: %s is %v, want %v (%v)", i, k, got, want, raw.Attempts[i])
			}
		}
	}
}
