package sqlserver_test

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/sqlserver"
)

// openOffline opens the dialect on an address where nothing listens: Open
// does not connect, so the methods that run no statement can be called.
func openOffline(t *testing.T) *sqlserver.Dialect {
	t.Helper()
	d, err := sqlserver.Open(context.Background(), sqlserver.Options{URL: "sqlserver://nobody:secret@127.0.0.1:1?database=app&dial+timeout=1", Names: dialects.DefaultNames()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// The claim names its parameters, and none of its own variables is taken
// for one; it finds the continued keys' heads first, then walks as told:
// in schedule order, key by key after the cursor (wrapping around, then the
// rows without a key), or not at all; and it returns where the next walk by
// key goes on.
func TestClaimFindsHeadsByItsWalk(t *testing.T) {
	q, err := sqlserver.Queries(renamed)
	if err != nil {
		t.Fatal(err)
	}
	names := slices.Clone(q.OutboxClaim.Names())
	slices.Sort(names)
	if want := []string{"after", "continue_keys", "lease_ms", "limit", "max_heads", "settled", "token", "walk"}; !slices.Equal(names, want) {
		t.Fatalf("the claim's parameters are %v, want %v", names, want)
	}
	claim := q.OutboxClaim.SQL()
	for _, want := range []string{
		// the continued keys, each once, in the order given
		"FROM OPENJSON(@continue_keys) AS j\n GROUP BY",
		"ORDER BY c.n;",
		// a continued key's head: its first pending or processing row,
		// found without a lock, then locked and checked
		"WHERE h.[message_key] = c.k AND h.[status] IN (N'pending', N'processing')\n               ORDER BY h.[seq_no]) AS f\n  JOIN [app].[events_out] AS x WITH (UPDLOCK, READPAST, ROWLOCK) ON x.[id] = f.id",
		// the walks
		"IF @walk = 0\n", "ORDER BY o.[scheduled_at];",
		"IF @walk = 1\nBEGIN",
		"AND o.[message_key] > @after\n",
		"AND o.[message_key] > N'' AND o.[message_key] <= @after\n",
		"ORDER BY o.[message_key], o.[seq_no];",
		"AND (o.[message_key] IS NULL OR o.[message_key] = N'')\n     ORDER BY o.[seq_no];",
		// a walked head is never one of a continued key's
		"o.[message_key] NOT IN (SELECT k FROM @keys)",
		// the cursor, returned with every row
		"DECLARE @cursor NVARCHAR(255) = (SELECT MAX(k) FROM @heads WHERE walked = 1);",
		"inserted.[created_at], @cursor\n",
	} {
		if !strings.Contains(claim, want) {
			t.Errorf("the claim lacks %q:\n%s", want, claim)
		}
	}
	// Nothing but the two walks walks: WalkNone takes the continued heads
	// and their followers only.
	if n := strings.Count(claim, "IF @walk"); n != 2 {
		t.Errorf("the claim tests the walk %d times, want 2 (schedule, keys)", n)
	}
}

// The claim's arguments: the walk as dialects.ClaimWalk numbers it, the
// cursor for a walk by key only, the continued keys in order, the gate's
// watermark or NULL; the bounds and the keys' positions do not travel.
func TestClaimArgs(t *testing.T) {
	d := openOffline(t)
	tok := uuid.New()
	args := func(p dialects.ClaimParams) map[string]any {
		t.Helper()
		p.Limit, p.Lease, p.Token = 10, 30*time.Second, tok
		out := map[string]any{}
		for _, a := range d.ClaimArgs(p) {
			n, ok := a.(sql.NamedArg)
			if !ok {
				t.Fatalf("argument %v is not bound by name", a)
			}
			out[n.Name] = n.Value
		}
		return out
	}
	cont := []dialects.KeyPosition{{Key: "b", After: 7}, {Key: `a"`, After: 3}}
	byKey := args(dialects.ClaimParams{Walk: dialects.WalkKeys, After: "m", MaxHeads: 4, Continue: cont,
		Gate: &dialects.Gate{Settled: 42}, Bounds: &dialects.Bounds{Rewinds: 1, Lookback: time.Second}})
	want := map[string]any{"limit": 10, "lease_ms": int32(30000), "token": tok.String(), "max_heads": 4, "settled": int64(42),
		"continue_keys": `["b","a\""]`, "walk": 1, "after": "m"}
	for k, v := range want {
		if byKey[k] != v {
			t.Errorf("by key: @%s = %#v, want %#v", k, byKey[k], v)
		}
	}
	if len(byKey) != len(want) {
		t.Errorf("by key: %d arguments, want %d: %v", len(byKey), len(want), byKey)
	}
	schedule := args(dialects.ClaimParams{After: "m"})
	if schedule["walk"] != 0 || schedule["after"] != "" || schedule["settled"] != nil || schedule["continue_keys"] != "[]" || schedule["max_heads"] != 10 {
		t.Errorf("in schedule order: %v; want walk 0, no cursor, no gate, no keys, heads up to the limit", schedule)
	}
	if none := args(dialects.ClaimParams{Walk: dialects.WalkNone, After: "m", Continue: cont}); none["walk"] != 2 || none["after"] != "" {
		t.Errorf("no walk: %v; want walk 2 and no cursor", none)
	}
	if _, err := d.OutboxClaim(context.Background(), dialects.ClaimParams{Limit: 1, Walk: 7}); err == nil || !strings.Contains(err.Error(), "unknown walk 7") {
		t.Errorf("a claim with an unknown walk: %v", err)
	}
}

// The claims ignore the relay's bounds, so the methods that serve them
// answer without a statement and without a refusal: no straggler, no
// floors, no counter to move.
func TestTheBoundsMethodsAnswerWithoutARefusal(t *testing.T) {
	d := openOffline(t)
	ctx := context.Background()
	if ago, found, err := d.OutboxStragglers(ctx, &dialects.Gate{Settled: 1}, dialects.Bounds{Lookback: time.Minute}); err != nil || found || ago != 0 {
		t.Errorf("stragglers: %s, %v, %v; want none and no error", ago, found, err)
	}
	if f, err := d.OutboxFloors(ctx, 10, dialects.Floors{Rewinds: 3, Groups: []int64{1}}); err != nil || f.Groups != nil || f.Rewinds != 0 {
		t.Errorf("floors: %+v, %v; want none at counter 0 and no error", f, err)
	}
	if err := d.OutboxRewind(ctx); err != nil {
		t.Errorf("rewind: %v", err)
	}
}

// The operator listings name the filter's parameters and their own.
func TestOperatorListingsNameTheirParameters(t *testing.T) {
	q, err := sqlserver.Queries(renamed)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]interface {
		SQL() string
		Names() []string
	}{"OutboxSelect": &q.OutboxSelect, "OutboxList": &q.OutboxList} {
		for _, want := range []string{"OPENJSON(@states)", "OPENJSON(@ids)", "[message_key] = @key", "[updated_at] >= @since",
			"[updated_at] < @until", "LOWER(@error_text)", "SELECT TOP (@limit)"} {
			if !strings.Contains(s.SQL(), want) {
				t.Errorf("%s lacks %q:\n%s", name, want, s.SQL())
			}
		}
		if strings.Contains(s.SQL(), "@p") {
			t.Errorf("%s numbers a parameter:\n%s", name, s.SQL())
		}
	}
	if !strings.Contains(q.OutboxList.SQL(), "[updated_at] = @after_updated_at AND [seq_no] < @after_sequence") {
		t.Errorf("the listing does not go on after its cursor:\n%s", q.OutboxList.SQL())
	}
}
