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
		"oldest due pending: 1.5s (waiting since it became due)",
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

// A dead row's error is printed on its own line, whatever line breaks it
// holds.
func TestDeadRowsText(t *testing.T) {
	key, le := "cust-1", "HTTP 500\nupstream failed"
	id := uuid.MustParse("0195a0c0-0000-7000-8000-000000000001")
	var b strings.Builder
	err := WriteDeadRows(&b, []dialects.ListedRow{{ID: id, Topic: "order.created", Key: &key, Attempt: 5,
		UpdatedAt: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC), LastError: &le}, {ID: id, Topic: "user.created"}})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID ") || !strings.HasSuffix(lines[1], "5        2025-03-01T12:00:00Z  HTTP 500 upstream failed") {
		t.Fatalf("dead rows:\n%s", b.String())
	}
}
