package postgres_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
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

// listening is a listener that runs until the test ends, with the states
// it went through on a channel.
type listening struct {
	l      *postgres.Listener
	states chan dialects.WakeupStatus
	done   chan struct{}
	// stop ends the listener and waits until Run returned.
	stop func()
}

// listen starts a listener on d in mode, and waits until it listens; the
// nudges that the change of state sends are taken, so that the channels
// start empty.
func listen(t *testing.T, d *postgres.Dialect, opts postgres.WakeupOptions) *listening {
	t.Helper()
	lt := startListening(t, d, opts)
	lt.await(t, dialects.WakeupsListening)
	return lt
}

// startListening starts a listener on d in mode (logical when unset).
func startListening(t *testing.T, d *postgres.Dialect, opts postgres.WakeupOptions) *listening {
	t.Helper()
	lt := &listening{states: make(chan dialects.WakeupStatus, 64), done: make(chan struct{})}
	opts.OnStatus = func(st dialects.WakeupStatus) {
		select {
		case lt.states <- st:
		default:
		}
	}
	if opts.Mode == "" {
		opts.Mode = dialects.WakeupsLogical
	}
	var err error
	lt.l, err = d.Wakeups(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(lt.done)
		_ = lt.l.Run(ctx)
	}()
	lt.stop = func() {
		cancel()
		<-lt.done
	}
	t.Cleanup(lt.stop)
	return lt
}

// await waits until the listener reports state, and takes the nudges that
// the change sent on both channels.
func (lt *listening) await(t *testing.T, state dialects.WakeupState) dialects.WakeupStatus {
	t.Helper()
	timeout := time.After(testkit.Wait)
	for {
		select {
		case st := <-lt.states:
			if st.State != state {
				continue
			}
			lt.nudged(t, lt.l.Outbox(), "outbox")
			lt.nudged(t, lt.l.Inbox(), "inbox")
			lt.nudged(t, lt.l.Pauses(), "pauses")
			return st
		case <-timeout:
			t.Fatalf("the listener did not become %s; it is %+v", state, lt.l.Status())
		}
	}
}

// nudged waits for a nudge on ch.
func (lt *listening) nudged(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(testkit.Wait):
		t.Fatalf("no %s nudge; the listener is %+v", what, lt.l.Status())
	}
}

// quiet fails when ch holds a nudge, naming the changes of state since
// the last await (each nudges too).
func (lt *listening) quiet(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		var changes []dialects.WakeupStatus
		for len(lt.states) > 0 {
			changes = append(changes, <-lt.states)
		}
		t.Fatalf("a %s nudge that nothing committed (changes of state meanwhile: %+v)", what, changes)
	default:
	}
}

const (
	outboxInsert = `INSERT INTO {{t}} ({{c "topic"}}, {{c "payload"}}) VALUES ('wake', '{}')`
	inboxInsert  = `INSERT INTO {{it}} ({{ic "source"}}, {{ic "message_id"}}, {{ic "topic"}}, {{ic "payload"}}) VALUES ('src', gen_random_uuid()::text, 'wake', '{}')`
)

func render(t *testing.T, d *postgres.Dialect, sql string) string {
	t.Helper()
	q, err := dialects.Render("test", sql, dialects.TemplateFuncs(d.Names(), postgres.Quoting))
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// Committed inserts nudge their table's channel, once the transaction
// commits; a rolled-back insert nudges nothing; the listener acknowledges
// what it saw, so that the server keeps no WAL for it; and a stopped
// listener leaves no slot.
func TestWakeupsNudgeOnCommit(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	ctx := context.Background()
	lt := listen(t, d, postgres.WakeupOptions{Heartbeat: 50 * time.Millisecond})
	st := lt.l.Status()
	if st.Slot == "" || st.Kind() != "logical" || st.Reason != "" {
		t.Fatalf("listening: %+v", st)
	}

	// A rolled-back outbox insert, then a committed inbox insert: the
	// stream is in commit order, so once the inbox nudge is here, an
	// outbox nudge for the rollback would be too.
	tx, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, render(t, d, outboxInsert)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	exec(t, d, inboxInsert)
	lt.nudged(t, lt.l.Inbox(), "inbox")
	lt.quiet(t, lt.l.Outbox(), "outbox")

	// An open transaction's insert nudges at its commit, not before: the
	// nudge of a later, committed inbox insert comes first.
	tx, err = d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, render(t, d, outboxInsert)); err != nil {
		t.Fatal(err)
	}
	exec(t, d, inboxInsert)
	lt.nudged(t, lt.l.Inbox(), "inbox")
	lt.quiet(t, lt.l.Outbox(), "outbox")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	lt.nudged(t, lt.l.Outbox(), "outbox")
	lt.quiet(t, lt.l.Inbox(), "inbox")

	// Many commits while nobody takes the nudges: one waits, no send blocks.
	for range 5 {
		exec(t, d, outboxInsert)
	}
	exec(t, d, inboxInsert)
	lt.nudged(t, lt.l.Inbox(), "inbox")
	lt.nudged(t, lt.l.Outbox(), "outbox")
	lt.quiet(t, lt.l.Outbox(), "outbox")

	// The slot's confirmed position passes the last commit: the server may
	// recycle the WAL behind it.
	var lsn string
	if err := d.Pool().QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the slot acknowledges the position", 0, func() error {
		var behind bool
		err := d.Pool().QueryRow(ctx, `SELECT confirmed_flush_lsn < $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, st.Slot, lsn).Scan(&behind)
		if err == nil && behind {
			err = errors.New("confirmed_flush_lsn is behind")
		}
		return err
	})
}

// A pause and a resumption of a destination nudge the pauses channel at
// their commit, and nothing else does; without the publication of
// migration V20 the listener listens all the same, and says that pauses do
// not reach it.
func TestWakeupsNudgeOnPauses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := open(t, 0)
	lt := listen(t, d, postgres.WakeupOptions{Heartbeat: 50 * time.Millisecond})
	if !lt.l.Status().Pauses {
		t.Fatalf("listening with migration V20: %+v, want pauses heard", lt.l.Status())
	}
	exec(t, d, outboxInsert)
	lt.nudged(t, lt.l.Outbox(), "outbox")
	lt.quiet(t, lt.l.Pauses(), "pauses")
	if _, _, err := d.DestinationPause(ctx, "crm", "upgrade"); err != nil {
		t.Fatal(err)
	}
	lt.nudged(t, lt.l.Pauses(), "pauses")
	if _, _, err := d.DestinationPause(ctx, "crm", "a new reason"); err != nil {
		t.Fatal(err)
	}
	lt.nudged(t, lt.l.Pauses(), "pauses")
	if _, _, err := d.DestinationResume(ctx, "crm"); err != nil {
		t.Fatal(err)
	}
	lt.nudged(t, lt.l.Pauses(), "pauses")
	lt.quiet(t, lt.l.Outbox(), "outbox")
	lt.quiet(t, lt.l.Inbox(), "inbox")

	before := open(t, 19)
	lb := listen(t, before, postgres.WakeupOptions{Heartbeat: 50 * time.Millisecond})
	if lb.l.Status().Pauses {
		t.Fatalf("listening before migration V20: %+v, want pauses not heard", lb.l.Status())
	}
	if _, _, err := before.DestinationPause(ctx, "crm", "upgrade"); err != nil {
		t.Fatal(err)
	}
	exec(t, before, outboxInsert)
	lb.nudged(t, lb.l.Outbox(), "outbox")
	lb.quiet(t, lb.l.Pauses(), "pauses")
}

// The publication and the stream work with renamed tables and columns in a
// schema whose name has capitals (the publication's name then has them
// too, and must be quoted where the listener names it).
func TestWakeupsRenamedTablesInASchema(t *testing.T) {
	t.Parallel()
	schema := "Wake_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	base := testdb.ServerURL(t)
	admin, err := pgx.Connect(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(context.Background(), `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err == nil {
			_, _ = c.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
			c.Close(context.Background())
		}
	})
	names := dialects.Names{
		Schema: schema, Outbox: "Events_Out", Inbox: "events_in",
		OutboxColumns: map[string]string{"id": "event_id", "topic": "subject", "payload": "body"},
		InboxColumns:  map[string]string{"id": "msg_id", "message_id": "ext_id"},
	}
	d, err := postgres.Open(context.Background(), postgres.Options{URL: testdb.WithParam(base, "search_path", "pg_catalog"), Names: names})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	d.UseWakeupRegistry(postgres.NewWakeupRegistry(schema))
	if _, err := migrations.Up(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	lt := listen(t, d, postgres.WakeupOptions{})
	exec(t, d, outboxInsert)
	lt.nudged(t, lt.l.Outbox(), "outbox")
	lt.quiet(t, lt.l.Inbox(), "inbox")
	exec(t, d, inboxInsert)
	lt.nudged(t, lt.l.Inbox(), "inbox")
	lt.quiet(t, lt.l.Outbox(), "outbox")
}

// A role that may not replicate gets the fallback with auto, with the
// grant named; with logical, start fails with the same sentence.
func TestWakeupsRoleWithoutReplication(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	ctx := context.Background()
	schema := d.Names().Schema
	role, roleURL := testdb.RuntimeRole(t, d.Pool().Config().ConnConfig.ConnString(), schema)
	rd := openAt(t, roleURL, schema)
	want := "ALTER ROLE " + `"` + role + `"` + " REPLICATION"

	l, err := rd.Wakeups(ctx, postgres.WakeupOptions{Mode: dialects.WakeupsAuto})
	if err != nil {
		t.Fatal(err)
	}
	st := l.Status()
	if st.State != dialects.WakeupsUnavailable || st.Kind() != "probe" || !strings.Contains(st.Reason, want) {
		t.Fatalf("auto without REPLICATION: %+v, want unavailable with a reason that says %q", st, want)
	}
	_, err = rd.Wakeups(ctx, postgres.WakeupOptions{Mode: dialects.WakeupsLogical})
	if err == nil || !strings.Contains(err.Error(), "database.wakeups is logical, but") || !strings.Contains(err.Error(), want) {
		t.Fatalf("logical without REPLICATION: %v, want an error that says %q", err, want)
	}
}

// Without the publication (a schema migrated before V16), auto probes and
// says so; logical fails.
func TestWakeupsWithoutThePublication(t *testing.T) {
	t.Parallel()
	d := open(t, 15)
	l, err := d.Wakeups(context.Background(), postgres.WakeupOptions{Mode: dialects.WakeupsAuto})
	if err != nil {
		t.Fatal(err)
	}
	want := "the publication " + d.Names().Publication() + " does not exist"
	if st := l.Status(); st.State != dialects.WakeupsUnavailable || !strings.Contains(st.Reason, want) {
		t.Fatalf("auto before V16: %+v, want unavailable: %s", st, want)
	}
	if _, err := d.Wakeups(context.Background(), postgres.WakeupOptions{Mode: dialects.WakeupsLogical}); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("logical before V16: %v, want: %s", err, want)
	}
}

// With probe, the listener is off and never connects.
func TestWakeupsProbeNeverConnects(t *testing.T) {
	t.Parallel()
	schema, u := testdb.Schema(t)
	app := "wake-probe-" + schema
	d := openAt(t, testdb.WithParam(u, "application_name", app), schema)
	if _, err := migrations.Up(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	l, err := d.Wakeups(context.Background(), postgres.WakeupOptions{Mode: dialects.WakeupsProbe})
	if err != nil {
		t.Fatal(err)
	}
	if st := l.Status(); st.State != dialects.WakeupsOff || st.Kind() != "probe" || st.Reason != "database.wakeups is probe" {
		t.Fatalf("probe: %+v", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var walsenders int
	if err := d.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND backend_type = 'walsender'`, app).Scan(&walsenders); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil || walsenders != 0 {
		t.Fatalf("probe: Run returned %v; %d replication connections", err, walsenders)
	}
}

// On a server without logical replication (wal_level = replica, as on
// many managed services), the migrations still apply, auto probes and
// names the setting, and logical fails with the same sentence.
func TestWakeupsWithoutLogicalReplication(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a cluster of its own")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{TestSettings: true, Prefix: "queuebox-test-replica-", WALLevel: "replica"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	d, err := postgres.Open(ctx, postgres.Options{URL: c.URL(), Names: dialects.DefaultNames()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	if _, err := migrations.Up(ctx, d); err != nil {
		t.Fatalf("the migrations on a server without logical replication: %v", err)
	}
	want := "wal_level is replica, and logical replication needs wal_level = logical"
	l, err := d.Wakeups(ctx, postgres.WakeupOptions{Mode: dialects.WakeupsAuto})
	if err != nil {
		t.Fatal(err)
	}
	if st := l.Status(); st.State != dialects.WakeupsUnavailable || !strings.Contains(st.Reason, want) {
		t.Fatalf("auto on wal_level = replica: %+v, want: %s", st, want)
	}
	if _, err := d.Wakeups(ctx, postgres.WakeupOptions{Mode: dialects.WakeupsLogical}); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("logical on wal_level = replica: %v, want: %s", err, want)
	}
}

// A replication connection lost mid-run (its walsender terminated): the
// listener says so, reconnects with a new slot, and nudges again; the old
// slot is gone.
func TestWakeupsReconnectAfterALostConnection(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	ctx := context.Background()
	lt := listen(t, d, postgres.WakeupOptions{Retry: backoff.Capped{First: 10 * time.Millisecond, Max: 100 * time.Millisecond}})
	first := lt.l.Status().Slot
	var killed bool
	if err := d.Pool().QueryRow(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1`, first).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the walsender of %s: %v %v", first, killed, err)
	}
	st := lt.await(t, dialects.WakeupsReconnecting)
	if st.Kind() != "probe" || st.Reason == "" {
		t.Fatalf("after the loss: %+v", st)
	}
	again := lt.await(t, dialects.WakeupsListening)
	if again.Slot == "" || again.Slot == first {
		t.Fatalf("reconnected with slot %q, the first was %q", again.Slot, first)
	}
	exec(t, d, outboxInsert)
	lt.nudged(t, lt.l.Outbox(), "outbox")
	noSlot(t, d, first)
}

// noSlot waits until the server has no slot of that name.
func noSlot(t *testing.T, d *postgres.Dialect, slot string) {
	t.Helper()
	testkit.Eventually(t, "the slot "+slot+" is dropped", 0, func() error {
		var n int
		if err := d.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%s is still there", slot)
		}
		return nil
	})
}

// A relay killed with SIGKILL leaves no slot: the slot is temporary, and
// the server drops it when the session ends. The relay is this test binary
// again, running TestWakeupsListenerProcess.
func TestWakeupsKilledRelayLeavesNoSlot(t *testing.T) {
	t.Parallel()
	schema, u := testdb.Schema(t)
	d := openAt(t, u, schema)
	if _, err := migrations.Up(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	cmd := osexec.Command(os.Args[0], "-test.run=^TestWakeupsListenerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "QUEUEBOX_TEST_DATABASE_URL="+testdb.ServerURL(t), "QUEUEBOX_WAKEUPS_LISTENER_SCHEMA="+schema)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	slot := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if s, ok := strings.CutPrefix(sc.Text(), "listening on slot "); ok {
				slot <- s
				return
			}
		}
		close(slot)
	}()
	var name string
	select {
	case s, ok := <-slot:
		if !ok {
			t.Fatal("the relay process ended without listening")
		}
		name = s
	case <-time.After(testkit.Wait):
		t.Fatal("the relay process did not listen")
	}
	var active bool
	if err := d.Pool().QueryRow(context.Background(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1 AND temporary`, name).Scan(&active); err != nil || !active {
		t.Fatalf("slot %s: active=%v %v, want an active temporary slot", name, active, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	noSlot(t, d, name)
}

// TestWakeupsListenerProcess is the relay of TestWakeupsKilledRelayLeavesNoSlot:
// it listens, prints its slot and waits to be killed.
func TestWakeupsListenerProcess(t *testing.T) {
	schema := os.Getenv("QUEUEBOX_WAKEUPS_LISTENER_SCHEMA")
	if schema == "" {
		t.Skip("the relay process of TestWakeupsKilledRelayLeavesNoSlot")
	}
	names := dialects.DefaultNames()
	names.Schema = schema
	d, err := postgres.Open(context.Background(), postgres.Options{URL: testdb.ServerURL(t), Names: names})
	if err != nil {
		t.Fatal(err)
	}
	d.UseWakeupRegistry(postgres.NewWakeupRegistry(schema))
	l, err := d.Wakeups(context.Background(), postgres.WakeupOptions{Mode: dialects.WakeupsLogical, OnStatus: func(st dialects.WakeupStatus) {
		if st.Listening() {
			fmt.Printf("listening on slot %s\n", st.Slot)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Run(context.Background())
}
