package dialecttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testkit"
)

// RunInbox runs the inbox's subtests: receiving once per source and message
// id, the relay that turns inbox rows into outbox rows, and its gate. The
// harness needs New, Exec and Begin.
func RunInbox(t *testing.T, h Harness) {
	if h.Exec == nil || h.Begin == nil {
		t.Fatal("the harness must offer Exec and Begin: the relay gate's subtests hold transactions open")
	}
	tests := []subtest{
		{"ReceiveStoresOncePerSourceAndMessageID", testReceiveOnce},
		{"ConcurrentReceiversStoreOnce", testConcurrentReceive},
		{"RelayMovesRowsInReceiveOrder", testRelayOrder},
		{"RelayLeavesAnExistingOutboxRow", testRelayExistingOutboxRow},
		{"RelayGateHoldsBackUnsettledKeyedRows", testRelayGate},
		{"RelayGateHoldsBackRowsOfOpenTransactions", testRelayGateHoldsBack},
		{"InboxWritersAreTheOpenInboxTransactions", testInboxWriters},
		{"ConcurrentRelaysRelayEachRowOnce", testConcurrentRelays},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

func msg(source, id, aggregate string, n int) dialects.InboxMessage {
	m := dialects.InboxMessage{Source: source, MessageID: id, Topic: "in." + source,
		Payload: []byte(fmt.Sprintf(`{"n":%d,"agg":%q}`, n, aggregate))}
	if aggregate != "" {
		m.AggregateID = str(aggregate)
	}
	return m
}

func receive(t *testing.T, d dialects.Dialect, msgs ...dialects.InboxMessage) []dialects.InboxReceipt {
	t.Helper()
	rs, err := d.InboxReceive(ctx(t), msgs)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	if len(rs) != len(msgs) {
		t.Fatalf("%d receipts for %d messages", len(rs), len(msgs))
	}
	return rs
}

func relay(t *testing.T, d dialects.Dialect, p dialects.InboxRelayParams) dialects.InboxRelayResult {
	t.Helper()
	r, err := d.InboxRelay(ctx(t), p)
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	return r
}

func inboxRows(t *testing.T, d dialects.Dialect) map[dialects.InboxState]int64 {
	t.Helper()
	st, err := d.InboxStats(ctx(t))
	if err != nil {
		t.Fatalf("inbox stats: %v", err)
	}
	return st.Rows
}

// claimAll claims every pending outbox row (no gate), sorted by key, then
// sequence.
func claimAll(t *testing.T, d dialects.Dialect) []dialects.Row {
	t.Helper()
	var all []dialects.Row
	for {
		rows, err := rowsOf(d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: 10000, Lease: lease, Token: uuid.New()}))
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		if len(rows) == 0 {
			dialects.SortClaimed(all)
			return all
		}
		all = append(all, rows...)
		out := make([]dialects.Outcome, len(rows))
		for i, r := range rows {
			out[i] = outcome(r, dialects.OutcomeDelivered)
		}
		complete(t, d, out...)
	}
}

func testReceiveOnce(t *testing.T, h Harness) {
	d := h.New(t, 0)
	first := receive(t, d,
		msg("web", "m1", "a", 1),
		msg("web", "m2", "", 2),
		msg("queue", "m1", "a", 3), // the same message id at another source is another message
	)
	for i, r := range first {
		if !r.Stored || r.ID == uuid.Nil {
			t.Fatalf("message %d was not stored: %+v", i, r)
		}
	}
	if first[0].ID == first[2].ID {
		t.Fatal("two sources' messages with one message id share a row")
	}
	again := receive(t, d, msg("web", "m2", "", 20), msg("web", "m1", "a", 10), msg("web", "m3", "b", 4), msg("web", "m3", "b", 5))
	want := []dialects.InboxReceipt{{ID: first[1].ID}, {ID: first[0].ID}, {ID: again[2].ID, Stored: true}, {ID: again[2].ID}}
	for i := range want {
		if again[i] != want[i] {
			t.Errorf("receipt %d: %+v, want %+v", i, again[i], want[i])
		}
	}
	if rows := inboxRows(t, d); rows[dialects.InboxReceived] != 4 || rows[dialects.InboxRelayed] != 0 {
		t.Fatalf("inbox rows %v, want 4 received", rows)
	}
	// The repeat stored nothing: the relayed row carries the first payload.
	relay(t, d, dialects.InboxRelayParams{Limit: 100, MaxAttempts: 5})
	for _, r := range claimAll(t, d) {
		if r.ID == first[0].ID && !strings.Contains(string(r.Payload), `"n": 1`) && !strings.Contains(string(r.Payload), `"n":1`) {
			t.Errorf("the first copy's payload was replaced: %s", r.Payload)
		}
		if r.ID == first[1].ID && string(r.Headers) != "{}" && strings.ReplaceAll(string(r.Headers), " ", "") != "{}" {
			t.Errorf("headers of a message stored without headers: %s, want {}", r.Headers)
		}
	}
}

// Many receivers store the same messages at once: each (source, message id)
// is stored exactly once, every receipt of it names the same row, and none
// fails.
func testConcurrentReceive(t *testing.T, h Harness) {
	d := h.New(t, 0)
	const receivers, messages = 8, 60
	receipts := make([][]dialects.InboxReceipt, receivers)
	errs := make([]error, receivers)
	var wg sync.WaitGroup
	for r := range receivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each receiver stores the messages in batches of its own size
			// and order, as concurrent HTTP requests and consumers do.
			var all []dialects.InboxReceipt
			batch := 1 + r%4
			for start := 0; start < messages; start += batch {
				var msgs []dialects.InboxMessage
				for i := start; i < min(start+batch, messages); i++ {
					j := i
					if r%2 == 1 {
						j = messages - 1 - i
					}
					msgs = append(msgs, msg("web", fmt.Sprintf("m%d", j), "", j))
				}
				rs, err := d.InboxReceive(context.Background(), msgs)
				if err != nil {
					errs[r] = err
					return
				}
				all = append(all, rs...)
			}
			receipts[r] = all
		}()
	}
	wg.Wait()
	ids := map[uuid.UUID]int{}
	stored := 0
	for r := range receivers {
		if errs[r] != nil {
			t.Fatalf("receiver %d: %v", r, errs[r])
		}
		for _, rc := range receipts[r] {
			ids[rc.ID]++
			if rc.Stored {
				stored++
			}
		}
	}
	if len(ids) != messages || stored != messages {
		t.Fatalf("%d distinct ids and %d stored receipts for %d messages, want %d of each", len(ids), stored, messages, messages)
	}
	for id, n := range ids {
		if n != receivers {
			t.Fatalf("row %s named by %d receipts, want %d", id, n, receivers)
		}
	}
	if rows := inboxRows(t, d); rows[dialects.InboxReceived] != messages {
		t.Fatalf("inbox rows %v, want %d received", rows, messages)
	}
}

func testRelayOrder(t *testing.T, h Harness) {
	d := h.New(t, 0)
	var msgs []dialects.InboxMessage
	aggs := []string{"a", "b", "", "c"}
	for i := range 40 {
		m := msg("web", fmt.Sprintf("m%d", i), aggs[i%len(aggs)], i)
		m.AggregateType = str("order")
		m.Headers = []byte(fmt.Sprintf(`{"X-Event":"e%d"}`, i))
		msgs = append(msgs, m)
	}
	msgs[5].AggregateID = str("") // an empty aggregate id is unkeyed
	var receipts []dialects.InboxReceipt
	for i := 0; i < len(msgs); i += 7 {
		receipts = append(receipts, receive(t, d, msgs[i:min(i+7, len(msgs))]...)...)
	}
	// Relay in small batches: each transaction takes the next rows.
	total, created := 0, 0
	for range 20 {
		r := relay(t, d, dialects.InboxRelayParams{Limit: 6, MaxAttempts: 9})
		if r.Busy {
			t.Fatal("a lone relay found the lock taken")
		}
		total += r.Relayed
		created += r.Created
		if r.Relayed == 0 {
			break
		}
	}
	if total != len(msgs) || created != len(msgs) {
		t.Fatalf("relayed %d and created %d outbox rows of %d inbox rows", total, created, len(msgs))
	}
	if rows := inboxRows(t, d); rows[dialects.InboxRelayed] != int64(len(msgs)) || rows[dialects.InboxReceived] != 0 {
		t.Fatalf("inbox rows %v after the relay", rows)
	}
	if r := relay(t, d, dialects.InboxRelayParams{Limit: 100, MaxAttempts: 9}); r.Relayed != 0 {
		t.Fatalf("a second relay relayed %d rows again", r.Relayed)
	}
	out := claimAll(t, d)
	if len(out) != len(msgs) {
		t.Fatalf("%d outbox rows for %d inbox rows", len(out), len(msgs))
	}
	byID := map[uuid.UUID]dialects.Row{}
	for _, r := range out {
		byID[r.ID] = r
	}
	lastN := map[string]int{}
	for i, rc := range receipts {
		r, ok := byID[rc.ID]
		if !ok {
			t.Fatalf("inbox row %d (%s) has no outbox row with its id", i, rc.ID)
		}
		m := msgs[i]
		wantKey := ""
		if m.AggregateID != nil {
			wantKey = *m.AggregateID
		}
		var headers map[string]string
		_ = json.Unmarshal(r.Headers, &headers)
		if r.Topic != m.Topic || r.Key != wantKey || r.AggregateType == nil || *r.AggregateType != "order" ||
			r.MaxAttempts != 9 || r.Attempt != 0 || headers["X-Event"] != fmt.Sprintf("e%d", i) {
			t.Errorf("outbox row of message %d: %+v headers %s", i, r, r.Headers)
		}
	}
	// Per key, outbox sequence order is receive order.
	for _, r := range out {
		if r.Key == "" {
			continue
		}
		var p struct{ N int }
		_ = json.Unmarshal(r.Payload, &p)
		if last, ok := lastN[r.Key]; ok && p.N <= last {
			t.Errorf("key %s: message %d has a later outbox sequence than message %d", r.Key, last, p.N)
		}
		lastN[r.Key] = p.N
	}
}

func testRelayExistingOutboxRow(t *testing.T, h Harness) {
	d := h.New(t, 0)
	rc := receive(t, d, msg("web", "m1", "a", 1), msg("web", "m2", "a", 2))
	// Another writer made an outbox row with the first inbox row's id.
	insert(t, d, testkit.Row("already.there", testkit.ID(rc[0].ID), testkit.Key("a")))
	r := relay(t, d, dialects.InboxRelayParams{Limit: 10, MaxAttempts: 5})
	if r.Relayed != 2 || r.Created != 1 {
		t.Fatalf("relay %+v, want both rows relayed and one outbox row created", r)
	}
	out := claimAll(t, d)
	if len(out) != 2 || out[0].ID != rc[0].ID || out[0].Topic != "already.there" || out[1].ID != rc[1].ID {
		t.Fatalf("outbox rows %+v; want the existing row untouched, then the second message", out)
	}
}

func testRelayGate(t *testing.T, h Harness) {
	d := h.New(t, 0)
	receive(t, d, msg("web", "k1", "a", 1), msg("web", "u1", "", 2), msg("web", "k2", "b", 3))
	p, err := d.InboxProbe(ctx(t))
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	if p.Last < 3 || p.Next <= 0 {
		t.Fatalf("probe %+v after three inserts", p)
	}
	// Nothing settled: only the unkeyed row may go.
	r := relay(t, d, dialects.InboxRelayParams{Limit: 10, MaxAttempts: 5, Gate: &dialects.Gate{Settled: 0}})
	if r.Relayed != 1 {
		t.Fatalf("relayed %d rows with nothing settled, want the unkeyed one", r.Relayed)
	}
	if out := claimAll(t, d); len(out) != 1 || out[0].Key != "" {
		t.Fatalf("outbox rows %+v, want the unkeyed row", out)
	}
	// The probe's epoch settles once the horizon passes it.
	var w dialects.Watermark
	_ = testkit.Poll(30*time.Second, func() error { // the relay below says what did not settle
		q, err := d.InboxProbe(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if w.Observe(q, time.Now()); w.Settled() < p.Last {
			return errors.New("not settled yet")
		}
		return nil
	})
	r = relay(t, d, dialects.InboxRelayParams{Limit: 10, MaxAttempts: 5, Gate: w.Gate()})
	if r.Relayed != 2 {
		t.Fatalf("relayed %d rows once settled (watermark %d, probe %+v), want the two keyed ones", r.Relayed, w.Settled(), p)
	}
}

// insertInbox stores an inbox row of source web whose message id and topic
// are $1 and whose aggregate id is $2, as Tx.Exec and Harness.Exec run it.
const insertInbox = `INSERT INTO {{it}} ({{ic "source"}}, {{ic "message_id"}}, {{ic "topic"}}, {{ic "aggregate_id"}}, {{ic "payload"}})
	VALUES ('web', $1, $1, $2, '{}')`

// relayGated probes the inbox, then relays with the gate the probes so far
// allow, as the inbox relay does, and returns the topics of the outbox rows
// it created, by key and then in outbox sequence order.
func relayGated(t *testing.T, d dialects.Dialect, w *dialects.Watermark) []string {
	t.Helper()
	p, err := d.InboxProbe(ctx(t))
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	w.Observe(p, time.Now())
	relay(t, d, dialects.InboxRelayParams{Limit: 100, MaxAttempts: 5, Gate: w.Gate()})
	var out []string
	for _, r := range claimAll(t, d) {
		out = append(out, r.Topic)
	}
	return out
}

// Two transactions store inbox rows of one aggregate; the one with the
// larger sequence commits first. The relay holds the later row back until
// the earlier transaction has ended, and then relays both in receive order;
// an unkeyed row does not wait.
func testRelayGateHoldsBack(t *testing.T, h Harness) {
	d := h.New(t, 0)
	first := begin(t, h, d)
	txExec(t, first, insertInbox, "x-first", "x")
	second := begin(t, h, d)
	txExec(t, second, insertInbox, "x-second", "x")
	if err := second.Commit(); err != nil {
		t.Fatal(err)
	}
	h.Exec(t, d, insertInbox, "other", "y")
	h.Exec(t, d, insertInbox, "unkeyed", nil)
	var w dialects.Watermark
	var got []string
	for range 5 {
		got = append(got, relayGated(t, d, &w)...)
	}
	if slices.Contains(got, "x-first") || slices.Contains(got, "x-second") {
		t.Fatalf("relayed %v while a transaction that stored an earlier row of aggregate x is open", got)
	}
	if !slices.Contains(got, "unkeyed") {
		t.Fatalf("relayed %v; the unkeyed row must not wait", got)
	}
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	var x []string
	testkit.Eventually(t, "both rows of aggregate x relayed once the first transaction commits", 0, func() error {
		for _, topic := range relayGated(t, d, &w) {
			if strings.HasPrefix(topic, "x-") {
				x = append(x, topic)
			}
		}
		if len(x) < 2 {
			return fmt.Errorf("relayed %v", x)
		}
		return nil
	})
	if !slices.Equal(x, []string{"x-first", "x-second"}) {
		t.Fatalf("after the first transaction committed, relayed %v, want x-first then x-second", x)
	}
}

// InboxWriters lists an open transaction that stored inbox rows, with its
// session, and neither one that wrote only the outbox nor one that has
// committed.
func testInboxWriters(t *testing.T, h Harness) {
	d := h.New(t, 0)
	writer := begin(t, h, d)
	txExec(t, writer, insertInbox, "m", nil)
	bystander := begin(t, h, d)
	txExec(t, bystander, insertRow, "t", nil)
	ws, err := d.InboxWriters(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var mine int
	for _, w := range ws {
		if w.PID == bystander.Session() {
			t.Errorf("an outbox writer is listed as an inbox writer: %+v", w)
		}
		if w.PID == writer.Session() && w.Xid > 0 {
			mine++
		}
	}
	if mine != 1 {
		t.Fatalf("writers %+v; want the open inbox transaction of session %d", ws, writer.Session())
	}
	if err := writer.Commit(); err != nil {
		t.Fatal(err)
	}
	if ws, err = d.InboxWriters(ctx(t)); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.PID == writer.Session() {
			t.Fatalf("a committed transaction is still listed: %+v", w)
		}
	}
}

// Relays running at once (replicas) while receivers store messages: every
// inbox row becomes exactly one outbox row, no relay fails, and per
// aggregate the outbox keeps receive order.
func testConcurrentRelays(t *testing.T, h Harness) {
	d := h.New(t, 0)
	const receivers, perReceiver, relays = 4, 150, 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	done := make(chan struct{})
	var recvWG sync.WaitGroup
	for r := range receivers {
		recvWG.Add(1)
		go func() {
			defer recvWG.Done()
			for i := 0; i < perReceiver; i += 3 {
				var msgs []dialects.InboxMessage
				for j := i; j < min(i+3, perReceiver); j++ {
					// Each receiver has aggregates of its own, so that its
					// messages' receive order is known.
					msgs = append(msgs, msg("web", fmt.Sprintf("r%d-m%d", r, j), fmt.Sprintf("r%d-agg%d", r, j%5), j))
				}
				if _, err := d.InboxReceive(context.Background(), msgs); err != nil {
					fail("receive: %v", err)
					return
				}
			}
		}()
	}
	var created, relayed, busy int
	for range relays {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				r, err := d.InboxRelay(context.Background(), dialects.InboxRelayParams{Limit: 7, MaxAttempts: 5})
				if err != nil {
					fail("relay: %v", err)
					return
				}
				mu.Lock()
				created += r.Created
				relayed += r.Relayed
				if r.Busy {
					busy++
				}
				mu.Unlock()
				if r.Relayed == 0 {
					runtime.Gosched() // let the receivers store more
				}
			}
		}()
	}
	recvWG.Wait()
	total := receivers * perReceiver
	_ = testkit.Poll(time.Minute, testkit.True(func() bool { // the checks below say what is missing
		mu.Lock()
		defer mu.Unlock()
		return relayed >= total || len(failures) > 0
	}))
	close(done)
	wg.Wait()
	for _, f := range failures[:min(len(failures), 10)] {
		t.Error(f)
	}
	if relayed != total || created != total {
		t.Fatalf("relayed %d and created %d outbox rows for %d inbox rows", relayed, created, total)
	}
	out := claimAll(t, d)
	if len(out) != total {
		t.Fatalf("%d outbox rows for %d inbox rows", len(out), total)
	}
	last := map[string]int{}
	for _, r := range out {
		var p struct{ N int }
		_ = json.Unmarshal(r.Payload, &p)
		if l, ok := last[r.Key]; ok && p.N <= l {
			t.Errorf("aggregate %s: message %d got a later outbox sequence than message %d", r.Key, l, p.N)
		}
		last[r.Key] = p.N
	}
	t.Logf("%d relay calls found another relay running", busy)
}
