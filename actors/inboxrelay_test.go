package actors_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrecv"
	"github.com/queuebox/queuebox/sinks"
	nullsink "github.com/queuebox/queuebox/sinks/null"
)

// replica is a second engine on the harness's schema, with a dialect of its
// own, as another `queuebox run` process would be.
func (h *harness) replica(t *testing.T) *actors.Engine {
	t.Helper()
	d, err := postgres.Open(context.Background(), postgres.Options{URL: h.d.Pool().Config().ConnString(), Names: h.d.Names(), MaxConnections: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	o := h.opts
	o.Dialect = d
	e, err := actors.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	return e
}

// Sources store inbox rows in transactions that race the way concurrent
// webhook requests and consumers do: several aggregates per transaction,
// pauses, and a shared row lock that makes one transaction commit after
// another although it drew the smaller inbox sequence value. Two replicas
// relay the inbox at once. Every message becomes exactly one outbox row and
// one delivery, no relay fails, and at the receiver every aggregate's
// messages arrive in receive order (inbox sequence order).
func TestInboxRelayKeepsReceiveOrderWithTwoReplicas(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recv := testrecv.New(t, nil)
	h.routeAllTo(httpDest(t, recv.URL+"/in", nil))
	h.opts.Inbox = actors.InboxRelay{Enabled: true, MaxAttempts: 7, BatchSize: 13}
	ctx := context.Background()
	schema := h.d.Names().Schema
	inbox := pgx.Identifier{schema, "inbox"}.Sanitize()
	biz := pgx.Identifier{schema, "accounts"}.Sanitize()
	if _, err := h.d.Pool().Exec(ctx, `CREATE TABLE `+biz+` (id int PRIMARY KEY, balance int NOT NULL)
		; INSERT INTO `+biz+` SELECT g, 0 FROM generate_series(1, 3) AS g`); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.replica(t)

	const writers, txPerWriter, aggregates = 6, 30, 8
	var stored, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range txPerWriter {
				n, err := storeInbox(ctx, h, inbox, biz, rnd, fmt.Sprintf("w%d-t%d", w, i), aggregates)
				if err != nil {
					failed.Add(1)
					t.Errorf("a source's transaction failed: %v", err)
					continue
				}
				stored.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d source transactions failed", failed.Load())
	}
	total := stored.Load()
	h.waitState(dialects.Delivered, total, 2*time.Minute)
	st, err := h.d.InboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows[dialects.InboxRelayed] != total || st.Rows[dialects.InboxReceived] != 0 {
		t.Fatalf("inbox rows %v, want all %d relayed", st.Rows, total)
	}
	outbox := pgx.Identifier{schema, "outbox"}.Sanitize()
	var outRows, wrongAttempts int64
	if err := h.d.Pool().QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE max_attempts <> 7) FROM `+outbox).Scan(&outRows, &wrongAttempts); err != nil {
		t.Fatal(err)
	}
	if outRows != total || wrongAttempts != 0 {
		t.Fatalf("%d outbox rows (%d without max_attempts 7) for %d inbox rows", outRows, wrongAttempts, total)
	}
	if dups := recv.CheckOrder(t); dups != 0 {
		t.Errorf("%d duplicate deliveries without a fault", dups)
	}
	if got := recv.Delivered(); got != int(total) {
		t.Fatalf("the receiver accepted %d messages, want %d", got, total)
	}
	// Receive order: per aggregate, the first acceptances follow the inbox
	// sequence.
	seqOf := map[string]int64{}
	rows, err := h.d.Pool().Query(ctx, `SELECT id::text, sequence FROM `+inbox)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var seq int64
		if err := rows.Scan(&id, &seq); err != nil {
			t.Fatal(err)
		}
		seqOf[id] = seq
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	last, seen := map[string]int64{}, map[string]bool{}
	for _, q := range recv.Requests() {
		if q.Status >= 300 || seen[q.ID] {
			continue
		}
		seen[q.ID] = true
		s, ok := seqOf[q.ID]
		if !ok {
			t.Fatalf("delivered %s, which is no inbox row's id", q.ID)
		}
		if q.Key == "" {
			continue // unkeyed: no order
		}
		if l, ok := last[q.Key]; ok && s < l {
			t.Errorf("aggregate %s: inbox sequence %d delivered after %d", q.Key, s, l)
		}
		last[q.Key] = s
	}
	if strings.Contains(h.logs.String(), "inbox relay failed") {
		t.Errorf("a relay failed:\n%s", h.logs.String())
	}
}

// storeInbox is one source transaction: 1 to 4 inbox rows over random
// aggregates (one in five unkeyed), as businessTx runs them.
func storeInbox(ctx context.Context, h *harness, inbox, biz string, rnd *rand.Rand, prefix string, aggregates int) (int, error) {
	return businessTx(ctx, h, biz, rnd, 1+rnd.IntN(4), func(tx pgx.Tx, i int) error {
		var agg *string
		if rnd.IntN(5) > 0 {
			a := fmt.Sprintf("agg-%d", rnd.IntN(aggregates))
			agg = &a
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+inbox+` (source, message_id, topic, aggregate_id, payload)
			VALUES ('web', $1, 'in.event', $2, '{}')`, fmt.Sprintf("%s-%d", prefix, i), agg)
		return err
	})
}

// With the relay off, inbox rows stay received and no outbox row appears.
func TestInboxRelayOff(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recv := testrecv.New(t, nil)
	h.routeAllTo(httpDest(t, recv.URL+"/in", nil))
	ctx := context.Background()
	if _, err := h.d.InboxReceive(ctx, []dialects.InboxMessage{{Source: "web", MessageID: "m1", Topic: "t", Payload: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	h.insert(testkit.Row("marker"))
	h.start()
	h.waitState(dialects.Delivered, 1, time.Minute)
	st, err := h.d.InboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows[dialects.InboxReceived] != 1 || len(recv.Requests()) != 1 {
		t.Fatalf("inbox rows %v and %d deliveries with the relay off; want the row received and only the marker delivered", st.Rows, len(recv.Requests()))
	}
}

// countedInboxProbes counts the inbox probes that reach the database.
type countedInboxProbes struct {
	dialects.Dialect
	n atomic.Int64
}

func (c *countedInboxProbes) InboxProbe(ctx context.Context) (dialects.Probe, error) {
	c.n.Add(1)
	return c.Dialect.InboxProbe(ctx)
}

// A replica started on an inbox that received messages before, with none
// waiting now, looks at it at the idle pace (every 25 ms) from the start:
// where the sequence stands is no movement. Probing every 2 ms would make
// hundreds of probes in the first second.
func TestInboxRelayStartsAtTheIdlePace(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.routeAllTo(func() (sinks.Sink, error) { return nullsink.New(), nil })
	ctx := context.Background()
	if _, err := h.d.InboxReceive(ctx, []dialects.InboxMessage{{Source: "web", MessageID: "m1", Topic: "t", Payload: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.d.InboxRelay(ctx, dialects.InboxRelayParams{Limit: 10, MaxAttempts: 5}); err != nil {
		t.Fatal(err)
	}
	c := &countedInboxProbes{Dialect: h.d}
	h.opts.Dialect = c
	h.opts.Inbox = actors.InboxRelay{Enabled: true}
	h.start()
	time.Sleep(600 * time.Millisecond)
	// 600 ms at 25 ms is 24 probes, plus the relay polls; at 2 ms it
	// would be up to 300 (fewer on a loaded machine, never more).
	if n := c.n.Load(); n > 60 || n == 0 {
		t.Fatalf("%d inbox probes in the first 600 ms; want about 24 (one every 25 ms)", n)
	}
}

// An inbox that moves is probed at most every probe interval: a run that
// ends sooner than the interval waits out the rest of it rather than
// starting the next at once (which made about 4,000 probes in 500 ms).
func TestAMovingInboxIsProbedAtTheProbeInterval(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.routeAllTo(func() (sinks.Sink, error) { return nullsink.New(), nil })
	c := &countedInboxProbes{Dialect: h.d}
	h.opts.Dialect = c
	h.opts.ProbeInterval = 5 * time.Millisecond
	h.opts.Inbox = actors.InboxRelay{Enabled: true}
	e := h.start()
	ctx := context.Background()
	for i := range 3 {
		if _, err := h.d.InboxReceive(ctx, []dialects.InboxMessage{{Source: "web", MessageID: fmt.Sprintf("m%d", i), Topic: "t", Payload: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, "the three inbox messages are relayed and claimed", 5*time.Second,
		testkit.True(func() bool { return e.Stats.Claimed.Load() >= 3 }))
	// The inbox moved just now: the relay probes at the busy pace for a
	// second, 100 probes in 500 ms at 5 ms (fewer on a loaded machine).
	n0 := c.n.Load()
	time.Sleep(500 * time.Millisecond)
	if n := c.n.Load() - n0; n > 130 || n == 0 {
		t.Fatalf("%d inbox probes in 500 ms after the inbox moved; want at most about 100 (one every 5 ms)", n)
	}
}
