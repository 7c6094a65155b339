package bootstrap

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testlog"
	"github.com/queuebox/queuebox/internal/testrecv"
	"github.com/queuebox/queuebox/migrations"
)

// One outbox's database that stops answering its claims (a transaction
// holds its outbox table locked, and holds that database's horizon back
// meanwhile) costs the other outboxes of the relay nothing: a row of
// another database's outbox committed during the hold is delivered as
// fast as before it, and the held outbox delivers everything, in key
// order, once the hold ends.
func TestAHeldOutboxLeavesTheOthersTheirLatency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	urlA, urlB := testdb.Database(t), testdb.Database(t)
	recv := testrecv.New(t, nil)
	l, err := Parse("q.yaml", []byte(fmt.Sprintf(`
outboxes:
  a: { database: { url: %q, wakeups: probe } }
  b: { database: { url: %q, wakeups: probe } }
outbox: { claimTimeoutMs: 5000 }
destinations: { hook: { type: http, url: %q } }
routes: [ { topicPattern: "#", destination: hook } ]
admin: { listen: "127.0.0.1:0" }
shutdown: { drainTimeoutMs: 5000 }
`, urlA, urlB, recv.URL+"/{{ topic }}")), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	open := func(url string) *postgres.Dialect {
		d, err := postgres.Open(ctx, postgres.Options{URL: url, Names: dialects.DefaultNames()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		if _, err := migrations.Up(ctx, d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	a, b := open(urlA), open(urlB)
	logs := &testlog.Buffer{}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	listening := make(chan struct{})
	go func() {
		done <- RunOutboxes(runCtx, l, logs.Logger(), RunOptions{AdminListening: func(string) { close(listening) }})
	}()
	<-listening

	// b's latency before the hold, then during it.
	latency := func(n int, topic string) []time.Duration {
		var took []time.Duration
		for i := range n {
			id := uuid.New()
			start := time.Now()
			if err := b.OutboxInsert(ctx, testkit.Rows(1, topic, nil, testkit.ID(id), testkit.Key(fmt.Sprint("b", i%3)))); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, "row "+id.String()+" of outbox b delivered", 20*time.Second, func() error {
				for _, r := range recv.Requests() {
					if r.ID == id.String() && r.Status < 300 {
						took = append(took, r.At.Sub(start))
						return nil
					}
				}
				return fmt.Errorf("not yet")
			})
		}
		return took
	}
	before := latency(10, "b.before")

	// The hold: a transaction on a's database locks a's outbox table
	// (claims, probes and the janitor's statements wait for it) and
	// inserts rows there that commit only when the hold ends.
	conn, err := pgx.Connect(ctx, urlA)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if _, err := tx.Exec(ctx, `INSERT INTO outbox (topic, key, payload) VALUES ('a.held', $1, '{"n": 1}')`, fmt.Sprint("a", i%3)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second) // a's claims are waiting for the lock now
	during := latency(20, "b.during")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	worst := func(ds []time.Duration) time.Duration {
		var w time.Duration
		for _, d := range ds {
			w = max(w, d)
		}
		return w
	}
	// Probes run every few milliseconds: a second is far above what a
	// delivery of b takes, and far below what waiting for a's lock costs.
	t.Logf("outbox b's slowest row: %v before the hold, %v during it", worst(before), worst(during))
	if w := worst(during); w > time.Second {
		t.Errorf("outbox b's rows took up to %v while a's table was held (before the hold: up to %v)", w, worst(before))
	}
	recv.WaitDelivered(t, 60, 30*time.Second)
	if dups := recv.CheckOrder(t); dups != 0 {
		t.Errorf("%d rows were delivered twice", dups)
	}
	var held int
	for _, r := range recv.Requests() {
		if r.Topic == "a.held" && r.Status < 300 {
			held++
		}
	}
	if held != 30 {
		t.Errorf("outbox a delivered %d of its 30 held rows after the hold", held)
	}
	testkit.Eventually(t, "every row of outbox a delivered in its table", 20*time.Second, func() error {
		var n int64
		if err := a.Pool().QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state <> 'delivered'`).Scan(&n); err != nil || n != 0 {
			return fmt.Errorf("%d rows not delivered (%v)", n, err)
		}
		return nil
	})
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("RunOutboxes: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("RunOutboxes did not return after its context ended")
	}
}
