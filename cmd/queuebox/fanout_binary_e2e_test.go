package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/admin"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testnats"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// A route to an HTTP endpoint and to NATS JetStream, through the binary:
// while the NATS server is down, the endpoint receives every row, in key
// order; once it is back, the stream receives every row too, in key order;
// no row and no copy ends dead, and each destination got the row's id as
// its message id.
func TestFanOutToHTTPAndNATSWhileNATSIsDown(t *testing.T) {
	t.Parallel()
	ns := testnats.Start(t)
	subject := testnats.Unique("fan")
	stream := ns.NewStream(t, testnats.Unique("FAN"), subject+".>")
	recv := testrecv.New(t, nil)
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
outbox:
  pollIntervalMs: 100
  backoff: { initialMs: 200, multiplier: 2, maxMs: 1000 }
destinations:
  hook: { type: http, url: "%s/{{ topic }}" }
  events: { type: nats, url: %q, subject: "%s.{{ topic }}" }
routes:
  - { topicPattern: "order.#", destinations: [hook, events] }
admin: { listen: "127.0.0.1:0" }
`, dbURL, recv.URL, ns.URL, subject))
	if out, stderr, code := run(t, "migrate", "--config", cfg); code != 0 {
		t.Fatalf("migrate: exit %d\n%s%s", code, out, stderr)
	}
	d := openPostgres(t, dbURL)
	ctx := context.Background()
	r := startRelay(t, "--config", cfg)
	r.pageURL(t) // listening, so started

	ns.Stop(t)
	const n, keys = 300, 12
	var want []dialects.NewRow
	for i := range n {
		want = append(want, testkit.Row("order.updated", testkit.Key(fmt.Sprintf("k%02d", i%keys)), testkit.PayloadOf(map[string]int{"i": i})))
	}
	for i := 0; i < n; i += 50 {
		if err := d.OutboxInsert(ctx, want[i:i+50]); err != nil {
			t.Fatal(err)
		}
	}
	recv.WaitDelivered(t, n, time.Minute)
	if got := len(stream.Messages()); got != 0 {
		t.Fatalf("the stream holds %d messages while its server was down", got)
	}
	if dups := recv.CheckOrder(t); dups != 0 {
		t.Errorf("the endpoint received %d rows twice", dups)
	}

	ns.Start(t)
	testkit.Eventually(t, "every row in the stream", 2*time.Minute, func() error {
		if got := distinctIDs(stream); got < n {
			return fmt.Errorf("%d of %d rows in the stream\n%s", got, n, tail(r.log(), 2000))
		}
		return nil
	})
	// Key order at the stream: the first arrival of each row follows
	// sequence order per key.
	last := map[string]int64{}
	seen := map[string]bool{}
	for _, m := range stream.Messages() {
		id := m.Header.Get("X-Message-Id")
		if seen[id] {
			continue
		}
		seen[id] = true
		key := m.Header.Get("X-Key")
		seq, _ := strconv.ParseInt(m.Header.Get("X-Sequence"), 10, 64)
		if seq < last[key] {
			t.Errorf("key %s: sequence %d reached the stream after %d", key, seq, last[key])
		}
		last[key] = seq
	}
	testkit.Eventually(t, "every row and copy delivered", 30*time.Second, func() error {
		var rows, copies int64
		if err := d.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox WHERE state <> 'delivered'), (SELECT count(*) FROM outbox_copies WHERE state <> 'delivered')`).Scan(&rows, &copies); err != nil {
			return err
		}
		if rows != 0 || copies != 0 {
			return fmt.Errorf("%d rows and %d copies not delivered", rows, copies)
		}
		return nil
	})
	var copied int64
	if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM outbox_copies WHERE destination = 'events'`).Scan(&copied); err != nil || copied == 0 {
		t.Errorf("no row was copied for the stream while its server was down (%d, %v)", copied, err)
	}
	var other int64
	if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM outbox_copies WHERE destination <> 'events'`).Scan(&other); err != nil || other != 0 {
		t.Errorf("the endpoint, which never failed, has %d copies (%v)", other, err)
	}
}

// distinctIDs counts the distinct message ids a stream holds.
func distinctIDs(st *testnats.Stream) int {
	ids := map[string]bool{}
	for _, m := range st.Messages() {
		ids[m.Header.Get("X-Message-Id")] = true
	}
	return len(ids)
}

// A filter splits rows between two routes of one pattern exactly: each row
// reaches the destination of the first route whose filter accepts it, and
// no other; a row the filter fails on goes dead with the filter's error.
func TestAFilterSplitsRowsBetweenTwoRoutesThroughTheBinary(t *testing.T) {
	t.Parallel()
	large, small := testrecv.New(t, nil), testrecv.New(t, nil)
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
outbox: { pollIntervalMs: 100 }
destinations:
  large: { type: http, url: "%s/large" }
  small: { type: http, url: "%s/small" }
routes:
  - { topicPattern: "payment.#", filter: "(.amount | tonumber) >= 100", destination: large }
  - { topicPattern: "payment.#", destination: small }
admin: { listen: "127.0.0.1:0" }
`, dbURL, large.URL, small.URL))
	if out, stderr, code := run(t, "migrate", "--config", cfg); code != 0 {
		t.Fatalf("migrate: exit %d\n%s%s", code, out, stderr)
	}
	d := openPostgres(t, dbURL)
	ctx := context.Background()
	var rows []dialects.NewRow
	var wantLarge, wantSmall []int
	for i := range 200 {
		amount := (i * 37) % 250
		if amount >= 100 {
			wantLarge = append(wantLarge, i)
		} else {
			wantSmall = append(wantSmall, i)
		}
		rows = append(rows, testkit.Row("payment.made", testkit.Key(fmt.Sprintf("acct-%d", i%7)), testkit.PayloadOf(map[string]int{"i": i, "amount": amount})))
	}
	// tonumber fails on an object: the filter cannot say.
	bad := uuid.New()
	rows = append(rows, testkit.Row("payment.made", testkit.ID(bad), testkit.Payload(`{"i": -1, "amount": {"currency": "EUR"}}`)))
	if err := d.OutboxInsert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	r := startRelay(t, "--config", cfg)
	large.WaitDelivered(t, len(wantLarge), time.Minute)
	small.WaitDelivered(t, len(wantSmall), time.Minute)
	testkit.Eventually(t, "the row the filter fails on dead", 30*time.Second, func() error {
		var state, lastErr string
		if err := d.Pool().QueryRow(ctx, `SELECT state, coalesce(last_error, '') FROM outbox WHERE id = $1`, bad).Scan(&state, &lastErr); err != nil {
			return err
		}
		if state != "dead" || !strings.Contains(lastErr, `route "payment.#"`) && !strings.Contains(lastErr, "filter") {
			return fmt.Errorf("%s: %s", state, lastErr)
		}
		return nil
	})
	got := func(rv *testrecv.Receiver) []int {
		var out []int
		seen := map[string]bool{}
		for _, q := range rv.Requests() {
			if !seen[q.ID] {
				seen[q.ID] = true
				out = append(out, testrecv.JSONField(q.Body, "i"))
			}
		}
		sort.Ints(out)
		return out
	}
	if g := got(large); fmt.Sprint(g) != fmt.Sprint(wantLarge) {
		t.Errorf("large received %v, want %v", g, wantLarge)
	}
	if g := got(small); fmt.Sprint(g) != fmt.Sprint(wantSmall) {
		t.Errorf("small received %v, want %v", g, wantSmall)
	}
	for name, rv := range map[string]*testrecv.Receiver{"large": large, "small": small} {
		if dups := rv.CheckOrder(t); dups != 0 {
			t.Errorf("%s received %d rows twice", name, dups)
		}
	}
	var dead int64
	if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state = 'dead'`).Scan(&dead); err != nil || dead != 1 {
		t.Errorf("%d dead rows, want the one the filter failed on (%v)\n%s", dead, err, tail(r.log(), 2000))
	}
}

// Two routes of one pattern, split by a filter: large payments fan out to
// large and ledger, the others go to small. The commands that select by
// destination run the filter on each row: dead list and replay with
// --destination take the rows that went to that destination and no
// other, and a backfill to ledger gives copies to the large payments only.
func TestCommandsThatSelectByDestinationRunTheRouteFilters(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	failing.Store(true)
	answer := func(*testrecv.Request) (int, string, map[string]string) {
		if failing.Load() {
			return 410, "gone for now", nil
		}
		return 204, "", nil
	}
	large, small, ledger := testrecv.New(t, answer), testrecv.New(t, answer), testrecv.New(t, nil)
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
outbox: { pollIntervalMs: 100 }
destinations:
  large: { type: http, url: "%s/large", nonRetryableStatus: [410] }
  small: { type: http, url: "%s/small", nonRetryableStatus: [410] }
  ledger: { type: http, url: "%s/ledger" }
routes:
  - { name: large payments, topicPattern: "payment.#", filter: ".amount >= 100", destinations: [large, ledger] }
  - { name: other payments, topicPattern: "payment.#", destination: small }
`, dbURL, large.URL, small.URL, ledger.URL))
	if out, stderr, code := run(t, "migrate", "--config", cfg); code != 0 {
		t.Fatalf("migrate: exit %d\n%s%s", code, out, stderr)
	}
	d := openPostgres(t, dbURL)
	ctx := context.Background()
	var rows []dialects.NewRow
	isLarge := map[uuid.UUID]bool{}
	nLarge, nSmall := 0, 0
	for i := range 30 {
		id, amount := uuid.New(), (i*41)%200
		isLarge[id] = amount >= 100
		if isLarge[id] {
			nLarge++
		} else {
			nSmall++
		}
		// A key's rows stay on one side of the split: in a key that has
		// fan-out rows, a row to one destination is delivered in its lane
		// and a failure leaves a copy, where here it leaves a dead row.
		key := fmt.Sprintf("acct-%d", i%4)
		if isLarge[id] {
			key = fmt.Sprintf("big-%d", i%3)
		}
		rows = append(rows, testkit.Row("payment.made", testkit.ID(id), testkit.Key(key), testkit.PayloadOf(map[string]int{"i": i, "amount": amount})))
	}
	if err := d.OutboxInsert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	r := startRelay(t, "--config", cfg)
	// Small's rows go dead; large's part of each large payment goes dead
	// (a copy), ledger's is delivered with the row.
	ledger.WaitDelivered(t, nLarge, time.Minute)
	testkit.Eventually(t, "every small payment and every copy of large dead", time.Minute, func() error {
		st, err := d.OutboxStats(ctx)
		if err != nil {
			return err
		}
		cs, err := d.CopyCounts(ctx)
		if err != nil {
			return err
		}
		deadCopies := int64(0)
		for _, c := range cs {
			if c.Destination == "large" && c.State == dialects.Dead {
				deadCopies += c.Rows
			}
		}
		if st.Rows[dialects.Dead] != int64(nSmall) || st.Rows[dialects.Delivered] != int64(nLarge) || deadCopies != int64(nLarge) {
			return fmt.Errorf("rows %v, dead copies of large %d; small answered %d requests, large %d\n%s", st.Rows, deadCopies, len(small.Requests()), len(large.Requests()), tail(r.log(), 3000))
		}
		return nil
	})
	r.stop(t)

	deadList := func(dest string) admin.DeadList {
		t.Helper()
		out, stderr, code := run(t, "dead", "list", "--destination", dest, "--json", "--config", cfg)
		var l admin.DeadList
		if err := json.Unmarshal([]byte(out), &l); code != 0 || err != nil {
			t.Fatalf("dead list --destination %s: exit %d, %v\n%s%s", dest, code, err, out, stderr)
		}
		return l
	}
	for dest, want := range map[string]struct {
		n     int
		large bool
	}{"small": {nSmall, false}, "large": {nLarge, true}, "ledger": {0, true}} {
		l := deadList(dest)
		if len(l.Rows) != want.n {
			t.Errorf("dead list --destination %s: %d rows, want %d", dest, len(l.Rows), want.n)
		}
		for _, row := range l.Rows {
			if isLarge[row.ID] != want.large || (row.CopyID != nil) != want.large {
				t.Errorf("dead list --destination %s lists row %s (large %v, copy %v), which did not go there", dest, row.ID, isLarge[row.ID], row.CopyID != nil)
			}
		}
	}

	failing.Store(false)
	out, stderr, code := run(t, "replay", "--destination", "small", "--config", cfg)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d rows replayed", nSmall)) || !strings.Contains(out, "0 copies of small") {
		t.Errorf("replay --destination small: exit %d\n%s%s", code, out, stderr)
	}
	out, stderr, code = run(t, "replay", "--destination", "large", "--config", cfg)
	if code != 0 || !strings.Contains(out, "0 rows replayed") || !strings.Contains(out, fmt.Sprintf("%d copies of large replayed", nLarge)) {
		t.Errorf("replay --destination large: exit %d\n%s%s", code, out, stderr)
	}
	r = startRelay(t, "--config", cfg)
	small.WaitDelivered(t, nSmall, time.Minute)
	large.WaitDelivered(t, nLarge, time.Minute)
	for name, rv := range map[string]*testrecv.Receiver{"small": small, "large": large} {
		for _, q := range rv.Requests() {
			id, err := uuid.Parse(q.ID)
			if err != nil || isLarge[id] != (name == "large") {
				t.Errorf("%s received row %s, which its route does not send there", name, q.ID)
			}
		}
	}
	r.stop(t)
	if got := ledger.Delivered(); got != nLarge {
		t.Errorf("ledger received %d rows, want its %d once each", got, nLarge)
	}

	// Every payment is delivered now; ledger's part of the large ones went
	// with their rows. A backfill to ledger gives those a copy, and no
	// small payment one.
	out, stderr, code = run(t, "replay", "--destination", "ledger", "--state", "delivered", "--config", cfg)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d copies of ledger created for delivered fan-out rows that had none", nLarge)) {
		t.Errorf("backfill to ledger: exit %d\n%s%s", code, out, stderr)
	}
	var wrong int
	if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM outbox_copies c JOIN outbox o ON o.id = c.row_id WHERE c.destination = 'ledger' AND (o.payload->>'amount')::int < 100`).Scan(&wrong); err != nil || wrong != 0 {
		t.Errorf("%d small payments got a copy for ledger (%v)", wrong, err)
	}
}
