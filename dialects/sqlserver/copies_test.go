package sqlserver_test

import (
	"database/sql"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/sqlserver"
)

// The copies' statements name the copies table after the renamed outbox,
// and the outbox's renamed columns where they read the outbox; the
// copies' own columns keep their names ([key] and [sequence] bracketed).
func TestCopyStatementsRenderForRenamedNames(t *testing.T) {
	q, err := sqlserver.Queries(renamed)
	if err != nil {
		t.Fatal(err)
	}
	all := dialects.Statements(q)
	for name, sql := range all {
		if !strings.HasPrefix(name, "Cop") && !strings.HasPrefix(name, "FanOut") {
			continue
		}
		if !strings.Contains(sql, "[app].[events_out_copies]") {
			t.Errorf("%s does not name the copies table [app].[events_out_copies]:\n%s", name, sql)
		}
	}
	for name, wants := range map[string][]string{
		// the lane rule, on the copies and on the outbox's key index
		"CopyClaim": {"WITH (UPDLOCK, READPAST, ROWLOCK)", "BEGIN TRANSACTION", "COMMIT TRANSACTION",
			"b.[key] = c.[key] AND b.destination = c.destination\n               AND b.[sequence] < c.[sequence] AND b.state IN (N'pending', N'processing')",
			"b.[message_key] = c.[key] AND b.[seq_no] < c.[sequence]\n                   AND b.[status] IN (N'pending', N'processing')",
			"o.[message_key] = h.k AND o.[seq_no] > h.seq", "x.[sequence] > h.seq AND x.[sequence] < b.upto",
			"ROWS UNBOUNDED PRECEDING", "CAST(@p4 AS UNIQUEIDENTIFIER)", "DATEADD(millisecond, @p3, @now)", "TOP (@p2)"},
		// the copies in the outcome's transaction, from the row, by key
		"FanOutComplete": {"SET XACT_ABORT ON;\nBEGIN TRANSACTION;", "inserted.[id] INTO @done", "OPENJSON(@p2)", "OPENJSON(@p3)",
			"WHERE v.i IN (SELECT id FROM @done);", "[key] = o.[message_key]", "[sequence] = o.[seq_no]",
			"FROM [app].[events_out_copies] AS x WITH (UPDLOCK, HOLDLOCK)", "JOIN [app].[events_out] AS o ON o.[id] = v.row_id",
			"SET @change = NEXT VALUE FOR [app].[events_out_copies_change];", "COMMIT TRANSACTION;\nSELECT CAST(id AS NVARCHAR(36)) FROM @done;"},
		"FanOutBlockedLanes": {"OPENJSON(@p1)", "WHILE @@ROWCOUNT > 0", "x.destination > l.d", "SELECT d, k FROM @lanes;"},
		"CopyComplete": {"x.claim_token = v.t", "WHERE x.state = N'processing'", "JOIN @done AS d ON d.id = v.i",
			"CASE WHEN v.s = N'pending' THEN @change ELSE x.copy_change END"},
		"CopyReleaseExpired": {"UPDATE TOP (@p1) x", "WITH (ROWLOCK, READPAST)", "OPENJSON(@p2)", "copy_change = @change"},
		"CopyProbe":          {"OBJECT_ID(N'[app].[events_out_copies_change]')", "scheduled_at > SYSUTCDATETIME()"},
		"CopyReplay":         {"c.destination = @p1", "c.state <> N'processing'", "N'replayed', @p1, @p4", "WHERE @p4 IS NOT NULL"},
		"CopyBackfill":       {"o.[status] = N'delivered'", "x.destination = @p1", "N'replayed', @p1, @p3"},
	} {
		for _, want := range wants {
			if !strings.Contains(all[name], want) {
				t.Errorf("%s lacks %q:\n%s", name, want, all[name])
			}
		}
	}
	names := slices.Clone(q.CopyList.Names())
	slices.Sort(names)
	if want := []string{"after_destination", "after_sequence", "after_updated_at", "destination", "error_text", "ids", "key", "limit", "since", "states", "until"}; !slices.Equal(names, want) {
		t.Errorf("the listing's parameters are %v, want %v", names, want)
	}
}

// The fan-out completion's parameters: every attempt of every outcome with
// its destination's end, and the copies of delivered rows only, once per
// destination.
func TestFanOutArgs(t *testing.T) {
	id, other := uuid.New(), uuid.New()
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	attempts, copies := sqlserver.FanOutArgs([]dialects.Outcome{
		{Claim: dialects.Claim{ID: id}, Kind: dialects.OutcomeDelivered,
			Attempt:  &dialects.Attempt{At: at, Try: 1, Destination: "a"},
			Attempts: []dialects.Attempt{{At: at, Try: 1, Destination: "b", Error: "HTTP 500", Probe: true}, {At: at, Try: 2, Destination: "c"}},
			Copies: []dialects.Copy{{Destination: "b", Kind: dialects.CopyRetry, Attempt: 1, Delay: 1500 * time.Millisecond, Error: "HTTP 500"},
				{Destination: "c", Kind: dialects.CopyDead, Attempt: 2, Error: "no"}}},
		{Claim: dialects.Claim{ID: other}, Kind: dialects.OutcomeRelease, Copies: []dialects.Copy{{Destination: "x", Kind: dialects.CopyBehind}}},
	})
	var as, cs []map[string]any
	if err := json.Unmarshal([]byte(attempts), &as); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(copies), &cs); err != nil {
		t.Fatal(err)
	}
	if len(as) != 3 || as[0]["ds"] != "a" || as[0]["k"] != "delivered" || as[1]["k"] != "retry" || as[1]["p"] != 1.0 ||
		as[1]["er"] != "HTTP 500" || as[2]["k"] != "dead" || as[2]["n"] != 2.0 || as[0]["i"] != id.String() || as[0]["at"] != "2026-03-04T05:06:07" {
		t.Errorf("attempts %v", as)
	}
	if len(cs) != 2 || cs[0]["ds"] != "b" || cs[0]["s"] != "pending" || cs[0]["a"] != 1.0 || cs[0]["d"] != 1500.0 || cs[0]["e"] != "HTTP 500" ||
		cs[1]["ds"] != "c" || cs[1]["s"] != "dead" || cs[1]["i"] != id.String() {
		t.Errorf("copies %v", cs)
	}
	if a, c := sqlserver.FanOutArgs(nil); a != "[]" || c != "[]" {
		t.Errorf("no outcomes: %s %s", a, c)
	}
}

// The claim's blocked lanes are read for its keyed rows' keys, each once.
func TestKeysOf(t *testing.T) {
	rows := []dialects.Row{{Key: ""}, {Key: "a"}, {Key: "a"}, {Key: "b"}}
	if got := sqlserver.KeysOf(rows); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("keys %v", got)
	}
	if got := sqlserver.KeysOf(rows[:1]); got != nil {
		t.Errorf("unkeyed rows: keys %v", got)
	}
}

// The listing of copies: any state without states, and a page goes on
// after its cursor's update, sequence and destination.
func TestCopyListArgs(t *testing.T) {
	d := openOffline(t)
	args := func(p dialects.CopyListParams) map[string]any {
		out := map[string]any{}
		for _, a := range d.CopyListArgs(p) {
			n := a.(sql.NamedArg)
			out[n.Name] = n.Value
		}
		return out
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	got := args(dialects.CopyListParams{Limit: 5, After: &dialects.Cursor{UpdatedAt: at, Sequence: 9}, AfterDestination: "b",
		Filter: dialects.CopyFilter{Destination: "b"}})
	if got["states"] != "[]" || got["destination"] != "b" || got["after_sequence"] != int64(9) || got["after_destination"] != "b" ||
		!got["after_updated_at"].(time.Time).Equal(at) || got["limit"] != 5 || got["ids"] != nil {
		t.Errorf("arguments %v", got)
	}
	got = args(dialects.CopyListParams{Limit: 5, Filter: dialects.CopyFilter{Filter: dialects.Filter{States: []dialects.State{dialects.Dead}}}})
	if got["states"] != `["dead"]` || got["destination"] != nil || got["after_updated_at"] != nil {
		t.Errorf("arguments %v", got)
	}
}
