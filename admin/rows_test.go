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
	c, err := d.OutboxClaim(ctx, dialects.ClaimParams{Limit: 10, Lease: time.Minute, Token: uuid.New()})
	claimed := c.Rows
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
	list, err := DeadRows(ctx, d, f, "", 100, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows := list.Rows
	if len(rows) != 2 || list.More || rows[0].State != "dead" || rows[0].LastError == nil || !strings.Contains(*rows[0].LastError, "HTTP 410") ||
		rows[0].Try != 1 || rows[0].MaxTries != 6 {
		t.Fatalf("dead rows of order.*: %+v", list)
	}
	if list, _ := DeadRows(ctx, d, dialects.Filter{}, "", 2, nil, nil); len(list.Rows) != 2 || !list.More {
		t.Errorf("the limit: %+v; want 2 rows, and more", list)
	}
	if list, _ := DeadRows(ctx, d, dialects.Filter{}, "", 3, nil, nil); len(list.Rows) != 3 || list.More {
		t.Errorf("a limit of exactly the dead rows: %+v; want 3 rows, and no more", list)
	}
	// --error-contains ignores case; --destination keeps the rows the
	// routes send there.
	f, _ = FilterText{ErrorContains: "http 410: GONE"}.Filter(Flags, ForDeadRows, time.Now())
	if list, _ := DeadRows(ctx, d, f, "", 100, nil, nil); len(list.Rows) != 3 {
		t.Errorf("error text in another case: %d rows, want 3", len(list.Rows))
	}
	routeOf := func(topic string) (string, string) {
		if strings.HasPrefix(topic, "order.") {
			return "orders", "orders-webhook"
		}
		return "", ""
	}
	list, _ = DeadRows(ctx, d, dialects.Filter{}, "orders-webhook", 100, routeOf, TargetsFromRouteOf(routeOf))
	if len(list.Rows) != 2 || list.Rows[0].Destination != "orders-webhook" || list.Rows[1].Topic != "order.created" {
		t.Errorf("--destination orders-webhook: %+v", list.Rows)
	}
	f, _ = FilterText{Key: "cust-1"}.Filter(Flags, ForDeadRows, time.Now())
	if list, _ := DeadRows(ctx, d, f, "orders-webhook", 100, routeOf, TargetsFromRouteOf(routeOf)); len(list.Rows) != 1 {
		t.Errorf("--destination with --key: %d rows, want 1", len(list.Rows))
	}

	// A replay from a JSON body: the dry run counts and changes nothing.
	req, err := ReplayFromJSON(strings.NewReader(`{"topic": "order.#", "errorContains": "410", "dryRun": true}`), time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := Replay(ctx, d, req.Filter, req.DryRun, ""); n != 2 || err != nil {
		t.Fatalf("dry run: %d %v", n, err)
	}
	if st, _ := Status(ctx, d); st.Rows[dialects.Dead] != 3 {
		t.Fatalf("the dry run changed rows: %v", st.Rows)
	}
	if n, err := Replay(ctx, d, req.Filter, false, ""); n != 2 || err != nil {
		t.Fatalf("replay: %d %v", n, err)
	}
	if st, _ := Status(ctx, d); st.Rows[dialects.Dead] != 1 || st.Rows[dialects.Pending] != 3 {
		t.Fatalf("after the replay: %v", st.Rows)
	}
	// A delivered row comes back only when asked for by state.
	f, _ = FilterText{States: []string{"delivered"}}.Filter(Flags, ForReplay, time.Now())
	if n, err := Replay(ctx, d, f, false, ""); n != 1 || err != nil {
		t.Fatalf("replay delivered: %d %v", n, err)
	}
}
