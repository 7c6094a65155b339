package admin

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
)

// fanOutTargets routes order.* to three destinations (a fan-out) and
// invoice.* to the ledger alone.
func fanOutTargets(topic string) []string {
	switch {
	case strings.HasPrefix(topic, "order."):
		return []string{"orders-webhook", "ledger", "crm"}
	case strings.HasPrefix(topic, "invoice."):
		return []string{"ledger"}
	}
	return nil
}

func fanOutRouteOf(topic string) (string, string) {
	switch ds := fanOutTargets(topic); {
	case len(ds) > 1:
		return "orders", ds[0]
	case len(ds) == 1:
		return "invoices", ds[0]
	}
	return "", ""
}

// fanOutRow inserts an order row and ends its pass as the relay does:
// delivered, orders-webhook delivered with it, the ledger dead (HTTP
// 410), the crm to be retried in an hour (HTTP 503). It returns the row's
// id.
func fanOutRow(t *testing.T, d dialects.Dialect, key string) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	id := uuid.New()
	if err := d.OutboxInsert(ctx, []dialects.NewRow{testkit.Row("order.created", testkit.Key(key), testkit.ID(id))}); err != nil {
		t.Fatal(err)
	}
	// The other pending rows the claim takes go back untouched.
	c, err := d.OutboxClaim(ctx, dialects.ClaimParams{Limit: 100, Lease: time.Minute, Token: uuid.New()})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	var outcomes []dialects.Outcome
	for _, r := range c.Rows {
		o := dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeRelease}
		if r.ID == id {
			o = dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeDelivered, Copies: []dialects.Copy{
				{Destination: "ledger", Kind: dialects.CopyDead, Attempt: 0, Error: "HTTP 410 Gone: order " + id.String() + " is gone"},
				{Destination: "crm", Kind: dialects.CopyRetry, Attempt: 1, Delay: time.Hour, Error: "HTTP 503 Service Unavailable: crm down"},
			}}
		}
		outcomes = append(outcomes, o)
	}
	if _, err := d.OutboxComplete(ctx, outcomes); err != nil {
		t.Fatal(err)
	}
	return id
}

// fanOutServer serves the admin routes over d with the fan-out routes.
func fanOutServer(t *testing.T, d dialects.Dialect) (*Server, *httptest.Server) {
	t.Helper()
	var dests []DestinationInfo
	for _, n := range []string{"orders-webhook", "ledger", "crm"} {
		dests = append(dests, DestinationInfo{Name: n, Type: "http"})
	}
	s := NewServer(Options{Dialect: d, CountInterval: 50 * time.Millisecond, ThroughputStep: 50 * time.Millisecond,
		RouteOf: fanOutRouteOf, Routes: TargetsOf(fanOutTargets), Destinations: dests, History: true,
		FinalStatus: func(destination string, status int) bool { return destination == "ledger" && status == 410 }})
	s.Start(context.Background())
	t.Cleanup(s.Stop)
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return s, hs
}

// A fan-out row's detail lists each destination: the one delivered in the
// pass as delivered with the row, the others with their copies' state,
// tries, due time and last error.
func TestRowDetailListsEachDestination(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 0)
	id := fanOutRow(t, d, "cust-1")
	v, found, err := RowDetail(context.Background(), d, id, fanOutRouteOf, TargetsOf(fanOutTargets))
	if err != nil || !found {
		t.Fatal(found, err)
	}
	if len(v.Destinations) != 3 {
		t.Fatalf("destinations %+v", v.Destinations)
	}
	hook, ledger, crm := v.Destinations[0], v.Destinations[1], v.Destinations[2]
	if hook.Destination != "orders-webhook" || hook.State != "delivered" || !hook.WithRow || hook.CopyID != nil {
		t.Errorf("orders-webhook %+v", hook)
	}
	if ledger.Destination != "ledger" || ledger.State != "dead" || ledger.WithRow || ledger.CopyID == nil || ledger.LastError == nil ||
		!strings.Contains(*ledger.LastError, "HTTP 410") || ledger.DueAt != nil {
		t.Errorf("ledger %+v", ledger)
	}
	if crm.Destination != "crm" || crm.State != "pending" || crm.Attempt != 1 || crm.Try != 2 || crm.DueAt == nil ||
		time.Until(*crm.DueAt) < 50*time.Minute {
		t.Errorf("crm %+v", crm)
	}
	var b bytes.Buffer
	if err := v.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"destination     orders-webhook, ledger, crm (route orders)", "orders-webhook  delivered (with the row)",
		"ledger          dead (copy)", "crm             pending (copy)", "try 2 of 6, attempt 1", "HTTP 503 Service Unavailable: crm down"} {
		if !strings.Contains(out, want) {
			t.Errorf("rows show lacks %q:\n%s", want, out)
		}
	}

	// A row of a route to one destination, without copies, lists none.
	if err := d.OutboxInsert(context.Background(), []dialects.NewRow{testkit.Row("invoice.sent")}); err != nil {
		t.Fatal(err)
	}
	rows, _, _ := dialects.List(context.Background(), d, dialects.Filter{States: []dialects.State{dialects.Pending}}, nil, 10)
	if len(rows) != 1 {
		t.Fatalf("pending rows %+v", rows)
	}
	v, _, err = RowDetail(context.Background(), d, rows[0].ID, fanOutRouteOf, TargetsOf(fanOutTargets))
	if err != nil || v.Destinations != nil {
		t.Errorf("a row of one destination: %+v %v", v.Destinations, err)
	}
}

// dead list shows dead copies next to dead rows, each with its
// destination, and --destination keeps one destination's.
func TestDeadRowsListDeadCopies(t *testing.T) {
	t.Parallel()
	d := outbox(t) // three dead rows: two order.created, one user.created
	id := fanOutRow(t, d, "cust-2")
	ctx := context.Background()
	list, err := DeadRows(ctx, d, dialects.Filter{}, "", 100, fanOutRouteOf, TargetsOf(fanOutTargets))
	if err != nil {
		t.Fatal(err)
	}
	var copies []RowView
	for _, r := range list.Rows {
		if r.CopyID != nil {
			copies = append(copies, r)
		}
	}
	if len(list.Rows) != 4 || len(copies) != 1 || copies[0].ID != id || copies[0].Destination != "ledger" || copies[0].State != "dead" {
		t.Fatalf("dead rows and copies: %+v", list.Rows)
	}
	list, _ = DeadRows(ctx, d, dialects.Filter{}, "ledger", 100, fanOutRouteOf, TargetsOf(fanOutTargets))
	// The two dead order rows route to the ledger too (a fan-out route), and
	// the ledger's copy.
	if len(list.Rows) != 3 || list.Rows[0].CopyID == nil {
		t.Errorf("--destination ledger: %+v", list.Rows)
	}
	if list, _ = DeadRows(ctx, d, dialects.Filter{}, "crm", 100, fanOutRouteOf, TargetsOf(fanOutTargets)); len(list.Rows) != 2 {
		t.Errorf("--destination crm (its copy is pending): %+v", list.Rows)
	}
	var b bytes.Buffer
	if err := (DeadList{Rows: copies, Limit: 100}).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, id.String()+"  copy  order.created") || !strings.Contains(out, "replay it with `queuebox replay --destination DESTINATION --id ID`") {
		t.Errorf("dead list text:\n%s", out)
	}

	gs, err := GroupDead(ctx, d, fanOutRouteOf, func(dest string, status int) bool { return dest == "ledger" && status == 410 }, DeadGroupWindow)
	if err != nil {
		t.Fatal(err)
	}
	g, ok := gs.Group(CopyGroupID("ledger", "HTTP 410 Gone: order <id> is gone"))
	if !ok || !g.Copies || g.Rows != 1 || len(g.IDs) != 1 || g.IDs[0] != id || g.ReplayWarning == nil || gs.CopiesGrouped != 1 {
		t.Errorf("the ledger's copies group: %+v %v in %+v", g, ok, gs)
	}
}

// A replay with a destination replays its copies only; with the delivered
// state it backfills the delivered fan-out rows that have no copy of it.
func TestReplayDestination(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 0)
	ctx := context.Background()
	id := fanOutRow(t, d, "cust-3")
	state := func(dest string) string {
		v, _, err := RowDetail(ctx, d, id, fanOutRouteOf, TargetsOf(fanOutTargets))
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range v.Destinations {
			if x.Destination == dest {
				return fmt.Sprintf("%s/%v", x.State, x.WithRow)
			}
		}
		return "none"
	}
	f, err := FilterText{Topic: "order.#"}.Filter(Flags, ForReplay, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := ReplayDestination(ctx, d, f, "ledger", TargetsOf(fanOutTargets), true, "")
	if err != nil || res != (ReplayResult{Copies: 1}) || state("ledger") != "dead/false" {
		t.Fatalf("dry run: %+v %v, ledger %s", res, err, state("ledger"))
	}
	res, err = ReplayDestination(ctx, d, f, "ledger", TargetsOf(fanOutTargets), false, "test")
	if err != nil || res != (ReplayResult{Copies: 1}) {
		t.Fatalf("replay: %+v %v", res, err)
	}
	if state("ledger") != "pending/false" || state("crm") != "pending/false" || state("orders-webhook") != "delivered/true" {
		t.Errorf("after the replay: ledger %s, crm %s, orders-webhook %s", state("ledger"), state("crm"), state("orders-webhook"))
	}
	if st := rowCounts(t, d); st[dialects.Delivered] != 1 || st[dialects.Pending] != 0 {
		t.Errorf("the row itself changed: %v", st)
	}

	// orders-webhook delivered with the row: a backfill gives it a copy.
	f, _ = FilterText{States: []string{"delivered"}, Topic: "order.#"}.Filter(Flags, ForReplay, time.Now())
	res, err = ReplayDestination(ctx, d, f, "orders-webhook", TargetsOf(fanOutTargets), true, "")
	if err != nil || res != (ReplayResult{Backfilled: 1}) {
		t.Fatalf("backfill dry run: %+v %v", res, err)
	}
	res, err = ReplayDestination(ctx, d, f, "orders-webhook", TargetsOf(fanOutTargets), false, "test")
	if err != nil || res != (ReplayResult{Backfilled: 1}) || state("orders-webhook") != "pending/false" {
		t.Fatalf("backfill: %+v %v, orders-webhook %s", res, err, state("orders-webhook"))
	}
	if res, _ = ReplayDestination(ctx, d, f, "orders-webhook", TargetsOf(fanOutTargets), false, "test"); res != (ReplayResult{}) {
		t.Errorf("a second backfill: %+v", res)
	}
}

// /api/rows lists copies with their destination; the row detail lists the
// destinations; POST /api/replay takes a destination and refuses one the
// configuration does not have; /api/stats and queuebox_copies count the
// copies per destination and state.
func TestCopiesThroughTheAPI(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 0)
	id := fanOutRow(t, d, "cust-4")
	s, hs := fanOutServer(t, d)

	var rows RowsView
	call(t, hs, "GET", "/api/rows?state=dead&state=pending&state=delivered", "").json(t, &rows)
	byDest := map[string]RowView{}
	for _, r := range rows.Rows {
		key := "row"
		if r.CopyID != nil {
			key = r.Destination
		}
		byDest[key] = r
	}
	if len(rows.Rows) != 3 || byDest["row"].State != "delivered" || byDest["ledger"].State != "dead" || byDest["crm"].State != "pending" ||
		byDest["ledger"].ID != id || rows.Next != nil {
		t.Errorf("GET /api/rows: %+v", rows)
	}
	rows = RowsView{}
	call(t, hs, "GET", "/api/rows?destination=ledger", "").json(t, &rows)
	if len(rows.Rows) != 1 || rows.Rows[0].CopyID == nil || rows.Rows[0].Destination != "ledger" {
		t.Errorf("GET /api/rows?destination=ledger: %+v", rows)
	}
	// One entry a page: the row and its copies share a position, so a page
	// never ends between them.
	rows = RowsView{}
	call(t, hs, "GET", "/api/rows?state=dead&state=pending&state=delivered&limit=1", "").json(t, &rows)
	if len(rows.Rows) != 3 || rows.Next != nil {
		t.Errorf("a page of one: %+v", rows)
	}

	var detail RowDetailView
	call(t, hs, "GET", "/api/rows/"+id.String(), "").json(t, &detail)
	if len(detail.Destinations) != 3 || !detail.Destinations[0].WithRow || detail.Destinations[1].State != "dead" {
		t.Errorf("GET /api/rows/{id}: %+v", detail.Destinations)
	}

	v := counted(t, hs, func(v StatsView) bool { return len(v.Copies) == 2 })
	if c := v.Copies[0]; c.Destination != "crm" || c.Copies["pending"] != 1 || c.Copies["dead"] != 0 || c.Copies["delivered"] != 0 {
		t.Errorf("crm's copies: %+v", c)
	}
	if c := v.Copies[1]; c.Destination != "ledger" || c.Copies["dead"] != 1 {
		t.Errorf("the ledger's copies: %+v", c)
	}
	if got := testutil.ToFloat64(s.o.Metrics.copies.WithLabelValues("ledger", "dead")); got != 1 {
		t.Errorf(`queuebox_copies{destination="ledger",state="dead"} = %v`, got)
	}
	scraped(t, hs, map[string]func(float64) bool{
		`queuebox_copies{destination="crm",outbox="default",state="pending"}`: is(1),
		`queuebox_copies{destination="crm",outbox="default",state="dead"}`:    is(0),
	})

	a := call(t, hs, "POST", "/api/replay", `{"destination": "billing", "ids": ["`+id.String()+`"]}`, "Content-Type", "application/json")
	expect(t, a, 400, `destination "billing": is not a destination of the configuration; the destinations are crm, ledger, orders-webhook`)
	a = call(t, hs, "POST", "/api/replay", `{"destination": "ledger", "ids": ["`+id.String()+`"], "dryRun": true}`, "Content-Type", "application/json")
	expect(t, a, 200, `"copies": 1`, `"destination": "ledger"`, `"dryRun": true`)
	a = call(t, hs, "POST", "/api/replay", `{"destination": "ledger"}`, "Content-Type", "application/json")
	expect(t, a, 200, `"copies": 1`, `"rows": 0`)
	counted(t, hs, func(v StatsView) bool {
		return len(v.Copies) == 2 && v.Copies[1].Copies["dead"] == 0 && v.Copies[1].Copies["pending"] == 1
	})
}

// Two listings merge newest first; a page never ends between entries at
// the same position (a row and the copies written with it).
func TestMergeNewestKeepsTiesTogether(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	v := func(sec int, seq int64, dest string) RowView {
		return RowView{UpdatedAt: at.Add(time.Duration(sec) * time.Second), Sequence: seq, Destination: dest}
	}
	rows := []RowView{v(9, 5, "row"), v(5, 3, "row")}
	copies := []RowView{v(9, 5, "ledger"), v(9, 5, "crm"), v(1, 2, "crm")}
	got, more := mergeNewest(rows, copies, 1)
	if len(got) != 3 || !more || got[0].Sequence != 5 || got[2].Sequence != 5 {
		t.Errorf("a page of 1: %+v, more %v", got, more)
	}
	got, more = mergeNewest(rows, copies, 4)
	if len(got) != 4 || !more || got[3].Sequence != 3 {
		t.Errorf("a page of 4: %+v, more %v", got, more)
	}
	if got, more = mergeNewest(rows, copies, 10); len(got) != 5 || more || got[4].Sequence != 2 {
		t.Errorf("everything: %+v, more %v", got, more)
	}
}

// The copies a completion writes are counted per destination and reason,
// under each outbox's label.
func TestCopiesWrittenAreCounted(t *testing.T) {
	m := NewMetrics(nil)
	m.CopiesWritten("crm", dialects.CopyRetry, 2)
	m.CopiesWritten("crm", dialects.CopyBehind, 3)
	m.ForOutbox("billing").CopiesWritten("ledger", dialects.CopyDead, 1)
	want := `
# HELP queuebox_copies_written_total Copies this replica wrote for destinations of fan-out rows whose delivery did not end well in the row's pass, by outbox, destination and reason (retry: it failed and is tried again; defer: the destination was paused, its circuit open or its flow full; behind: earlier copies of the key wait there; dead).
# TYPE queuebox_copies_written_total counter
queuebox_copies_written_total{destination="crm",outbox="default",reason="behind"} 3
queuebox_copies_written_total{destination="crm",outbox="default",reason="retry"} 2
queuebox_copies_written_total{destination="ledger",outbox="billing",reason="dead"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "queuebox_copies_written_total"); err != nil {
		t.Error(err)
	}
}
