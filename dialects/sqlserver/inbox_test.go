package sqlserver_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/dialecttest"
	"github.com/queuebox/queuebox/dialects/sqlserver"
)

var renamedInbox = dialects.Names{
	Schema: "app", Outbox: "events_out", Inbox: "events_in",
	OutboxColumns: map[string]string{"key": "message_key", "sequence": "seq_no"},
	InboxColumns:  map[string]string{"message_id": "msg_id", "state": "status", "sequence": "in_seq", "aggregate_id": "agg_id"},
}

// Every inbox statement renders for renamed tables and columns: the inbox
// table qualified, no renamed logical name left, the outbox's names where
// the relay writes it.
func TestInboxQueriesRenderForRenamedNames(t *testing.T) {
	q, err := sqlserver.Queries(renamedInbox)
	if err != nil {
		t.Fatal(err)
	}
	stale := regexp.MustCompile(`(^|[^.@$])\[(message_id|state|sequence|aggregate_id|key)\]`)
	n := 0
	for name, sql := range dialects.Statements(q) {
		if !strings.HasPrefix(name, "Inbox") {
			continue
		}
		n++
		if strings.Contains(sql, "{{") {
			t.Errorf("%s has an unrendered template marker", name)
		}
		if name == "InboxRelayLock" {
			continue
		}
		if name == "InboxProbe" {
			if !strings.Contains(sql, "OBJECT_ID(N'[app].[events_in_sequence_seq]')") || !strings.Contains(sql, "OBJECT_ID(N'[app].[events_in]')") {
				t.Errorf("the inbox probe does not read the renamed inbox sequence and the locks on the renamed table:\n%s", sql)
			}
			continue
		}
		if !strings.Contains(sql, "[app].[events_in]") {
			t.Errorf("%s does not name [app].[events_in]:\n%s", name, sql)
		}
		if m := stale.FindString(sql); m != "" {
			t.Errorf("%s still names a renamed column (%s):\n%s", name, m, sql)
		}
	}
	if n != 7 {
		t.Errorf("%d inbox statements, want 7", n)
	}
}

// The relay takes the application lock owned by its transaction without
// waiting, keeps keyed rows to the watermark, inserts only ids the outbox
// does not have, and draws outbox sequence values in inbox sequence order.
func TestInboxRelayStatements(t *testing.T) {
	q, err := sqlserver.Queries(renamedInbox)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sp_getapplock @Resource = @p1", "@LockOwner = N'Transaction'", "@LockTimeout = 0"} {
		if !strings.Contains(q.InboxRelayLock, want) {
			t.Errorf("the relay lock lacks %q:\n%s", want, q.InboxRelayLock)
		}
	}
	relay := q.InboxRelay
	for _, want := range []string{
		"SELECT TOP (@p1) i.[id], i.[in_seq]",
		"i.[status] = N'received'",
		"(i.[agg_id] IS NULL OR i.[agg_id] = N'' OR @p2 IS NULL OR i.[in_seq] <= @p2)",
		"ORDER BY i.[in_seq]",
		"WHERE NOT EXISTS (SELECT 1 FROM [app].[events_out] AS o WITH (UPDLOCK, HOLDLOCK) WHERE o.[id] = p.id)",
		"INSERT INTO [app].[events_out] ([id], [topic], [message_key], [payload], [headers], [aggregate_type],\n                   [max_attempts], [seq_no])",
		"NEXT VALUE FOR [app].[events_out_sequence_seq] OVER (ORDER BY w.seq)",
		"SET [status] = N'relayed'",
		"[relayed_at] = @now",
	} {
		if !strings.Contains(relay, want) {
			t.Errorf("the relay lacks %q:\n%s", want, relay)
		}
	}
	// The order of the steps: pick, check the outbox, insert, mark.
	steps := []string{"INSERT INTO @picked", "INSERT INTO @new", "INSERT INTO [app].[events_out]", "UPDATE i"}
	last := -1
	for _, s := range steps {
		i := strings.Index(relay, s)
		if i <= last {
			t.Fatalf("the relay's steps are out of order at %q:\n%s", s, relay)
		}
		last = i
	}
	// NEXT VALUE FOR may stand only where SQL Server allows it: with OVER,
	// never in a WHERE clause or a derived table.
	for name, sql := range dialects.Statements(q) {
		for _, m := range regexp.MustCompile(`NEXT VALUE FOR \S+( OVER \(ORDER BY [^)]*\))?`).FindAllStringSubmatch(sql, -1) {
			if strings.HasPrefix(name, "Inbox") && m[1] == "" {
				t.Errorf("%s draws a sequence value without OVER (ORDER BY ...): %s", name, m[0])
			}
		}
	}
}

func TestInboxReceiveStatement(t *testing.T) {
	q, err := sqlserver.Queries(renamedInbox)
	if err != nil {
		t.Fatal(err)
	}
	rc := q.InboxReceive
	for _, want := range []string{
		"BEGIN TRANSACTION", "COMMIT TRANSACTION", "SET XACT_ABORT ON",
		"OPENJSON(@p1)",
		"ROW_NUMBER() OVER (PARTITION BY source, message_id ORDER BY n) AS nth",
		"FROM [app].[events_in] AS i WITH (UPDLOCK, HOLDLOCK)",
		"WHERE i.[source] = v.source AND i.[msg_id] = v.message_id",
		"NEXT VALUE FOR [app].[events_in_sequence_seq] OVER (ORDER BY v.n)",
		"COALESCE(v.headers, N'{}')",
		"ORDER BY v.n;",
	} {
		if !strings.Contains(rc, want) {
			t.Errorf("the receive lacks %q:\n%s", want, rc)
		}
	}
	arg := sqlserver.ReceiveArg([]dialects.InboxMessage{
		{Source: "web", MessageID: "m-1", Topic: "t", AggregateID: ptr("a-1"), Payload: []byte(`{"it's":"\"x\""}`)},
		{Source: "web", MessageID: "m-2", Topic: "t", AggregateType: ptr("order"), Payload: []byte(`[1]`), Headers: []byte(`{"X":"y"}`)},
	})
	var got []map[string]any
	if err := json.Unmarshal([]byte(arg), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0]["s"] != "web" || got[0]["m"] != "m-1" || got[0]["ai"] != "a-1" || got[0]["p"] != `{"it's":"\"x\""}` ||
		got[0]["h"] != nil || got[0]["at"] != nil {
		t.Errorf("first message: %v", got[0])
	}
	if got[1]["at"] != "order" || got[1]["h"] != `{"X":"y"}` || got[1]["ai"] != nil || got[1]["p"] != "[1]" {
		t.Errorf("second message: %v", got[1])
	}
}

func ptr(s string) *string { return &s }

// The inbox conformance subtests, against a real SQL Server when one is
// configured.
func TestInboxConformance(t *testing.T) {
	dialecttest.RunInbox(t, harness(t))
}
