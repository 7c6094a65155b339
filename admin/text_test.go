package admin

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
)

// The status text names every state (zero too), a state written by hand
// with what it means, the oldest due row's wait, the inbox's, the open
// transaction with its query on one line, and the dead rows per topic.
func TestStatusText(t *testing.T) {
	since := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	st := Stats{
		Rows:        map[dialects.State]int64{dialects.Pending: 4, dialects.Dead: 3},
		OtherStates: map[string]int64{"paused": 2},
		OldestDue:   1500 * time.Millisecond, ScheduledLater: 7,
		DeadByTopic: map[string]int64{"order.created": 2, "user.created": 1},
		HeldBackBy:  []Writer{{PID: 4242, Since: since, OpenSeconds: 12.4, State: "idle in transaction", Application: "billing", Query: "INSERT INTO outbox\n   VALUES (...)"}},
		Inbox:       InboxStats{Received: 2, Relayed: 9, OldestReceived: 800 * time.Millisecond},
	}
	var b strings.Builder
	if err := st.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"STATE       ROWS\npending     4\nprocessing  0\ndelivered   0\ndead        3\npaused      2  (not a QueueBox state",
		"oldest due pending: 1.5s (the oldest row the relay could take now, waiting since it became due)",
		"scheduled later: 7 (",
		"inbox: 2 received, 9 relayed (the oldest received row has waited 800ms for the inbox relay)",
		"4242  12s   2025-03-01T12:00:00Z  idle in transaction  billing      INSERT INTO outbox VALUES (...)",
		"dead rows per topic:\n  order.created  2\n  user.created   1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the status text lacks %q:\n%s", want, out)
		}
	}

	b.Reset()
	if err := (Stats{Rows: map[dialects.State]int64{}}).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "oldest due pending: none is due") || strings.Contains(out, "dead rows per topic") ||
		strings.Contains(out, "transactions began") || !strings.Contains(out, "inbox: 0 received, 0 relayed\n") {
		t.Errorf("the status of an empty table:\n%s", out)
	}
}

// A dead row's error is printed on its line, whatever line breaks it
// holds; its tries read "try n of m, attempt a"; a list the limit cut says so.
func TestDeadRowsText(t *testing.T) {
	key, le := "cust-1", "HTTP 500\nupstream failed"
	id := uuid.MustParse("0195a0c0-0000-7000-8000-000000000001")
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	l := DeadList{Limit: 2, More: true, Rows: []RowView{
		{ID: id, Topic: "order.created", Key: &key, Attempt: 5, MaxAttempts: 5, UpdatedAt: at, LastError: &le, Destination: "orders"},
		{ID: id, Topic: "user.created", Attempt: 0, MaxAttempts: 5, UpdatedAt: at}}}
	var b strings.Builder
	if err := l.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID ") ||
		!strings.HasSuffix(lines[1], "orders       try 6 of 6, attempt 5  2025-03-01T12:00:00Z  HTTP 500 upstream failed") ||
		!strings.Contains(lines[2], "(no route)   try 1 of 6, attempt 0") ||
		lines[3] != "showing 2 of more than 2; raise --limit (up to 10000) or narrow the filter" {
		t.Fatalf("dead rows:\n%s", b.String())
	}
}

func TestTries(t *testing.T) {
	for _, c := range []struct {
		attempt, max int
		want         string
	}{{0, 5, "try 1 of 6, attempt 0"}, {5, 5, "try 6 of 6, attempt 5"}, {0, 0, "try 1 of 1, attempt 0"}, {2, 5, "try 3 of 6, attempt 2"}} {
		if got := Tries(c.attempt, c.max); got != c.want {
			t.Errorf("Tries(%d, %d) = %q, want %q", c.attempt, c.max, got, c.want)
		}
	}
}

// One group of one dead row is said in the singular.
func TestDeadGroupsCountInTheSingular(t *testing.T) {
	var b strings.Builder
	gs := DeadGroups{Window: 1000, Grouped: 1, Groups: []DeadGroup{{ID: "g-1", Destination: "hook", Error: "HTTP 500", Rows: 1}}}
	if err := gs.WriteText(&b, time.Now()); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(b.String(), "\n"); first != "1 group of 1 dead row." {
		t.Fatalf("first line %q, want %q", first, "1 group of 1 dead row.")
	}
}

// The status text counts the copies of fan-out rows per destination and
// state, and says nothing of them while there are none.
func TestStatusTextCountsCopies(t *testing.T) {
	st := Stats{Rows: map[dialects.State]int64{}, Copies: copyCounts([]dialects.DestinationCount{
		{Destination: "ledger", State: dialects.Dead, Rows: 3},
		{Destination: "crm", State: dialects.Pending, Rows: 2, OldestDue: 1500 * time.Millisecond},
		{Destination: "crm", State: dialects.Delivered, Rows: 7},
	})}
	var b strings.Builder
	if err := st.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := "copies of fan-out rows per destination (a destination that did not deliver in its row's pass):\n" +
		"  DESTINATION  PENDING  PROCESSING  DELIVERED  DEAD  OLDEST DUE PENDING\n" +
		"  crm          2        0           7          0     1.5s\n" +
		"  ledger       0        0           0          3     none due\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("the status text lacks\n%s\nin\n%s", want, b.String())
	}
	b.Reset()
	if err := (Stats{Rows: map[dialects.State]int64{}}).WriteText(&b); err != nil || strings.Contains(b.String(), "copies") {
		t.Errorf("the status without copies:\n%s", b.String())
	}
}

// A group of dead copies says so, and the first line counts them apart
// from the dead rows.
func TestDeadGroupsTextNamesCopies(t *testing.T) {
	var b strings.Builder
	gs := DeadGroups{Window: 1000, Grouped: 2, CopiesGrouped: 1, Groups: []DeadGroup{
		{ID: "g-1", Destination: "hook", Error: "HTTP 500", Rows: 2},
		{ID: "g-2", Destination: "ledger", Route: "orders", Error: "HTTP 410 Gone", Rows: 1, Copies: true}}}
	if err := gs.WriteText(&b, time.Now()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"2 groups of 2 dead rows and 1 dead copy of fan-out rows.\n",
		"g-2  ledger (route orders)  1 dead copy (this destination's part of a fan-out row), the newest",
		"g-1  hook  2 rows, the newest", "replay:   queuebox replay --group g-2"} {
		if !strings.Contains(out, want) {
			t.Errorf("dead groups lack %q:\n%s", want, out)
		}
	}
}
