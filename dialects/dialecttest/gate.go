package dialecttest

import (
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testkit"
)

// Tx is a transaction of the dialect's database that a subtest holds open,
// as a producer, a report or a forgotten session would.
type Tx interface {
	// Exec runs one statement of the dialect's own SQL, with the templates
	// of Harness.Exec and $1, $2, ... for args.
	Exec(sql string, args ...any) error
	// Session is the transaction's session as Writer.PID reports it.
	Session() int64
	Commit() error
	// Rollback ends the transaction if it is still open; a second call, or
	// one after Commit, does nothing.
	Rollback()
}

// Statements that the gate's subtests run through Tx.Exec and Harness.Exec:
// the same SQL on every dialect once the templates are rendered.
const (
	insertRow      = `INSERT INTO {{t}} ({{c "topic"}}, {{c "key"}}, {{c "payload"}}) VALUES ($1, $2, '{}')`
	createBusiness = `CREATE TABLE {{q (obj "orders") | qualify}} (id INT PRIMARY KEY, n INT)`
	insertBusiness = `INSERT INTO {{q (obj "orders") | qualify}} (id, n) VALUES (1, 0)`
	updateBusiness = `UPDATE {{q (obj "orders") | qualify}} SET n = n + 1 WHERE id = 1`
)

func runGate(t *testing.T, h Harness) []subtest {
	if h.Begin == nil {
		t.Fatal("the harness must offer Begin: the gate's subtests hold transactions open")
	}
	return []subtest{
		{"GateHoldsBackRowsOfOpenTransactions", testGateHoldsBack},
		{"GateWaitsForATransactionBlockedOnARowLock", testGateRowLock},
		{"GateDoesNotWaitForATransactionThatWroteNoOutboxRows", testGateBystander},
		{"AClaimSettlesRowsOfWritersThatEndedAfterItsProbe", testGateSettlesInTheClaim},
		{"AClaimDoesNotSettleRowsOfTheNewestWriter", testGateNewestWriter},
		{"WritersAreTheOpenOutboxTransactions", testWriters},
	}
}

// begin opens a held transaction that the test's end rolls back.
func begin(t *testing.T, h Harness, d dialects.Dialect) Tx {
	t.Helper()
	tx := h.Begin(t, d)
	t.Cleanup(tx.Rollback)
	return tx
}

func txExec(t *testing.T, tx Tx, sql string, args ...any) {
	t.Helper()
	if err := tx.Exec(sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// gateClaim probes, then claims with the gate the probes so far allow, as
// the claimer does.
func (h Harness) gateClaim(t *testing.T, d dialects.Dialect, w *dialects.Watermark, limit int) []dialects.Row {
	t.Helper()
	if h.settle {
		c, err := d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: limit, Lease: lease, Token: uuid.New(), Walk: h.walk(),
			Settle: func(p dialects.Probe) *dialects.Gate {
				w.Observe(p, time.Now())
				return w.Gate()
			}})
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		if c.Probe == nil {
			t.Fatal("a claim with Settle returned no probe")
		}
		return c.Rows
	}
	p, err := d.OutboxProbe(ctx(t))
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	w.Observe(p, time.Now())
	rows, err := rowsOf(d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: limit, Lease: lease, Token: uuid.New(), Gate: w.Gate(), Walk: h.walk()}))
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return rows
}

func topics(rows []dialects.Row) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.Topic)
	}
	sort.Strings(out)
	return out
}

// Two transactions insert rows of one key; the one with the larger sequence
// commits first. Without the gate its row would be the key's head and be
// delivered first. With it, the row waits until the earlier transaction has
// ended; rows of other keys and unkeyed rows do not wait. Nothing waits at
// the producer: neither transaction blocks the other.
func testGateHoldsBack(t *testing.T, h Harness) {
	d := h.New(t, 0)
	first := begin(t, h, d)
	txExec(t, first, insertRow, "k-first", "k")
	second := begin(t, h, d)
	txExec(t, second, insertRow, "k-second", "k")
	if err := second.Commit(); err != nil {
		t.Fatal(err)
	}
	h.Exec(t, d, insertRow, "other-key", "other")
	h.Exec(t, d, insertRow, "unkeyed", nil)
	var w dialects.Watermark
	var got []dialects.Row
	for range 4 {
		got = append(got, h.gateClaim(t, d, &w, 100)...)
	}
	if !slices.Contains(topics(got), "unkeyed") {
		t.Fatalf("claimed %v while the first transaction is open, want at least the unkeyed row", topics(got))
	}
	for _, r := range got {
		if r.Key == "k" {
			t.Fatalf("claimed %s of key k while a transaction that wrote an earlier row of k is open", r.Topic)
		}
	}
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	var k []dialects.Row
	testkit.Eventually(t, "both rows of k are claimed once the first transaction commits", 0, func() error {
		for _, r := range h.gateClaim(t, d, &w, 100) {
			if r.Key == "k" {
				k = append(k, r)
			}
		}
		if len(k) < 2 {
			return errors.New("claimed " + strings.Join(topics(k), ", "))
		}
		return nil
	})
	if len(k) != 2 || k[0].Topic != "k-first" || k[1].Topic != "k-second" {
		t.Fatalf("claimed %v, want k-first then k-second", topics(k))
	}
}

// A transaction that waited on another's business-row lock commits after
// it although it drew the smaller sequence value: the gate waits for it.
func testGateRowLock(t *testing.T, h Harness) {
	d := h.New(t, 0)
	h.Exec(t, d, createBusiness)
	h.Exec(t, d, insertBusiness)
	// The older transaction locks the business row first.
	old := begin(t, h, d)
	txExec(t, old, updateBusiness)
	// The younger one writes its outbox row (the smaller sequence), then
	// waits for the business row.
	young := begin(t, h, d)
	txExec(t, young, insertRow, "young", "k")
	done := make(chan error, 1)
	go func() {
		err := young.Exec(updateBusiness)
		if err == nil {
			err = young.Commit()
		}
		done <- err
	}()
	// The older one writes the later outbox row of the key, and commits
	// first.
	txExec(t, old, insertRow, "old", "k")
	var w dialects.Watermark
	if err := old.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.claimInOrder(t, d, &w, "young", "old")
}

// claimInOrder claims with probes until the two rows are claimed, and
// checks that they came in the order given (the smaller sequence first).
func (h Harness) claimInOrder(t *testing.T, d dialects.Dialect, w *dialects.Watermark, first, second string) {
	t.Helper()
	var order []string
	testkit.Eventually(t, "both rows are claimed", 0, func() error {
		for _, r := range h.gateClaim(t, d, w, 100) {
			order = append(order, r.Topic)
		}
		if len(order) < 2 {
			return errors.New("claimed " + strings.Join(order, ", "))
		}
		return nil
	})
	if !slices.Equal(order, []string{first, second}) {
		t.Fatalf("claimed %v, want %s (smaller sequence) then %s", order, first, second)
	}
}

// A transaction that holds a transaction id but wrote no outbox row (a
// batch job on another table, a session left idle in transaction) does not
// hold keyed rows back: the first probe after their insert settles them.
func testGateBystander(t *testing.T, h Harness) {
	d := h.New(t, 0)
	h.Exec(t, d, createBusiness)
	bystander := begin(t, h, d)
	txExec(t, bystander, insertBusiness)
	h.Exec(t, d, insertRow, "keyed", "k")
	var w dialects.Watermark
	got := h.gateClaim(t, d, &w, 10)
	if len(got) != 1 || got[0].Topic != "keyed" {
		t.Fatalf("claimed %v with one probe while a transaction that wrote no outbox row is open (watermark %d), want the keyed row",
			topics(got), w.Settled())
	}
}

// A keyed row whose transaction was open at the probe and committed before
// the claim is settled by the claim itself, although a transaction that
// wrote no outbox row holds the snapshot's xmin back: none of the writers
// that the probe saw still runs in the claim's snapshot. A writer that
// still runs holds the row back (GateHoldsBackRowsOfOpenTransactions).
func testGateSettlesInTheClaim(t *testing.T, h Harness) {
	d, _, writer := h.businessThenOutbox(t, "keyed")
	p, err := d.OutboxProbe(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if p.Writers == nil {
		t.Skip("the dialect's probe does not list the writers")
	}
	if len(p.Writers) != 1 || p.Writers[0] != p.Writer {
		t.Fatalf("probe %+v, want the one open outbox transaction as its writers", p)
	}
	var w dialects.Watermark
	w.Observe(p, time.Now())
	if w.Settled() >= p.Last {
		t.Fatalf("the probe settled %d while the row's transaction was open", w.Settled())
	}
	if err := writer.Commit(); err != nil {
		t.Fatal(err)
	}
	rows, err := rowsOf(d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: 10, Lease: lease, Token: uuid.New(), Gate: w.Gate(), Walk: h.walk()}))
	if err != nil || len(rows) != 1 || rows[0].Topic != "keyed" {
		t.Fatalf("the claim after the writer's commit took %v (%v), want the keyed row without another probe", topics(rows), err)
	}
}

// businessThenOutbox opens two transactions on a fresh dialect, held
// open: the first writes a business row (and so has the older id), the
// second then inserts an outbox row of key k with the given topic.
func (h Harness) businessThenOutbox(t *testing.T, topic string) (d dialects.Dialect, business, outbox Tx) {
	t.Helper()
	d = h.New(t, 0)
	h.Exec(t, d, createBusiness)
	business = begin(t, h, d)
	txExec(t, business, insertBusiness)
	outbox = begin(t, h, d)
	txExec(t, outbox, insertRow, topic, "k")
	return d, business, outbox
}

// The writer that a claim's snapshot sees running may be newer than every
// transaction that ended before it: a transaction that had its id first
// (from a business write) draws the later sequence value and commits,
// while the newest one, which drew the earlier value, stays open. Its row
// holds the key back in the claim as at the probe.
func testGateNewestWriter(t *testing.T, h Harness) {
	d, older, newest := h.businessThenOutbox(t, "earlier")
	txExec(t, older, insertRow, "later", "k")
	if err := older.Commit(); err != nil {
		t.Fatal(err)
	}
	var w dialects.Watermark
	for range 3 {
		if rows := h.gateClaim(t, d, &w, 10); len(rows) > 0 {
			t.Fatalf("claimed %v while the transaction of the key's earlier row is open", topics(rows))
		}
	}
	if err := newest.Commit(); err != nil {
		t.Fatal(err)
	}
	h.claimInOrder(t, d, &w, "earlier", "later")
}

// OutboxWriters lists open transactions that wrote outbox rows, with their
// session and start time, and not a transaction that only wrote another
// table.
func testWriters(t *testing.T, h Harness) {
	d := h.New(t, 0)
	h.Exec(t, d, createBusiness)
	writer := begin(t, h, d)
	txExec(t, writer, insertRow, "t", "k")
	bystander := begin(t, h, d)
	txExec(t, bystander, insertBusiness)
	ws, err := d.OutboxWriters(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var mine []dialects.Writer
	for _, w := range ws {
		if w.PID == writer.Session() {
			mine = append(mine, w)
		}
		if w.PID == bystander.Session() {
			t.Errorf("a transaction that wrote no outbox row is listed: %+v", w)
		}
	}
	if len(mine) != 1 || mine[0].Since.IsZero() || mine[0].Xid <= 0 {
		t.Fatalf("writers %+v; want the open outbox transaction of session %d", ws, writer.Session())
	}
	p, err := d.OutboxProbe(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if mine[0].Xid < p.Xmin || mine[0].Xid >= p.Next {
		t.Fatalf("writer id %d outside the running range [%d, %d)", mine[0].Xid, p.Xmin, p.Next)
	}
	if p.Writer == 0 || p.Writer > mine[0].Xid {
		t.Fatalf("probe %+v: its oldest writer is not at or below the open outbox transaction's id %d", p, mine[0].Xid)
	}
	if err := writer.Commit(); err != nil {
		t.Fatal(err)
	}
	ws, err = d.OutboxWriters(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.PID == writer.Session() {
			t.Fatalf("a committed transaction is still listed: %+v", w)
		}
	}
}

// A claim that runs its own probe (ClaimParams.Settle) takes the keyed rows
// that the probe settles, with no probe before it, and returns the probe.
func testClaimSettles(t *testing.T, h Harness) {
	d := h.New(t, 0)
	insert(t, d, keyed("a", 3)...)
	insert(t, d, dialects.NewRow{Topic: "unkeyed"})
	var w dialects.Watermark
	var settled *dialects.Probe
	c, err := d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: 10, Lease: lease, Token: uuid.New(), Walk: h.walk(),
		Settle: func(p dialects.Probe) *dialects.Gate {
			settled = &p
			w.Observe(p, time.Now())
			return w.Gate()
		}})
	if err != nil {
		t.Fatal(err)
	}
	if settled == nil || c.Probe == nil || c.Probe.Last != settled.Last || c.Probe.Next != settled.Next {
		t.Fatalf("Settle saw %+v, the claim returned %+v: want the same probe", settled, c.Probe)
	}
	if len(c.Rows) != 4 {
		t.Fatalf("claimed %d rows, want the 3 keyed rows (settled by the claim's own probe) and the unkeyed one", len(c.Rows))
	}
	for _, r := range c.Rows {
		if r.Sequence > c.Probe.Last {
			t.Fatalf("row %d is past the probe's last sequence %d", r.Sequence, c.Probe.Last)
		}
	}
	// Without a probe, and with a watermark that settled nothing, the
	// keyed rows would have waited.
	insert(t, d, keyed("b", 1)...)
	if rows := h.claimGated(t, d, &dialects.Gate{}); len(rows) != 0 {
		t.Fatalf("a claim whose gate settled nothing took %d keyed rows", len(rows))
	}
}

// claimGated claims with the gate g as it is, without a probe.
func (h Harness) claimGated(t *testing.T, d dialects.Dialect, g *dialects.Gate) []dialects.Row {
	t.Helper()
	rows, err := rowsOf(d.OutboxClaim(ctx(t), dialects.ClaimParams{Limit: 10, Lease: lease, Token: uuid.New(), Gate: g, Walk: h.walk()}))
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return rows
}

// A probe says how long until the earliest pending row scheduled later
// comes due, and that none is when none is.
func testProbeNextDue(t *testing.T, h Harness) {
	d := h.New(t, 0)
	p, err := d.OutboxProbe(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if p.Later {
		t.Fatalf("an empty table: the probe says a row comes due in %v", p.NextDue)
	}
	insert(t, d, testkit.Row(anyTopic, testkit.ScheduledAt(time.Now().Add(time.Hour))),
		testkit.Row(anyTopic, testkit.ScheduledAt(time.Now().Add(2*time.Hour))), dialects.NewRow{})
	if p, err = d.OutboxProbe(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if !p.Later || p.NextDue < 59*time.Minute || p.NextDue > time.Hour {
		t.Fatalf("a row an hour ahead: the probe says %v (%v), want a little under an hour", p.NextDue, p.Later)
	}
}
