package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/backoff"
	"github.com/queuebox/queuebox/internal/pgcluster"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testlog"
	"github.com/queuebox/queuebox/migrations"
)

// slotsOf counts the server's replication slots whose names start with
// prefix.
func slotsOf(t *testing.T, d *postgres.Dialect, prefix string) int {
	t.Helper()
	var n int
	if err := d.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE starts_with(slot_name, $1)`, prefix).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// holderAndFollower sorts two listeners of one publication into the one
// that holds the slot and the one that hears it through NOTIFY, and fails
// unless there is exactly one of each.
func holderAndFollower(t *testing.T, a, b *listening) (holder, follower *listening) {
	t.Helper()
	sa, sb := a.l.Status(), b.l.Status()
	switch {
	case sa.Slot != "" && sb.Slot == "" && sb.Channel != "":
		return a, b
	case sb.Slot != "" && sa.Slot == "" && sa.Channel != "":
		return b, a
	}
	t.Fatalf("want one listener with a slot and one through the channel: %+v and %+v", sa, sb)
	return nil, nil
}

// twoRelays opens two dialects on one migrated outbox, as two relay
// processes have.
func twoRelays(t *testing.T) (*postgres.Dialect, *postgres.Dialect) {
	t.Helper()
	schema, u := testdb.Schema(t)
	d1 := openAt(t, u, schema)
	if _, err := migrations.Up(context.Background(), d1); err != nil {
		t.Fatal(err)
	}
	return d1, openAt(t, u, schema)
}

// Two relays on one outbox (two dialects, as two processes have) hold one
// slot between them: the one that holds it forwards what it hears, so both
// are nudged by every commit, each on the channel of the table that
// changed. When the holder stops, the other takes the slot over and is
// nudged from its own.
func TestWakeupsOneSlotForTheRelaysOfAnOutbox(t *testing.T) {
	t.Parallel()
	d1, d2 := twoRelays(t)
	opts := postgres.WakeupOptions{Heartbeat: 50 * time.Millisecond, Retry: backoff.Capped{First: 10 * time.Millisecond, Max: 100 * time.Millisecond}}
	a := listen(t, d1, opts)
	// Alone, the holder forwards nothing: no follower said hello.
	exec(t, d1, outboxInsert)
	a.nudged(t, a.l.Outbox(), "outbox")
	slot := a.l.Status().Slot
	prefix := slot[:strings.LastIndexByte(slot, '_')+1]
	channel := d1.WakeupChannel()
	var forwards int
	if err := d1.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE starts_with(query, 'SELECT pg_notify(' || quote_literal($1))`, channel).Scan(&forwards); err != nil || forwards != 0 {
		t.Fatalf("a relay alone forwarded (%d sessions whose last statement was a forward, %v)", forwards, err)
	}

	b := listen(t, d2, opts)
	holder, follower := holderAndFollower(t, a, b)
	if holder != a || follower.l.Status().Channel != channel {
		t.Fatalf("the first relay no longer holds the slot, or the channel is not %s: %+v", channel, follower.l.Status())
	}
	if n := slotsOf(t, d1, prefix); n != 1 {
		t.Fatalf("%d slots named %s*, want 1", n, prefix)
	}
	if st := follower.l.Status(); !st.Listening() || st.Kind() != "logical" || !st.Pauses {
		t.Fatalf("the follower: %+v, want listening, with pauses", st)
	}

	// The holder kept what it heard alone for its first follower, which
	// looks once at everything when it comes: once the holder has sent
	// that (its lock connection's last statement is a forward) and the
	// follower has had a moment to hear it, the channels start empty.
	testkit.Eventually(t, "the holder forwards what it heard alone", 0, func() error {
		var n int
		err := d1.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE starts_with(query, 'SELECT pg_notify(' || quote_literal($1)) AND state = 'idle'`, channel).Scan(&n)
		if err == nil && n != 1 {
			err = fmt.Errorf("%d idle sessions whose last statement was a forward", n)
		}
		return err
	})
	time.Sleep(200 * time.Millisecond)
	for _, ch := range []<-chan struct{}{follower.l.Outbox(), follower.l.Inbox(), follower.l.Pauses()} {
		select {
		case <-ch:
		default:
		}
	}
	if _, _, err := d1.DestinationPause(context.Background(), "crm", "upgrade"); err != nil {
		t.Fatal(err)
	}
	holder.nudged(t, holder.l.Pauses(), "pauses")
	follower.nudged(t, follower.l.Pauses(), "pauses")
	follower.quiet(t, follower.l.Outbox(), "outbox")
	exec(t, d1, outboxInsert)
	holder.nudged(t, holder.l.Outbox(), "outbox")
	follower.nudged(t, follower.l.Outbox(), "outbox")
	exec(t, d1, inboxInsert)
	holder.nudged(t, holder.l.Inbox(), "inbox")
	follower.nudged(t, follower.l.Inbox(), "inbox")
	follower.quiet(t, follower.l.Outbox(), "outbox")
	follower.quiet(t, follower.l.Pauses(), "pauses")

	holder.stop()
	noSlot(t, d1, slot)
	st := follower.await(t, dialects.WakeupsListening)
	for st.Slot == "" {
		st = follower.await(t, dialects.WakeupsListening)
	}
	if !strings.HasPrefix(st.Slot, prefix) || st.Channel != "" {
		t.Fatalf("after the holder stopped: %+v, want a slot named %s*", st, prefix)
	}
	exec(t, d2, outboxInsert)
	follower.nudged(t, follower.l.Outbox(), "outbox")
}

// A holder whose lock connection is cut (as a crashed relay's session
// ends) lets another relay take the slot over; the relay that lost it
// follows the new holder; nothing is left holding a second slot.
func TestWakeupsAnotherRelayTakesOverWhenTheHolderIsCut(t *testing.T) {
	t.Parallel()
	d1, d2 := twoRelays(t)
	opts := postgres.WakeupOptions{Heartbeat: 50 * time.Millisecond, Retry: backoff.Capped{First: 200 * time.Millisecond, Max: time.Second}}
	a := listen(t, d1, opts)
	b := listen(t, d2, opts)
	holder, follower := holderAndFollower(t, a, b)
	slot := holder.l.Status().Slot
	prefix := slot[:strings.LastIndexByte(slot, '_')+1]
	ch := follower.l.Status().Channel
	// The holder's lock connection is the session that LISTENs no more and
	// holds the advisory lock: end it, as the server does for a dead client.
	// Its last statement forwarded the slot's start to the channel.
	testkit.Eventually(t, "the holder's lock connection is cut", 0, func() error {
		var cut int
		err := d1.Pool().QueryRow(context.Background(), `SELECT count(pg_terminate_backend(a.pid)) FROM pg_stat_activity a
			WHERE starts_with(a.query, 'SELECT pg_notify(' || quote_literal($1))
			  AND EXISTS (SELECT FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory' AND l.granted)`, ch).Scan(&cut)
		if err == nil && cut != 1 {
			err = fmt.Errorf("%d sessions cut", cut)
		}
		return err
	})
	testkit.Eventually(t, "the other relay holds the slot", 0, func() error {
		st := follower.l.Status()
		if st.Slot == "" || !strings.HasPrefix(st.Slot, prefix) {
			return fmt.Errorf("the follower is %+v", st)
		}
		return nil
	})
	testkit.Eventually(t, "the relay that was cut follows", 0, func() error {
		if st := holder.l.Status(); !st.Listening() || st.Channel != ch {
			return fmt.Errorf("the relay that was cut is %+v", st)
		}
		return nil
	})
	noSlot(t, d1, slot)
	if n := slotsOf(t, d1, prefix); n != 1 {
		t.Fatalf("%d slots named %s*, want 1", n, prefix)
	}
	// What the change of state nudged is gone; a nudge now comes from the
	// new holder's forwards.
	for _, ch := range []<-chan struct{}{holder.l.Outbox(), holder.l.Inbox(), holder.l.Pauses()} {
		select {
		case <-ch:
		default:
		}
	}
	exec(t, d1, outboxInsert)
	follower.nudged(t, follower.l.Outbox(), "outbox")
	holder.nudged(t, holder.l.Outbox(), "outbox")
}

// A server with room for one slot only: the first relay holds it, and a
// second relay, even one that insists on logical wake-ups, starts and
// listens through the first (it needs no slot of its own).
func TestWakeupsASecondRelayNeedsNoRoomForASlot(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a cluster of its own")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{TestSettings: true, Prefix: "queuebox-test-oneslot-", Settings: []string{"max_replication_slots=1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	d1 := openAt(t, c.URL(), "")
	if _, err := migrations.Up(ctx, d1); err != nil {
		t.Fatal(err)
	}
	d2 := openAt(t, c.URL(), "")
	opts := postgres.WakeupOptions{Heartbeat: 50 * time.Millisecond}
	a := listen(t, d1, opts)
	b := listen(t, d2, opts)
	if _, follower := holderAndFollower(t, a, b); follower != b {
		t.Fatalf("the second relay holds the slot: %+v", b.l.Status())
	}
	exec(t, d1, outboxInsert)
	b.nudged(t, b.l.Outbox(), "outbox")
}

// Two relays that set their wake-ups up as designed (the first takes the
// slot and probes until it streams, the second follows the first) say so
// at info: a warning is for what an operator should act on.
func TestWakeupsSettingUpAsDesignedIsNoWarning(t *testing.T) {
	t.Parallel()
	d1, d2 := twoRelays(t)
	var log1, log2 testlog.Buffer
	opts := postgres.WakeupOptions{Heartbeat: 50 * time.Millisecond, Logger: log1.Logger()}
	a := listen(t, d1, opts)
	opts.Logger = log2.Logger()
	b := listen(t, d2, opts)
	holderAndFollower(t, a, b)
	log1.WaitFor(t, `level=INFO msg="wake-ups: probing until logical replication is set up" reason="this relay takes over`)
	log2.WaitFor(t, `level=INFO msg="wake-ups: listening through the replica that holds this database's slot"`)
	for _, l := range []struct {
		name string
		log  *testlog.Buffer
	}{{"the relay that holds the slot", &log1}, {"the relay that follows it", &log2}} {
		for _, line := range strings.Split(l.log.String(), "\n") {
			if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
				t.Errorf("%s logged a warning while setting up as designed: %s", l.name, line)
			}
		}
	}
}
