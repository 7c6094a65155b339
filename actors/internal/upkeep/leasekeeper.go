package upkeep

import (
	"context"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/clock"
)

// Messages of the lease keeper.
type (
	// TrackEntry is one claimed row and the actor that holds it. A row
	// several actors hold (a fan-out row's units) has an entry for each; a
	// row no actor holds has a nil PID.
	TrackEntry struct {
		Claim dialects.Claim
		PID   *actor.PID
	}
	// Track: the claimer dispatched the rows of a claim.
	Track struct {
		Lease   *Lease
		Entries []TrackEntry
	}
	// Untrack: the rows' outcomes are written (or their claims lost).
	Untrack struct{ Claims []dialects.Claim }
	// RenewTick: renew every claim held.
	RenewTick struct{}
	// LiveTokens asks for the tokens of every claim still held.
	LiveTokens struct{}
	// CancelClaims tells the actor holding them that these claims are the
	// database's no more: cancel their deliveries, write nothing for them.
	// (The same row may be held under a newer claim by then.)
	CancelClaims struct{ Claims []dialects.Claim }
	renewDone    struct {
		sentAt time.Time
		leases []*Lease
		lost   []dialects.Claim
		err    error
	}
)

type tracked struct {
	pid *actor.PID
	// more are the other actors that hold the row (a fan-out row's).
	more  []*actor.PID
	lease *Lease
	lost  bool
}

// hold adds pid to the actors that hold the row.
func (t *tracked) hold(pid *actor.PID) {
	if pid == nil || pid.Equal(t.pid) {
		return
	}
	for _, p := range t.more {
		if p.Equal(pid) {
			return
		}
	}
	if t.pid == nil {
		t.pid = pid
		return
	}
	t.more = append(t.more, pid)
}

// LeaseKeeper knows every in-flight claim and renews them all in one
// statement per tick (every claimTimeout/3). A renewal moves each claim's
// trust window forward; a claim the database no longer holds is reported to
// the actor holding it, which cancels that delivery and never writes the row.
type LeaseKeeper struct {
	Dialect dialects.Relay
	// LeaseLength is how long each claim or renewal holds a row.
	LeaseLength time.Duration
	Clock       clock.Clock
	// BG ends when the engine stops; it bounds the renewals.
	BG  context.Context
	Log *slog.Logger

	claims   map[uuid.UUID]*tracked
	leases   map[uuid.UUID]*Lease // by token
	perLease map[uuid.UUID]int
	renewing bool
	failing  bool // renewals are failing (logged once, and once when they work again)
}

// NewLeaseKeeper takes a lease keeper with its collaborators filled in and
// sets its starting state: no claims.
func NewLeaseKeeper(k LeaseKeeper) *LeaseKeeper {
	k.claims, k.leases, k.perLease = map[uuid.UUID]*tracked{}, map[uuid.UUID]*Lease{}, map[uuid.UUID]int{}
	return &k
}

// Receive is the lease keeper's actor.
func (k *LeaseKeeper) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *Track:
		k.leases[m.Lease.token] = m.Lease
		for _, t := range m.Entries {
			c := k.claims[t.Claim.ID]
			if c != nil && c.lease == m.Lease {
				c.hold(t.PID)
				continue
			}
			if c != nil {
				k.replaced(ctx, t.Claim.ID, c)
			}
			k.claims[t.Claim.ID] = &tracked{pid: t.PID, lease: m.Lease}
			k.perLease[m.Lease.token]++
		}
	case *Untrack:
		for _, c := range m.Claims {
			t := k.claims[c.ID]
			if t == nil || t.lease.token != c.Token {
				continue
			}
			delete(k.claims, c.ID)
			if k.perLease[c.Token]--; k.perLease[c.Token] <= 0 {
				delete(k.perLease, c.Token)
				delete(k.leases, c.Token)
			}
		}
	case *RenewTick:
		k.renew(ctx)
	case *LiveTokens:
		tokens := make([]uuid.UUID, 0, len(k.leases))
		for t := range k.leases {
			tokens = append(tokens, t)
		}
		ctx.Respond(tokens)
	case *renewDone:
		k.renewing = false
		if m.err != nil {
			if !k.failing {
				k.failing = true
				k.Log.Warn("lease renewal failing; deliveries stop starting when a claim's trust window ends", "error", m.err)
			}
			return
		}
		if k.failing {
			k.failing = false
			k.Log.Info("lease renewal working again")
		}
		// The lost rows first: the renewal extends their claim's window for
		// the rows it did renew, and a delivery that reads the new window
		// must already see these rows lost (Lease.Trusted). Their actors
		// hear of it below, but a delivery may come up before that message.
		lostOf := map[*Lease][]uuid.UUID{}
		for _, c := range m.lost {
			if l := k.leases[c.Token]; l != nil {
				lostOf[l] = append(lostOf[l], c.ID)
			}
		}
		for l, ids := range lostOf {
			l.Lose(ids...)
		}
		for _, l := range m.leases {
			l.Extend(m.sentAt, k.LeaseLength)
		}
		byPID := map[*actor.PID][]dialects.Claim{}
		for _, c := range m.lost {
			if t := k.claims[c.ID]; t != nil && t.lease.token == c.Token && !t.lost {
				t.lost = true
				for _, pid := range append([]*actor.PID{t.pid}, t.more...) {
					if pid != nil {
						byPID[pid] = append(byPID[pid], c)
					}
				}
			}
		}
		for pid, claims := range byPID {
			ctx.Send(pid, &CancelClaims{Claims: claims})
		}
	}
}

// replaced forgets the claim t of row id, which this replica claimed again
// (its lease had passed, and the row went back to pending): the database
// holds it no more, so the actors that still hold it cancel it.
func (k *LeaseKeeper) replaced(ctx actor.Context, id uuid.UUID, t *tracked) {
	old := dialects.Claim{ID: id, Token: t.lease.token}
	// The old claim's lease may go on for its other rows: this one is never
	// trusted under it again, even before its actors read the message.
	t.lease.Lose(id)
	if k.perLease[old.Token]--; k.perLease[old.Token] <= 0 {
		delete(k.perLease, old.Token)
		delete(k.leases, old.Token)
	}
	if t.lost {
		return
	}
	for _, pid := range append([]*actor.PID{t.pid}, t.more...) {
		if pid != nil {
			ctx.Send(pid, &CancelClaims{Claims: []dialects.Claim{old}})
		}
	}
}

func (k *LeaseKeeper) renew(ctx actor.Context) {
	if k.renewing || len(k.claims) == 0 {
		return
	}
	claims := make([]dialects.Claim, 0, len(k.claims))
	for id, t := range k.claims {
		if !t.lost {
			claims = append(claims, dialects.Claim{ID: id, Token: t.lease.token})
		}
	}
	leases := make([]*Lease, 0, len(k.leases))
	for _, l := range k.leases {
		leases = append(leases, l)
	}
	k.renewing = true
	root, self := ctx.ActorSystem().Root, ctx.Self()
	dialect, bg, length := k.Dialect, k.BG, k.LeaseLength
	go func() {
		sentAt := k.Clock.Now()
		qctx, cancel := context.WithTimeout(bg, length/3)
		lost, err := dialect.OutboxRenewLeases(qctx, claims, length)
		cancel()
		root.Send(self, &renewDone{sentAt: sentAt, leases: leases, lost: lost, err: err})
	}()
}
