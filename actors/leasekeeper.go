package actors

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
	trackEntry struct {
		claim dialects.Claim
		pid   *actor.PID
	}
	trackClaims struct {
		lease   *lease
		entries []trackEntry
	}
	untrackClaims struct{ claims []dialects.Claim }
	renewTick     struct{}
	// liveTokens asks for the tokens of every claim still held.
	liveTokens struct{}
	renewDone  struct {
		sentAt time.Time
		leases []*lease
		lost   []dialects.Claim
		err    error
	}
)

type tracked struct {
	pid   *actor.PID
	lease *lease
	lost  bool
}

// leaseKeeper knows every in-flight claim and renews them all in one
// statement per tick (every claimTimeout/3). A renewal moves each claim's
// trust window forward; a claim the database no longer holds is reported to
// the actor holding it, which cancels that delivery and never writes the row.
type leaseKeeper struct {
	dialect dialects.Relay
	// leaseLength is how long each claim or renewal holds a row.
	leaseLength time.Duration
	clock       clock.Clock
	// bg ends when the engine stops; it bounds the renewals.
	bg  context.Context
	log *slog.Logger

	claims   map[uuid.UUID]*tracked
	leases   map[uuid.UUID]*lease // by token
	perLease map[uuid.UUID]int
	renewing bool
	failing  bool // renewals are failing (logged once, and once when they work again)
}

// newLeaseKeeper takes a lease keeper with its collaborators filled in and
// sets its starting state: no claims.
func newLeaseKeeper(k leaseKeeper) *leaseKeeper {
	k.claims, k.leases, k.perLease = map[uuid.UUID]*tracked{}, map[uuid.UUID]*lease{}, map[uuid.UUID]int{}
	return &k
}

func (k *leaseKeeper) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *trackClaims:
		k.leases[m.lease.token] = m.lease
		for _, t := range m.entries {
			k.claims[t.claim.ID] = &tracked{pid: t.pid, lease: m.lease}
			k.perLease[m.lease.token]++
		}
	case *untrackClaims:
		for _, c := range m.claims {
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
	case *renewTick:
		k.renew(ctx)
	case *liveTokens:
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
				k.log.Warn("lease renewal failing; deliveries stop starting when a claim's trust window ends", "error", m.err)
			}
			return
		}
		if k.failing {
			k.failing = false
			k.log.Info("lease renewal working again")
		}
		for _, l := range m.leases {
			l.extend(m.sentAt, k.leaseLength)
		}
		byPID := map[*actor.PID][]uuid.UUID{}
		for _, c := range m.lost {
			if t := k.claims[c.ID]; t != nil && t.lease.token == c.Token && !t.lost {
				t.lost = true
				byPID[t.pid] = append(byPID[t.pid], c.ID)
			}
		}
		for pid, ids := range byPID {
			ctx.Send(pid, &cancelClaims{ids: ids})
		}
	}
}

func (k *leaseKeeper) renew(ctx actor.Context) {
	if k.renewing || len(k.claims) == 0 {
		return
	}
	claims := make([]dialects.Claim, 0, len(k.claims))
	for id, t := range k.claims {
		if !t.lost {
			claims = append(claims, dialects.Claim{ID: id, Token: t.lease.token})
		}
	}
	leases := make([]*lease, 0, len(k.leases))
	for _, l := range k.leases {
		leases = append(leases, l)
	}
	k.renewing = true
	root, self := ctx.ActorSystem().Root, ctx.Self()
	dialect, bg, length := k.dialect, k.bg, k.leaseLength
	go func() {
		sentAt := k.clock.Now()
		qctx, cancel := context.WithTimeout(bg, length/3)
		lost, err := dialect.OutboxRenewLeases(qctx, claims, length)
		cancel()
		root.Send(self, &renewDone{sentAt: sentAt, leases: leases, lost: lost, err: err})
	}()
}
