package postgres

// The wake-up hub: one stream for every outbox of a database in a process
// (see "Many outboxes, one stream" in wakeshare.go).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/backoff"
)

// wakeRegistry holds the hubs of a process: one per server, database and
// role. Tests make registries of their own to act as separate processes.
type wakeRegistry struct {
	// group names the lock, the channel and the slot prefix of the hubs
	// (hubShare): empty in production, where every relay of a database
	// shares them; a test's own, so that parallel tests stay apart.
	group string
	mu    sync.Mutex
	hubs  map[string]*hub
}

// processWakeups is the registry of the process.
var processWakeups = &wakeRegistry{}

func (d *Dialect) wakeRegistry() *wakeRegistry {
	if d.wake != nil {
		return d.wake
	}
	return processWakeups
}

// slotPrefix starts the name of the slot of the registry's hubs.
func (r *wakeRegistry) slotPrefix() string { return hubShare(r.group).prefix }

// hubKey says which listeners may share a stream: those that reach the
// same database of the same server as the same role.
func hubKey(c *pgconn.Config) string {
	return fmt.Sprintf("%s\x00%d\x00%s\x00%s", c.Host, c.Port, c.Database, c.User)
}

// join adds l to the hub of its database, starting the hub when it is the
// first.
func (r *wakeRegistry) join(l *Listener) *hub {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := hubKey(&l.d.cfg.ConnConfig.Config)
	h := r.hubs[key]
	if h == nil {
		if r.hubs == nil {
			r.hubs = map[string]*hub{}
		}
		h = newHub(key, r.group)
		r.hubs[key] = h
	}
	h.add(l)
	return h
}

// leave takes l out of its hub; the last listener out stops the hub and
// waits until its connections are closed (and with them the slot dropped
// and the locks released).
func (r *wakeRegistry) leave(h *hub, l *Listener) {
	r.mu.Lock()
	last := h.remove(l)
	if last && r.hubs[h.key] == h {
		delete(r.hubs, h.key)
	}
	r.mu.Unlock()
	if last {
		h.cancel()
		<-h.done
	}
}

// hub runs the wake-ups of its members (the Listeners of one database in
// a process): it follows the relay that holds the database's lock, or
// holds it and streams for every outbox that its members and the other
// relays' hubs listen for.
type hub struct {
	key string
	// group is the registry's (hubShare); the cover keys carry it too.
	group string
	share share
	mu    sync.Mutex
	// members are the listeners; the hub's goroutine alone reads and
	// writes their check state (Listener.ready, recheckAt, tbl).
	members map[*Listener]struct{}
	// pids are the hub's sessions, which every member's dialect counts
	// as its own (OtherRelays).
	pids map[uint32]int
	// poke wakes the hub's goroutine: a member came or went, the stream
	// started, or it has news to forward.
	poke   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

func newHub(key, group string) *hub {
	ctx, cancel := context.WithCancel(context.Background())
	h := &hub{key: key, group: group, share: hubShare(group), members: map[*Listener]struct{}{}, pids: map[uint32]int{}, poke: make(chan struct{}, 1),
		cancel: cancel, done: make(chan struct{})}
	go h.run(ctx)
	return h
}

func (h *hub) add(l *Listener) {
	h.mu.Lock()
	h.members[l] = struct{}{}
	for pid := range h.pids {
		l.d.own.add(pid)
	}
	h.mu.Unlock()
	nudge(h.poke)
}

// remove reports whether l was the last member.
func (h *hub) remove(l *Listener) bool {
	h.mu.Lock()
	delete(h.members, l)
	for pid := range h.pids {
		l.d.own.remove(pid)
	}
	last := len(h.members) == 0
	h.mu.Unlock()
	nudge(h.poke)
	return last
}

func (h *hub) addPID(pid uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pids[pid]++
	for l := range h.members {
		l.d.own.add(pid)
	}
}

func (h *hub) removePID(pid uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pids[pid]--; h.pids[pid] <= 0 {
		delete(h.pids, pid)
	}
	for l := range h.members {
		l.d.own.remove(pid)
	}
}

// list is the members now, in the order of their publications.
func (h *hub) list() []*Listener {
	h.mu.Lock()
	out := make([]*Listener, 0, len(h.members))
	for l := range h.members {
		out = append(out, l)
	}
	h.mu.Unlock()
	slices.SortFunc(out, func(a, b *Listener) int {
		if c := compareStrings(a.pub, b.pub); c != 0 {
			return c
		}
		return compareStrings(fmt.Sprintf("%p", a), fmt.Sprintf("%p", b))
	})
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ready is the members whose last check passed.
func (h *hub) ready() []*Listener {
	var out []*Listener
	for _, l := range h.list() {
		if l.ready {
			out = append(out, l)
		}
	}
	return out
}

// timing is what the members ask of the hub: the shortest heartbeat and
// recheck among them, and the first one's backoff.
func (h *hub) timing() (beat, recheck time.Duration, retry backoff.Capped) {
	for i, l := range h.list() {
		if i == 0 {
			beat, recheck, retry = l.opts.Heartbeat, l.opts.Recheck, l.opts.Retry
			continue
		}
		beat, recheck = min(beat, l.opts.Heartbeat), min(recheck, l.opts.Recheck)
	}
	if beat <= 0 {
		beat = 10 * time.Second
	}
	if recheck <= 0 {
		recheck = 5 * time.Minute
	}
	if retry.First <= 0 {
		retry = backoff.Capped{First: 100 * time.Millisecond, Max: 30 * time.Second}
	}
	return beat, recheck, retry
}

// errNoneReady ends a round in which no member can listen: each says why
// (unavailable), and the hub asks again after the recheck.
var errNoneReady = errors.New("no outbox of this database can listen")

// run is the hub's life: rounds until the last member leaves, after a
// failure starting over after the backoff, or after the recheck when the
// server or every outbox was unavailable.
func (h *hub) run(ctx context.Context) {
	defer close(h.done)
	var retry *backoff.Capped // the first member's, once there is one
	var wait time.Duration
	for {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			case <-h.poke:
				// A member came: it is checked at once. (One that left
				// pokes too; the round that follows is a cheap one.)
				t.Stop()
			}
		}
		if len(h.list()) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-h.poke:
				continue
			}
		}
		if retry == nil {
			_, _, r := h.timing()
			retry = &r
		}
		err := h.round(ctx, retry)
		if ctx.Err() != nil {
			return
		}
		_, recheck, _ := h.timing()
		var u *unavailable
		switch {
		case errors.Is(err, errNoneReady):
			wait = recheck
		case errors.As(err, &u):
			for _, l := range h.list() {
				l.ready = false
				l.recheckAt = time.Now().Add(recheck)
				l.set(dialects.WakeupsUnavailable, u.reason, "", "")
			}
			wait = recheck
		default:
			for _, l := range h.list() {
				if l.ready {
					l.set(dialects.WakeupsReconnecting, err.Error(), "", "")
				}
			}
			wait = retry.Next()
		}
	}
}

// checkMembers checks the members that are new, unavailable and due for
// another look, or checked longer than a recheck ago (all: every member):
// an outbox whose publication went (its schema dropped) says so and
// leaves the stream, and one whose pauses publication came joins with it.
// A member the server cannot serve says why and is left out until its
// recheck; an error that is not about one outbox (the server cannot be
// reached) ends the round.
func (h *hub) checkMembers(ctx context.Context, all bool) error {
	_, recheck, _ := h.timing()
	for _, l := range h.list() {
		if !all && (l.ready && time.Since(l.checkedAt) < recheck || !l.ready && time.Now().Before(l.recheckAt)) {
			continue
		}
		tbl, err := l.check(ctx, false)
		var u *unavailable
		switch {
		case err == nil:
			l.tbl, l.ready, l.checkedAt = tbl, true, time.Now()
		case errors.As(err, &u):
			l.ready = false
			l.recheckAt = time.Now().Add(recheck)
			l.set(dialects.WakeupsUnavailable, u.reason, "", "")
		default:
			return err
		}
	}
	return nil
}

// round is one life of the token connection: the hub follows until the
// lock is its own, then holds the slot until something fails or ctx ends.
// Closing the token releases the locks and the LISTENs.
func (h *hub) round(ctx context.Context, retry *backoff.Capped) error {
	if err := h.checkMembers(ctx, true); err != nil {
		return err
	}
	ready := h.ready()
	if len(ready) == 0 {
		return errNoneReady
	}
	lead := ready[0]
	tok, heard, err := lead.dialToken(ctx)
	if err != nil {
		return err
	}
	pid := tok.PID()
	h.addPID(pid)
	defer h.removePID(pid)
	defer lead.close(tok)
	if err := h.follow(ctx, tok, heard, retry); err != nil {
		return err
	}
	// The lock is this hub's: it holds the slot. Nothing is forwarded to
	// it any more, so its members probe until its own slot streams.
	for _, l := range h.ready() {
		l.set(dialects.WakeupsConnecting, reasonTakingOver, "", "")
	}
	conn, lead, err := h.prepare(ctx)
	if err != nil {
		return err
	}
	return h.hold(ctx, tok, heard, conn, lead, retry)
}

// prepare checks that the server has room for the slot and opens the
// replication connection, through the first member that passes its check.
func (h *hub) prepare(ctx context.Context) (*pgconn.PgConn, *Listener, error) {
	_, recheck, _ := h.timing()
	for _, l := range h.ready() {
		_, err := l.check(ctx, true)
		var u *unavailable
		if errors.As(err, &u) && !u.room {
			// This outbox's own trouble (its publication went away).
			l.ready = false
			l.recheckAt = time.Now().Add(recheck)
			l.set(dialects.WakeupsUnavailable, u.reason, "", "")
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		conn, err := l.dial(ctx)
		return conn, l, err
	}
	return nil, nil, errNoneReady
}
