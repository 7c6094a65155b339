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
	first.Extend(time.Now(), time.Minute) // trusted, as if renewed for its other rows
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
	if first.Trusted(id, time.Now()) {
		t.Fatal("the earlier claim still trusts the row claimed again: its actor could deliver it before it reads the cancel")
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

// renewer answers renewals: the rows in lost are the database's no more.
// Only the lease keeper's reading of a renewal's answer is under test here;
// what the database answers is the dialects' conformance suite's.
type renewer struct {
	dialects.Relay
	lost map[uuid.UUID]bool
}

func (r renewer) OutboxRenewLeases(_ context.Context, claims []dialects.Claim, _ time.Duration) ([]dialects.Claim, error) {
	var lost []dialects.Claim
	for _, c := range claims {
		if r.lost[c.ID] {
			lost = append(lost, c)
		}
	}
	return lost, nil
}

// A renewal that finds some rows of a claim taken by another replica (a
// replica continued after a stop longer than its lease) extends the trust
// of the rows it renewed and never that of the lost ones, even before
// their actor has heard that they are lost: a delivery that starts in
// between must not send a row another replica delivered meanwhile.
func TestARenewalNeverTrustsTheRowsItFoundLost(t *testing.T) {
	system := actor.NewActorSystem()
	defer system.Shutdown()
	root := system.Root
	kept, taken := uuid.New(), uuid.New()
	clk := clock.NewFake(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	lease := NewLease(uuid.New(), 0)
	lease.Extend(clk.Now(), 3*time.Second)
	// The actor never answers: it stands for one that has not yet read
	// its CancelClaims when the delivery comes up.
	holder := root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	keeper := root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return NewLeaseKeeper(LeaseKeeper{Dialect: renewer{lost: map[uuid.UUID]bool{taken: true}}, LeaseLength: 3 * time.Second,
			Clock: clk, BG: context.Background(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}))
	root.Send(keeper, &Track{Lease: lease, Entries: []TrackEntry{
		{Claim: dialects.Claim{ID: kept, Token: lease.Token()}, PID: holder},
		{Claim: dialects.Claim{ID: taken, Token: lease.Token()}, PID: holder}}})
	// The replica was stopped past its lease: neither row is trusted.
	clk.Advance(6 * time.Second)
	if lease.Trusted(kept, clk.Now()) || lease.Trusted(taken, clk.Now()) {
		t.Fatal("a lease trusted twice its length after it was sent")
	}
	root.Send(keeper, &RenewTick{})
	deadline := time.Now().Add(5 * time.Second)
	for !lease.Trusted(kept, clk.Now()) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !lease.Trusted(kept, clk.Now()) {
		t.Fatal("the renewed row is not trusted after its renewal")
	}
	if lease.Trusted(taken, clk.Now()) {
		t.Fatal("the row the renewal found lost is trusted again: a delivery starting now would race the replica that took it")
	}
	// A later renewal moves the window again, for the renewed row only.
	clk.Advance(time.Second)
	root.Send(keeper, &RenewTick{})
	later := clk.Now().Add(2 * time.Second) // past the first renewal's window
	for !lease.Trusted(kept, later) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !lease.Trusted(kept, later) {
		t.Fatal("the second renewal did not move the renewed row's window")
	}
	if lease.Trusted(taken, clk.Now()) {
		t.Fatal("a later renewal trusted the lost row again")
	}
}
