package upkeep

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/clock"
)

// cancels records the CancelClaims an actor receives.
type cancels struct {
	mu     sync.Mutex
	claims []dialects.Claim
}

func (c *cancels) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*CancelClaims); ok {
		c.mu.Lock()
		c.claims = append(c.claims, m.Claims...)
		c.mu.Unlock()
	}
}

func (c *cancels) got() []dialects.Claim {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.claims)
}

// A row several actors hold (a fan-out row's units) is renewed once; a row
// this replica claims again cancels its earlier claim at every actor that
// held it, and that claim's lease is no longer among the live ones.
func TestARowClaimedAgainCancelsItsEarlierClaim(t *testing.T) {
	system := actor.NewActorSystem()
	defer system.Shutdown()
	root := system.Root
	a, b := &cancels{}, &cancels{}
	pa, pb := root.Spawn(actor.PropsFromProducer(func() actor.Actor { return a })), root.Spawn(actor.PropsFromProducer(func() actor.Actor { return b }))
	keeper := root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return NewLeaseKeeper(LeaseKeeper{LeaseLength: time.Minute, Clock: clock.Wall{}, BG: context.Background(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}))
	first, second := NewLease(uuid.New(), 0), NewLease(uuid.New(), 0)
	id := uuid.New()
	root.Send(keeper, &Track{Lease: first, Entries: []TrackEntry{{Claim: dialects.Claim{ID: id, Token: first.Token()}, PID: pa},
		{Claim: dialects.Claim{ID: id, Token: first.Token()}, PID: pb}, {Claim: dialects.Claim{ID: id, Token: first.Token()}, PID: pa}}})
	root.Send(keeper, &Track{Lease: second, Entries: []TrackEntry{{Claim: dialects.Claim{ID: id, Token: second.Token()}, PID: pa}}})
	res, err := root.RequestFuture(keeper, &LiveTokens{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if tokens := res.([]uuid.UUID); !slices.Equal(tokens, []uuid.UUID{second.Token()}) {
		t.Fatalf("live tokens %v, want only the second claim's %v", tokens, second.Token())
	}
	want := []dialects.Claim{{ID: id, Token: first.Token()}}
	deadline := time.Now().Add(5 * time.Second)
	for (len(a.got()) == 0 || len(b.got()) == 0) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !slices.Equal(a.got(), want) || !slices.Equal(b.got(), want) {
		t.Fatalf("cancelled at a %v and b %v; want the earlier claim %v once at each", a.got(), b.got(), want)
	}
}
