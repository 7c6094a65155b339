package admin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// outbox returns a migrated outbox in a fresh schema with three dead rows
// (two order.created, one user.created) and one delivered and one pending.
func outbox(t *testing.T) dialects.Dialect {
	t.Helper()
	ctx := context.Background()
	d := testdb.Migrated(t, 0)
	rows := []dialects.NewRow{
		testkit.Row("order.created", testkit.Key("cust-1")),
		testkit.Row("order.created"),
		testkit.Row("user.created"),
		testkit.Row("order.paid"),
	}
	if err := d.OutboxInsert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	claimed, err := d.OutboxClaim(ctx, dialects.ClaimParams{Limit: 10, Lease: time.Minute, Token: uuid.New()})
	if err != nil || len(claimed) != 4 {
		t.Fatalf("claim: %d rows, %v", len(claimed), err)
	}
	var outcomes []dialects.Outcome
	for _, r := range claimed {
		o := dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeDead, Error: "HTTP 410: gone"}
		if r.Topic == "order.paid" {
			o = dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeDelivered}
		}
		outcomes = append(outcomes, o)
	}
	if _, err := d.OutboxComplete(ctx, outcomes); err != nil {
		t.Fatal(err)
	}
	if err := d.OutboxInsert(ctx, []dialects.NewRow{testkit.Row("later")}); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestStatusDeadRowsAndReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := outbox(t)
	st, err := Status(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows[dialects.Dead] != 3 || st.Rows[dialects.Delivered] != 1 || st.Rows[dialects.Pending] != 1 || st.Rows[dialects.Processing] != 0 {
		t.Errorf("rows: %v", st.Rows)
	}
	if got := st.DeadTopics(); len(got) != 2 || got[0] != "order.created" || st.DeadByTopic["order.created"] != 2 {
		t.Errorf("dead topics: %v %v", got, st.DeadByTopic)
	}

	f, err := FilterText{Topic: "order.*"}.Filter(Flags, ForDeadRows, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rows, err := DeadRows(ctx, d, f, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].State != dialects.Dead || rows[0].LastError == nil || !strings.Contains(*rows[0].LastError, "HTTP 410") {
		t.Fatalf("dead rows of order.*: %+v", rows)
	}
	if rows, _ := DeadRows(ctx, d, dialects.Filter{}, 1); len(rows) != 1 {
		t.Errorf("the limit: %d rows", len(rows))
	}

	// A replay from a JSON body: the dry run counts and changes nothing.
	req, err := ReplayFromJSON(strings.NewReader(`{"topic": "order.#", "errorContains": "410", "dryRun": true}`), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if n, err := Replay(ctx, d, req.Filter, req.DryRun); n != 2 || err != nil {
		t.Fatalf("dry run: %d %v", n, err)
	}
	if st, _ := Status(ctx, d); st.Rows[dialects.Dead] != 3 {
		t.Fatalf("the dry run changed rows: %v", st.Rows)
	}
	if n, err := Replay(ctx, d, req.Filter, false); n != 2 || err != nil {
		t.Fatalf("replay: %d %v", n, err)
	}
	if st, _ := Status(ctx, d); st.Rows[dialects.Dead] != 1 || st.Rows[dialects.Pending] != 3 {
		t.Fatalf("after the replay: %v", st.Rows)
	}
	// A delivered row comes back only when asked for by state.
	f, _ = FilterText{States: []string{"delivered"}}.Filter(Flags, ForReplay, time.Now())
	if n, err := Replay(ctx, d, f, false); n != 1 || err != nil {
		t.Fatalf("replay delivered: %d %v", n, err)
	}
}
