package actors_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testkit"
)

// While a long transaction holds the database's horizon back, a replica
// behaves as under one (its claims are paced, its walks narrow: the
// planner's tests hold those rules on a clock of their own); a trickle of
// rows, each committed on its own, still arrives whole and in key order.
func TestATrickleArrivesInOrderWhileTheHorizonIsHeld(t *testing.T) {
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
	before := e.Stats.ClaimStatements.Load()
	for i := range n {
		h.insert(testkit.Row("order.created", testkit.Key(fmt.Sprintf("key-%d", i%50)), testkit.Payload(fmt.Sprintf(`{"i":%d,"fail":0}`, i))))
	}
	recv.WaitDelivered(t, n, 20*time.Second)
	if claims := e.Stats.ClaimStatements.Load() - before; claims == 0 || claims > n {
		t.Fatalf("%d claims for %d rows while the horizon was held", claims, n)
	}
	if dups := recv.CheckOrder(t); dups != 0 {
		t.Errorf("%d duplicates", dups)
	}
	if hz := e.Stats.Horizon.Load(); hz == nil || !hz.HeldAtRead(5*time.Second) {
		t.Fatal("the horizon was no longer seen held at the end")
	}
}
