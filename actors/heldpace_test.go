package actors_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testkit"
)

// While a long transaction holds the database's horizon back, every walk in
// schedule order reads the entries of the rows that became due within its
// margin, which the transaction keeps. A replica whose last claim was not
// full then starts claims no closer together than 5 ms, so that each takes
// more rows for the same reads: a trickle of rows, one every 2 ms or so,
// makes about a claim per row without the wait. Every row still arrives, in key
// order.
func TestClaimsWaitBetweenThemWhileTheHorizonIsHeld(t *testing.T) {
	t.Parallel()
	h, recv := probeOnly(t)
	ctx := context.Background()
	tx, err := h.d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
		t.Fatal(err)
	}
	e := h.start()
	testkit.Eventually(t, "the replica sees the horizon held for 5 s", 20*time.Second, testkit.True(func() bool {
		hz := e.Stats.Horizon.Load()
		return hz != nil && hz.HeldAtRead(5*time.Second)
	}))
	const n = 300
	before, start := e.Stats.ClaimStatements.Load(), time.Now()
	for i := range n {
		h.insert(testkit.Row("order.created", testkit.Key(fmt.Sprintf("key-%d", i%50)), testkit.Payload(fmt.Sprintf(`{"i":%d,"fail":0}`, i))))
		time.Sleep(time.Millisecond)
	}
	recv.WaitDelivered(t, n, 20*time.Second)
	claims, took := e.Stats.ClaimStatements.Load()-before, time.Since(start)
	if most := int64(took/(5*time.Millisecond)) + 3; claims > most {
		t.Fatalf("%d claims in %s for %d rows while the horizon was held: want at most %d (one per 5 ms)", claims, took.Round(time.Millisecond), n, most)
	}
	if claims == 0 {
		t.Fatal("no claim counted")
	}
	if dups := recv.CheckOrder(t); dups != 0 {
		t.Errorf("%d duplicates", dups)
	}
	t.Logf("%d claims in %s for %d rows", claims, took.Round(time.Millisecond), n)
}
