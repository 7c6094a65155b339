package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/backoff"
	"github.com/queuebox/queuebox/internal/pgcluster"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/migrations"
)

// hubOpts are quick wake-ups for the tests of shared streams.
var hubOpts = postgres.WakeupOptions{Heartbeat: 50 * time.Millisecond, Recheck: 200 * time.Millisecond,
	Retry: backoff.Capped{First: 10 * time.Millisecond, Max: 100 * time.Millisecond}}

// hubGroup names the lock, channel and slots of a test's registries: its
// own, so that parallel tests never share a stream.
func hubGroup() string { return "hub-" + uuid.NewString()[:8] }

// outboxAt opens a dialect on a new schema of the test server, migrated
// up to upTo (0: all), whose listeners join reg's hubs, as the outboxes of
// one process do; it returns the URL and schema too.
func outboxAt(t *testing.T, reg *postgres.WakeupRegistry, upTo int) (d *postgres.Dialect, url, schema string) {
	t.Helper()
	schema, url = testdb.Schema(t)
	d = openAt(t, url, schema)
	if upTo == 0 {
		upTo = 1 << 30
	}
	if _, err := migrations.UpTo(context.Background(), d, upTo); err != nil {
		t.Fatal(err)
	}
	d.UseWakeupRegistry(reg)
	return d, url, schema
}

func outboxIn(t *testing.T, reg *postgres.WakeupRegistry, upTo int) *postgres.Dialect {
	t.Helper()
	d, _, _ := outboxAt(t, reg, upTo)
	return d
}

// streams counts the slots whose names start with prefix, and the WAL
// senders that stream them.
func streams(t *testing.T, d *postgres.Dialect, prefix string) (slots, senders int) {
	t.Helper()
	err := d.Pool().QueryRow(context.Background(), `SELECT count(*),
		(SELECT count(*) FROM pg_stat_replication r WHERE r.pid IN (SELECT active_pid FROM pg_replication_slots WHERE starts_with(slot_name, $1)))
		FROM pg_replication_slots WHERE starts_with(slot_name, $1)`, prefix).Scan(&slots, &senders)
	if err != nil {
		t.Fatal(err)
	}
	return slots, senders
}

// oneStream fails unless exactly one slot named prefix exists, streamed by
// one WAL sender.
func oneStream(t *testing.T, d *postgres.Dialect, prefix string) {
	t.Helper()
	testkit.Eventually(t, "one slot and one WAL sender", 0, func() error {
		if slots, senders := streams(t, d, prefix); slots != 1 || senders != 1 {
			return fmt.Errorf("%d slots named %s* and %d WAL senders, want one of each", slots, prefix, senders)
		}
		return nil
	})
}

// sameSlot waits until every listener listens on one slot, returns it, and
// takes the nudges that the changes of state sent.
func sameSlot(t *testing.T, ls ...*listening) string {
	t.Helper()
	var slot string
	testkit.Eventually(t, "the outboxes listen on one slot", 0, func() error {
		slot = ls[0].l.Status().Slot
		for _, lt := range ls {
			if st := lt.l.Status(); !st.Listening() || st.Slot == "" || st.Slot != slot {
				return fmt.Errorf("%+v, and the first %s", st, slot)
			}
		}
		return nil
	})
	time.Sleep(100 * time.Millisecond)
	for _, lt := range ls {
		lt.drain()
	}
	return slot
}

// movedFrom waits until every listener listens on one slot other than
// old, as sameSlot does.
func movedFrom(t *testing.T, old string, ls ...*listening) string {
	t.Helper()
	testkit.Eventually(t, "the stream moves from "+old, 0, func() error {
		if st := ls[0].l.Status(); st.Slot == old {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	return sameSlot(t, ls...)
}

// drain takes the nudges that wait on lt's channels.
func (lt *listening) drain() {
	for _, ch := range []<-chan struct{}{lt.l.Outbox(), lt.l.Inbox(), lt.l.Pauses()} {
		select {
		case <-ch:
		default:
		}
	}
}

// allQuiet fails when any of lt's channels holds a nudge.
func (lt *listening) allQuiet(t *testing.T) {
	t.Helper()
	lt.quiet(t, lt.l.Outbox(), "outbox")
	lt.quiet(t, lt.l.Inbox(), "inbox")
	lt.quiet(t, lt.l.Pauses(), "pauses")
}

// The outboxes of a database in one process (dialects on three schemas,
// one registry) listen through one slot and one WAL sender, each nudged by
// its own tables only. An outbox that comes later joins the stream on the
// same slot without disturbing the others (no change of state, no stray
// nudge); one that goes away leaves the others listening.
func TestWakeupsOutboxesOfADatabaseShareOneStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := postgres.NewWakeupRegistry(hubGroup())
	var ds []*postgres.Dialect
	var ls []*listening
	for range 3 {
		d := outboxIn(t, reg, 0)
		ds, ls = append(ds, d), append(ls, listen(t, d, hubOpts))
	}
	slot := sameSlot(t, ls...)
	for i, lt := range ls {
		if st := lt.l.Status(); st.Channel != "" || !st.Pauses {
			t.Fatalf("outbox %d: %+v, want listening on the slot %s, with pauses", i, st, slot)
		}
	}
	if !strings.HasPrefix(slot, reg.SlotPrefix()) {
		t.Fatalf("the slot %s is not named %s*", slot, reg.SlotPrefix())
	}
	oneStream(t, ds[0], reg.SlotPrefix())

	exec(t, ds[0], outboxInsert)
	ls[0].nudged(t, ls[0].l.Outbox(), "outbox")
	exec(t, ds[1], inboxInsert)
	ls[1].nudged(t, ls[1].l.Inbox(), "inbox")
	if _, _, err := ds[2].DestinationPause(ctx, "crm", "upgrade"); err != nil {
		t.Fatal(err)
	}
	ls[2].nudged(t, ls[2].l.Pauses(), "pauses")
	// The stream is in commit order: once the last nudge is here, a stray
	// one from the earlier commits would be too.
	for _, lt := range ls {
		lt.allQuiet(t)
	}

	// A fourth outbox comes: the stream moves to a new slot with one more
	// publication, the old one going once the new one streams.
	d4 := outboxIn(t, reg, 0)
	l4 := listen(t, d4, hubOpts)
	before := slot
	slot = movedFrom(t, before, append(ls, l4)...)
	noSlot(t, ds[0], before)
	exec(t, d4, outboxInsert)
	l4.nudged(t, l4.l.Outbox(), "outbox")
	exec(t, ds[0], outboxInsert)
	ls[0].nudged(t, ls[0].l.Outbox(), "outbox")
	for _, lt := range append(ls, l4) {
		lt.allQuiet(t)
	}
	oneStream(t, ds[0], reg.SlotPrefix())

	// One goes away (and, a moment later, leaves the stream): the others
	// keep listening, through one slot.
	ls[1].stop()
	rest := []*listening{ls[0], ls[2], l4}
	movedFrom(t, slot, rest...)
	exec(t, ds[1], outboxInsert)
	exec(t, ds[2], inboxInsert)
	ls[2].nudged(t, ls[2].l.Inbox(), "inbox")
	exec(t, ds[0], outboxInsert)
	ls[0].nudged(t, ls[0].l.Outbox(), "outbox")
	for _, lt := range rest {
		lt.allQuiet(t)
	}
	oneStream(t, ds[0], reg.SlotPrefix())
}

// Two relays (two registries, as two processes have) with different sets
// of outboxes on one database: the first serves outboxes 1 and 2, the
// second 2 and 3. One slot and one WAL sender serve all three: the holder
// covers the outbox that only the other relay serves, which listens
// through it; a third relay's outbox is covered while that relay runs,
// and left after. When the holder stops, the other takes the slot over.
func TestWakeupsRelaysWithDifferentOutboxesShareOneSlot(t *testing.T) {
	t.Parallel()
	group := hubGroup()
	ra, rb := postgres.NewWakeupRegistry(group), postgres.NewWakeupRegistry(group)
	d1 := outboxIn(t, ra, 0)
	d2a, u2, s2 := outboxAt(t, ra, 0)
	d2b := openAt(t, u2, s2)
	d2b.UseWakeupRegistry(rb)
	d3 := outboxIn(t, rb, 0)

	a1, a2 := listen(t, d1, hubOpts), listen(t, d2a, hubOpts)
	b2, b3 := listen(t, d2b, hubOpts), listen(t, d3, hubOpts)
	for _, f := range []struct {
		lt *listening
		d  *postgres.Dialect
	}{{b2, d2b}, {b3, d3}} {
		if st := f.lt.l.Status(); !st.Listening() || st.Slot != "" || st.Channel != f.d.WakeupChannel() || !st.Pauses {
			t.Fatalf("the second relay's outbox %s: %+v, want listening through the channel %s", f.d.Names().Schema, st, f.d.WakeupChannel())
		}
	}
	slot := sameSlot(t, a1, a2)
	oneStream(t, d1, ra.SlotPrefix())
	// What the holder heard alone reaches each follower at its first
	// announcement: let it come, then start from empty channels.
	time.Sleep(300 * time.Millisecond)
	for _, lt := range []*listening{a1, a2, b2, b3} {
		lt.drain()
	}

	exec(t, d3, outboxInsert)
	b3.nudged(t, b3.l.Outbox(), "outbox")
	exec(t, d1, inboxInsert)
	a1.nudged(t, a1.l.Inbox(), "inbox")
	exec(t, d2a, outboxInsert)
	a2.nudged(t, a2.l.Outbox(), "outbox")
	b2.nudged(t, b2.l.Outbox(), "outbox")
	// The forwards are in commit order too.
	time.Sleep(100 * time.Millisecond)
	for _, lt := range []*listening{a1, a2, b2, b3} {
		lt.allQuiet(t)
	}

	// A third relay with an outbox of its own comes and goes: the holder's
	// stream covers it while it announces itself, and leaves it once it
	// no longer does.
	d4 := outboxIn(t, postgres.NewWakeupRegistry(group), 0)
	c4 := listen(t, d4, hubOpts)
	if st := c4.l.Status(); st.Channel != d4.WakeupChannel() {
		t.Fatalf("the third relay's outbox: %+v, want listening through the holder", st)
	}
	slot = movedFrom(t, slot, a1, a2)
	c4.stop()
	slot = movedFrom(t, slot, a1, a2)
	oneStream(t, d1, ra.SlotPrefix())
	time.Sleep(200 * time.Millisecond)
	b2.drain()
	b3.drain()

	// The first relay stops: the second takes the slot over, for both of
	// its outboxes, and the first relay's slot goes.
	a1.stop()
	a2.stop()
	noSlot(t, d1, slot)
	for _, lt := range []*listening{b2, b3} {
		testkit.Eventually(t, "the second relay holds the slot", 0, func() error {
			if st := lt.l.Status(); !st.Listening() || !strings.HasPrefix(st.Slot, ra.SlotPrefix()) {
				return fmt.Errorf("%+v", st)
			}
			return nil
		})
	}
	if s2, s3 := b2.l.Status().Slot, b3.l.Status().Slot; s2 != s3 {
		t.Fatalf("the second relay's outboxes listen on two slots: %s and %s", s2, s3)
	}
	oneStream(t, d3, ra.SlotPrefix())
	time.Sleep(100 * time.Millisecond)
	b2.drain()
	b3.drain()
	exec(t, d3, inboxInsert)
	b3.nudged(t, b3.l.Inbox(), "inbox")
	exec(t, d2b, outboxInsert)
	b2.nudged(t, b2.l.Outbox(), "outbox")
	b2.allQuiet(t)
	b3.allQuiet(t)
}

// An outbox whose publication is missing (migrated before V16) probes and
// says why, while the other outbox of its database listens; once migrated,
// it joins the stream at its next check, on the same slot.
func TestWakeupsAnOutboxWithoutItsPublicationProbesAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := postgres.NewWakeupRegistry(hubGroup())
	good := outboxIn(t, reg, 0)
	old := outboxIn(t, reg, 15)
	lg := listen(t, good, hubOpts)
	opts := hubOpts
	opts.Mode = dialects.WakeupsAuto
	lo := startListening(t, old, opts)
	want := "the publication " + old.Names().Publication() + " does not exist"
	if st := lo.l.Status(); st.State != dialects.WakeupsUnavailable || !strings.Contains(st.Reason, want) {
		t.Fatalf("the outbox before V16: %+v, want unavailable: %s", st, want)
	}
	time.Sleep(500 * time.Millisecond) // a few rechecks
	if st := lo.l.Status(); st.State != dialects.WakeupsUnavailable || st.Kind() != "probe" {
		t.Fatalf("the outbox before V16, after rechecks: %+v", st)
	}
	if st := lg.l.Status(); !st.Listening() || st.Slot == "" {
		t.Fatalf("the outbox beside it: %+v", st)
	}
	lg.drain()
	exec(t, good, outboxInsert)
	lg.nudged(t, lg.l.Outbox(), "outbox")

	if _, err := migrations.Up(ctx, old); err != nil {
		t.Fatal(err)
	}
	lo.await(t, dialects.WakeupsListening)
	sameSlot(t, lg, lo)
	oneStream(t, good, reg.SlotPrefix())
	exec(t, old, outboxInsert)
	lo.nudged(t, lo.l.Outbox(), "outbox")
	lg.allQuiet(t)
}

// A server with no room for one more slot: every outbox of the database
// probes and names the setting; once a slot is free, they listen through
// one.
func TestWakeupsOutboxesProbeWhereTheServerHasNoRoom(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a cluster of its own")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{TestSettings: true, Prefix: "queuebox-test-noroom-", Settings: []string{"max_replication_slots=1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	admin, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `SELECT pg_create_logical_replication_slot('taken', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
	reg := postgres.NewWakeupRegistry("")
	var ls []*listening
	for _, schema := range []string{"tenant_a", "tenant_b"} {
		if _, err := admin.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
			t.Fatal(err)
		}
		d := openAt(t, testdb.WithParam(c.URL(), "search_path", "pg_catalog"), schema)
		if _, err := migrations.Up(ctx, d); err != nil {
			t.Fatal(err)
		}
		d.UseWakeupRegistry(reg)
		opts := hubOpts
		opts.Mode = dialects.WakeupsAuto
		ls = append(ls, startListening(t, d, opts))
	}
	for _, lt := range ls {
		st := lt.await(t, dialects.WakeupsUnavailable)
		for !strings.Contains(st.Reason, "max_replication_slots") {
			st = lt.await(t, dialects.WakeupsUnavailable)
		}
		if st.Kind() != "probe" {
			t.Fatalf("with no room: %+v", st)
		}
	}
	if _, err := admin.Exec(ctx, `SELECT pg_drop_replication_slot('taken')`); err != nil {
		t.Fatal(err)
	}
	slot := sameSlot(t, ls...)

	// A third outbox comes: the server has no room for the new slot beside
	// the old one, so the old one goes first, and all three listen on the
	// new one.
	if _, err := admin.Exec(ctx, `CREATE SCHEMA tenant_c`); err != nil {
		t.Fatal(err)
	}
	d := openAt(t, testdb.WithParam(c.URL(), "search_path", "pg_catalog"), "tenant_c")
	if _, err := migrations.Up(ctx, d); err != nil {
		t.Fatal(err)
	}
	d.UseWakeupRegistry(reg)
	l3 := listen(t, d, hubOpts)
	movedFrom(t, slot, append(ls, l3)...)
	exec(t, d, outboxInsert)
	l3.nudged(t, l3.l.Outbox(), "outbox")
	for _, lt := range ls {
		lt.allQuiet(t)
	}
}

// Fifty outboxes in schemas of one database, in one process, as the scale
// of issue 49 asks: one slot, one WAL sender and one lock connection for
// all of them, and each nudged by its own inserts only.
func TestWakeupsFiftyOutboxesListenThroughOneSlot(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("migrates fifty schemas")
	}
	reg := postgres.NewWakeupRegistry(hubGroup())
	app := "wake-fifty-" + uuid.NewString()[:8]
	var ds []*postgres.Dialect
	var ls []*listening
	for range 50 {
		schema, u := testdb.Schema(t)
		d := openAt(t, testdb.WithParam(u, "application_name", app), schema)
		if _, err := migrations.Up(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		d.UseWakeupRegistry(reg)
		ds = append(ds, d)
		ls = append(ls, startListening(t, d, hubOpts))
	}
	sameSlot(t, ls...)
	oneStream(t, ds[0], reg.SlotPrefix())
	var tokens, senders int
	if err := ds[0].Pool().QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE backend_type = 'client backend' AND query LIKE '%advisory%'),
		count(*) FILTER (WHERE backend_type = 'walsender') FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`, app).Scan(&tokens, &senders); err != nil {
		t.Fatal(err)
	}
	if tokens != 1 || senders != 1 {
		t.Fatalf("%d lock connections and %d WAL senders for fifty outboxes, want one of each", tokens, senders)
	}
	for _, i := range []int{0, 17, 49} {
		exec(t, ds[i], outboxInsert)
		ls[i].nudged(t, ls[i].l.Outbox(), "outbox")
	}
	for _, lt := range ls {
		lt.allQuiet(t)
	}
}

// An outbox's schema dropped while the stream covers it (its publication
// goes with it): at its next check the outbox says what is missing and
// leaves the stream, and the other outbox listens on.
func TestWakeupsAnOutboxWhoseSchemaIsDroppedLeavesTheStream(t *testing.T) {
	t.Parallel()
	reg := postgres.NewWakeupRegistry(hubGroup())
	keep := outboxIn(t, reg, 0)
	gone, _, schema := outboxAt(t, reg, 0)
	lk := listen(t, keep, hubOpts)
	opts := hubOpts
	opts.Mode = dialects.WakeupsAuto
	lg := listen(t, gone, opts)
	slot := sameSlot(t, lk, lg)
	if _, err := keep.Pool().Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
		t.Fatal(err)
	}
	exec(t, keep, outboxInsert)
	lk.nudged(t, lk.l.Outbox(), "outbox")
	st := lg.await(t, dialects.WakeupsUnavailable)
	if !strings.Contains(st.Reason, "does not exist") {
		t.Fatalf("the dropped outbox: %+v, want unavailable, saying what is missing", st)
	}
	movedFrom(t, slot, lk)
	exec(t, keep, outboxInsert)
	lk.nudged(t, lk.l.Outbox(), "outbox")
	lk.allQuiet(t)
}
