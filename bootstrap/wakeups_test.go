package bootstrap

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/admin"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testlog"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// wakeRelay is a relay run with a given database.wakeups, on a database
// of its own, delivering to a test receiver.
type wakeRelay struct {
	e     *actors.Engine
	d     *postgres.Dialect
	recv  *testrecv.Receiver
	admin string
	logs  *testlog.Buffer
}

func startWakeRelay(t *testing.T, wakeups string) *wakeRelay {
	t.Helper()
	// A database of its own: the relays of a database share one wake-up
	// slot, whichever process holds it, and these tests look at the slot.
	dbURL := testdb.Database(t)
	recv := testrecv.New(t, nil)
	cfg := Defaults()
	cfg.Database.URL, cfg.Database.Wakeups = dbURL, wakeups
	cfg.Shutdown.DrainTimeoutMs = 5000
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Destinations = map[string]*DestinationConfig{"hook": {Type: "http", URL: recv.URL + "/events/{{ topic }}"}}
	cfg.Routes = []RouteConfig{{TopicPattern: "#", Destination: "hook"}}
	l, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := openDialect(t, l)
	r := &wakeRelay{d: d.(*postgres.Dialect), recv: recv, logs: &testlog.Buffer{}}
	ctx, stop := context.WithCancel(context.Background())
	started, listening, done := make(chan *actors.Engine, 1), make(chan string, 1), make(chan error, 1)
	go func() {
		done <- Run(ctx, l, d, r.logs.Logger(), RunOptions{Migrate: true,
			Started:        func(e *actors.Engine) { started <- e },
			AdminListening: func(url string) { listening <- url }})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	r.admin = <-listening
	select {
	case r.e = <-started:
	case err := <-done:
		t.Fatalf("Run returned before the engine started: %v\n%s", err, r.logs.String())
	}
	return r
}

// wakeups reads what wakes the relay from its admin API.
func (r *wakeRelay) wakeups(t *testing.T) admin.WakeupsView {
	t.Helper()
	res, err := http.Get(r.admin + "/api/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var v admin.StatsView
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	if v.Wakeups == nil {
		return admin.WakeupsView{}
	}
	return *v.Wakeups
}

func (r *wakeRelay) waitKind(t *testing.T, kind string) admin.WakeupsView {
	t.Helper()
	var v admin.WakeupsView
	testkit.Eventually(t, "the relay is woken by "+kind, time.Minute, func() error {
		if v = r.wakeups(t); v.Kind != kind {
			return fmt.Errorf("woken by %q (%s: %s)", v.Kind, v.State, v.Reason)
		}
		return nil
	})
	return v
}

// deliverOne inserts a row once the relay is idle, and waits for it.
func (r *wakeRelay) deliverOne(t *testing.T) {
	t.Helper()
	testkit.Eventually(t, "the relay is idle", time.Minute, testkit.True(r.e.Stats.Idle.Load))
	before := r.recv.Delivered()
	if err := r.d.OutboxInsert(context.Background(), []dialects.NewRow{testkit.Row("wake.up")}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the row is delivered", time.Minute, testkit.True(func() bool { return r.recv.Delivered() > before }))
}

// With logical replication, an idle relay is woken by a nudge when a row
// commits. (For a moment after it begins to listen it also probes a
// little, so a probe may find the row first; the nudge comes all the same.)
func TestAnIdleRelayIsWokenByLogicalReplication(t *testing.T) {
	t.Parallel()
	r := startWakeRelay(t, "logical")
	v := r.waitKind(t, "logical")
	if v.State != dialects.WakeupsListening || v.Slot == "" {
		t.Fatalf("wake-ups %+v, want listening on a slot", v)
	}
	nudges := r.e.Stats.Nudges.Load()
	r.deliverOne(t)
	testkit.Eventually(t, "a nudge for the row", 10*time.Second,
		testkit.True(func() bool { return r.e.Stats.Nudges.Load() > nudges }))
}

// Without logical replication (probe), the relay says so and finds rows by
// probing.
func TestARelayThatProbesSaysSoAndDelivers(t *testing.T) {
	t.Parallel()
	r := startWakeRelay(t, "probe")
	v := r.waitKind(t, "probe")
	if v.State != dialects.WakeupsOff || v.Reason == "" {
		t.Fatalf("wake-ups %+v, want off with a reason", v)
	}
	testkit.Eventually(t, "the relay is idle", time.Minute, testkit.True(r.e.Stats.Idle.Load))
	nudges := r.e.Stats.Nudges.Load() // the source's state, once at start
	r.deliverOne(t)
	if n := r.e.Stats.Nudges.Load() - nudges; n != 0 {
		t.Fatalf("%d nudges for a row while probing", n)
	}
}

// The replication connection lost mid-run: the relay probes while the
// listener reconnects, delivers meanwhile, and listens again on a new slot;
// the old slot is gone.
func TestARelayProbesWhileItsReplicationConnectionIsLost(t *testing.T) {
	t.Parallel()
	r := startWakeRelay(t, "logical")
	old := r.waitKind(t, "logical")
	ctx := context.Background()
	var killed bool
	if err := r.d.Pool().QueryRow(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1`, old.Slot).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminating the walsender of %s: %v %v", old.Slot, killed, err)
	}
	testkit.Eventually(t, "the relay notices the lost connection", time.Minute, func() error {
		if v := r.wakeups(t); v.Kind == "logical" && v.Slot == old.Slot {
			return fmt.Errorf("still listening on %s", v.Slot)
		}
		return nil
	})
	r.deliverOne(t)
	now := r.waitKind(t, "logical")
	if now.Slot == old.Slot {
		t.Fatalf("listening again on the old slot %s", now.Slot)
	}
	var left int
	if err := r.d.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, old.Slot).Scan(&left); err != nil || left != 0 {
		t.Fatalf("the lost connection's slot is still there (%d, %v)", left, err)
	}
	// A moment after it listens again, a relay still probes a little (a
	// commit while it reconnected may have sent no nudge), and a probe may
	// find the row first; the row's nudge comes all the same.
	nudges := r.e.Stats.Nudges.Load()
	r.deliverOne(t)
	testkit.Eventually(t, "a nudge for the row after reconnecting", 10*time.Second,
		testkit.True(func() bool { return r.e.Stats.Nudges.Load() > nudges }))
}
