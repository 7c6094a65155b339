package postgres

// The holder's side of the shared stream (see wakeshare.go): the stream,
// read on its own goroutine, and the control of the token connection,
// which decides what the stream covers, holds the cover locks, hears the
// followers' announcements and forwards to them.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"golang.org/x/sync/errgroup"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/backoff"
)

// A stream grows to a new outbox once the outboxes stop coming for
// settle, or after settleAtMost however they keep coming: a relay that
// starts with fifty outboxes moves its stream a few times, not fifty (its
// new outboxes probe meanwhile). Outboxes that go leave it after
// settleAtMost.
const (
	settle       = 500 * time.Millisecond
	settleAtMost = 2 * time.Second
)

// target is where a change to a table goes: the outbox of a publication,
// and which of its channels.
type target struct {
	pub string
	bit uint32
}

// streamSet is what one run of the stream covers.
type streamSet struct {
	// slot is the slot that streams it, once one does.
	slot    string
	wakes   map[string]outboxWake // by publication
	pubs    []string              // publication_names: every wake's publications
	targets map[relation][]target
}

func newStreamSet(wakes map[string]outboxWake) *streamSet {
	s := &streamSet{wakes: wakes, targets: map[relation][]target{}}
	add := func(r [2]string, t target) {
		if r[1] != "" {
			k := relation{r[0], r[1]}
			s.targets[k] = append(s.targets[k], t)
		}
	}
	for pub, w := range wakes {
		s.pubs = append(s.pubs, pub)
		if w.Pauses != "" && !slices.Contains(s.pubs, w.Pauses) {
			s.pubs = append(s.pubs, w.Pauses)
		}
		add(w.Outbox, target{pub, fwdOutbox})
		add(w.Inbox, target{pub, fwdInbox})
		add(w.Table, target{pub, fwdPauses})
	}
	slices.Sort(s.pubs)
	s.pubs = slices.Compact(s.pubs)
	return s
}

// publicationNames is the pgoutput option: a list of identifiers, quoted,
// so that a name with capitals keeps them.
func (s *streamSet) publicationNames() string {
	ids := make([]string, len(s.pubs))
	for i, p := range s.pubs {
		ids[i] = Quoting.Ident(p)
	}
	return "publication_names " + Quoting.Literal(strings.Join(ids, ","))
}

// stream is the holder's replication stream. The control asks for a set
// (ask); the stream switches to it (run) and says when it streams it
// (current).
type stream struct {
	h    *hub
	lead *Listener
	beat time.Duration

	mu   sync.Mutex
	want *streamSet
	live *streamSet
	// wait is the context of the stream's wait for its next message, and
	// wake ends it: a set was asked for, or the next stream is ready.
	wait context.Context
	wake context.CancelFunc
	// locals are the hub's members that the stream nudges itself, by
	// publication.
	locals map[string][]*Listener
	// news is what the followers have not been told yet, by publication.
	news map[string]uint32
}

func (s *stream) ask(set *streamSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want = set
	if s.wake != nil {
		s.wake()
	}
}

func (s *stream) takeWant() *streamSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.want
	s.want = nil
	return set
}

// waitCtx is the context for the wait for the next message, which ask
// (and a next stream that is ready) cancel: a new one once one was.
func (s *stream) waitCtx(ctx context.Context) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wait == nil || s.wait.Err() != nil {
		s.wait, s.wake = context.WithCancel(ctx)
	}
	return s.wait
}

func (s *stream) interrupt() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wake != nil {
		s.wake()
	}
}

func (s *stream) current() *streamSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live
}

func (s *stream) setLive(set *streamSet) {
	s.mu.Lock()
	s.live = set
	s.mu.Unlock()
	nudge(s.h.poke)
}

func (s *stream) setLocals(ls []*Listener) {
	m := map[string][]*Listener{}
	for _, l := range ls {
		m[l.pub] = append(m[l.pub], l)
	}
	s.mu.Lock()
	s.locals = m
	s.mu.Unlock()
}

// dispatch nudges the members of the outboxes that a transaction changed,
// and keeps the news for the followers.
func (s *stream) dispatch(changed map[string]uint32) {
	poke := false
	s.mu.Lock()
	for pub, bits := range changed {
		for _, l := range s.locals[pub] {
			l.nudgeBits(bits)
		}
		old := s.news[pub]
		s.news[pub] = old | bits
		poke = poke || old == 0
	}
	s.mu.Unlock()
	if poke {
		nudge(s.h.poke)
	}
}

// takeNews takes the news of the publications that someone follows;
// waiting says whether news of one of them is left (it was not taken).
func (s *stream) takeNews(followed func(string) bool, take bool) (news map[string]uint32, waiting bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for pub, bits := range s.news {
		if bits == 0 || !followed(pub) {
			continue
		}
		if !take {
			return nil, true
		}
		if news == nil {
			news = map[string]uint32{}
		}
		news[pub] = bits
		delete(s.news, pub)
	}
	return news, false
}

// lookOnce has the followers of every outbox of set look once, at their
// next announcement: rows may have committed while no stream covered
// them, or while one stream gave way to the next. (The members here look
// once as their status changes to the new slot.)
func (s *stream) lookOnce(set *streamSet) {
	s.mu.Lock()
	for pub := range set.wakes {
		s.news[pub] |= fwdAll
	}
	s.mu.Unlock()
	nudge(s.h.poke)
}

// opened is a replication connection that streams a set from its slot,
// or the error that kept it from it.
type opened struct {
	conn *pgconn.PgConn
	set  *streamSet
	err  error
}

// open creates a temporary slot on conn (a new replication connection
// when nil) and starts streaming set from it. Creating the slot waits for
// the transactions running now to end.
func (s *stream) open(ctx context.Context, conn *pgconn.PgConn, set *streamSet) opened {
	if conn == nil {
		c, err := s.lead.dial(ctx)
		if err != nil {
			return opened{set: set, err: err}
		}
		conn = c
		s.h.addPID(conn.PID())
	}
	fail := func(err error) opened {
		s.close(conn)
		return opened{set: set, err: err}
	}
	slot, err := s.h.share.slotName()
	if err != nil {
		return fail(err)
	}
	s.lead.log.Debug("wake-ups: creating the replication slot; it waits for the transactions running now to end", "slot", slot)
	// NOEXPORT_SNAPSHOT: no snapshot to hand out, the slot is for now on.
	// The old spelling works on every supported server.
	if _, err := pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{
		Temporary: true, SnapshotAction: "NOEXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication,
	}); err != nil {
		return fail(fmt.Errorf("create the replication slot: %w", s.classify(err)))
	}
	args := []string{"proto_version '1'", set.publicationNames()}
	if err := pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication, PluginArgs: args}); err != nil {
		return fail(fmt.Errorf("start replication: %w", s.classify(err)))
	}
	set.slot = slot
	return opened{conn: conn, set: set}
}

// reopen opens set's stream once the old one is closed: the server frees
// the old one's slot and WAL sender as its session ends, a moment later.
func (s *stream) reopen(ctx context.Context, set *streamSet) opened {
	for tries := 0; ; tries++ {
		o := s.open(ctx, nil, set)
		var u *unavailable
		if o.err == nil || !errors.As(o.err, &u) || !u.room || tries == 50 {
			return o
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return opened{set: set, err: ctx.Err()}
		case <-t.C:
		}
	}
}

// close closes a replication connection: the server drops its slot.
func (s *stream) close(conn *pgconn.PgConn) {
	pid := conn.PID()
	s.lead.close(conn)
	s.h.removePID(pid)
}

// run streams until the stream fails or ctx ends. A set asked for takes
// a new slot on a new connection, opened while the old one streams on
// (make before break): once it streams, the old one closes, and every
// outbox looks once, for what committed between the two. A server with
// no room for a second slot gets break before make: the old one closes
// first, and the outboxes probe until the new one streams. It closes
// the connections it opened, and conn.
func (s *stream) run(ctx context.Context, conn *pgconn.PgConn) error {
	o := s.open(ctx, conn, s.takeWant())
	if o.err != nil {
		return o.err
	}
	conn, set := o.conn, o.set
	defer func() {
		if conn != nil {
			s.close(conn)
		}
	}()
	s.setLive(set)
	s.lookOnce(set)

	var acked pglogrepl.LSN
	relations := map[uint32][]target{}
	// changed says which outboxes' tables the transaction being read
	// inserted into (the destinations table: changed in any way).
	changed := map[string]uint32{}
	silence := max(3*s.beat, 30*time.Second)
	next, heard := time.Now().Add(s.beat), time.Now()
	// switching brings the next stream, while one is being opened. When
	// the stream ends while a new one is being opened, the new one is
	// closed once it arrives: left open and unread, its slot would keep
	// the server's WAL until the process ends.
	var switching chan opened
	defer func() {
		if switching != nil {
			go func(ch chan opened) {
				if o := <-ch; o.err == nil {
					s.close(o.conn)
				}
			}(switching)
		}
	}()

	// handle reads one CopyData message.
	handle := func(data []byte) error {
		if len(data) == 0 {
			return nil
		}
		switch data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
			if err != nil {
				return err
			}
			acked = max(acked, k.ServerWALEnd)
			if k.ReplyRequested {
				next = time.Time{}
			}
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(data[1:])
			if err != nil {
				return err
			}
			m, err := pglogrepl.Parse(x.WALData)
			if err != nil {
				return fmt.Errorf("decode a message of the replication stream: %w", err)
			}
			switch m := m.(type) {
			case *pglogrepl.RelationMessage:
				relations[m.RelationID] = set.targets[relation{m.Namespace, m.RelationName}]
			case *pglogrepl.BeginMessage:
				clear(changed)
			case *pglogrepl.InsertMessage:
				for _, t := range relations[m.RelationID] {
					changed[t.pub] |= t.bit
				}
			case *pglogrepl.UpdateMessage:
				pausesChanged(changed, relations[m.RelationID])
			case *pglogrepl.DeleteMessage:
				pausesChanged(changed, relations[m.RelationID])
			case *pglogrepl.CommitMessage:
				if len(changed) > 0 {
					s.dispatch(changed)
					clear(changed)
				}
				acked = max(acked, m.TransactionEndLSN)
			}
		}
		return nil
	}
	// swap makes o the stream, closing the one before.
	swap := func(o opened) {
		if conn != nil {
			s.close(conn)
		}
		conn, set, acked = o.conn, o.set, 0
		clear(relations)
		clear(changed)
		next, heard = time.Now().Add(s.beat), time.Now()
		s.setLive(set)
		s.lookOnce(set)
	}
	for {
		if !time.Now().Before(next) {
			if silent := time.Since(heard); silent > silence {
				return fmt.Errorf("the server sent nothing for %s", silent.Round(time.Second))
			}
			// The position is acknowledged as written, flushed and applied:
			// the server may recycle WAL up to it. ReplyRequested asks for
			// a keepalive, so that a dead server is noticed.
			if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: acked, ReplyRequested: true}); err != nil {
				return fmt.Errorf("send a status update: %w", err)
			}
			next = time.Now().Add(s.beat)
		}
		wctx := s.waitCtx(ctx)
		if switching != nil {
			select {
			case o := <-switching:
				switching = nil
				var u *unavailable
				switch {
				case o.err == nil:
					s.lead.log.Debug("wake-ups: the stream moves to a new slot", "slot", o.set.slot, "publications", len(o.set.pubs))
					swap(o)
				case errors.As(o.err, &u) && u.room:
					// No room for two: break before make.
					s.lead.log.Debug("wake-ups: no room for a second slot; the stream closes before the next opens")
					s.close(conn)
					conn = nil
					s.setLive(nil)
					if o = s.reopen(ctx, o.set); o.err != nil {
						return o.err
					}
					swap(o)
				case ctx.Err() != nil:
					return ctx.Err()
				default:
					return o.err
				}
				continue
			default:
			}
		} else if want := s.takeWant(); want != nil {
			switching = make(chan opened, 1)
			go func(ch chan opened) {
				o := s.open(ctx, nil, want)
				if o.err != nil && o.conn != nil {
					s.close(o.conn)
				}
				if ctx.Err() != nil && o.err == nil {
					s.close(o.conn)
					o = opened{set: want, err: ctx.Err()}
				}
				ch <- o
				s.interrupt()
			}(switching)
		}
		rctx, cancel := context.WithDeadline(wctx, next)
		msg, err := conn.ReceiveMessage(rctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			if switching != nil {
				if o := <-switching; o.err == nil {
					s.close(o.conn)
				}
				switching = nil
			}
			return ctx.Err()
		case err != nil && (pgconn.Timeout(err) || errors.Is(err, context.Canceled) && wctx.Err() != nil):
			continue
		case err != nil:
			return err
		}
		heard = time.Now()
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if err := handle(m.Data); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return s.classify(pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			return errors.New("the server ended the replication stream")
		}
	}
}

// classify names the missing setting or grant, as Listener.classify does,
// except for a missing publication: the stream covers many, each member's
// check says which is missing, and the others' stream must come back
// after the backoff rather than after the recheck.
func (s *stream) classify(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42704" {
		return err
	}
	return s.lead.classify(err)
}

func pausesChanged(changed map[string]uint32, ts []target) {
	for _, t := range ts {
		if t.bit == fwdPauses {
			changed[t.pub] |= t.bit
		}
	}
}

// hold streams, with the control on the token, until either fails or ctx
// ends. It closes conn.
func (h *hub) hold(ctx context.Context, tok *pgconn.PgConn, heard chan *pgconn.Notification, conn *pgconn.PgConn, lead *Listener, retry *backoff.Capped) error {
	// The walsender carries the relay's application_name: it is not
	// another relay (OtherRelays).
	h.addPID(conn.PID())
	if _, err := tok.Exec(ctx, "LISTEN "+Quoting.Ident(h.share.channel)).ReadAll(); err != nil {
		lead.close(conn)
		h.removePID(conn.PID())
		return mapError(err)
	}
	ready := h.ready()
	if len(ready) == 0 {
		lead.close(conn)
		h.removePID(conn.PID())
		return errNoneReady
	}
	first := map[string]outboxWake{}
	for _, l := range ready {
		first[l.pub] = l.wake()
	}
	beat, _, _ := h.timing()
	s := &stream{h: h, lead: lead, beat: beat, news: map[string]uint32{}}
	s.setLocals(ready)
	s.ask(newStreamSet(first))
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.run(gctx, conn) })
	g.Go(func() error { return h.control(gctx, tok, heard, s, retry, first) })
	return g.Wait()
}

// seenWake is an outbox that a follower announced, and when.
type seenWake struct {
	wake outboxWake
	seen time.Time
}

// control runs the holder's token connection: it grows the stream to the
// outboxes that come, holds the cover locks of what the stream covers,
// reports the members' status, and forwards the stream's news to the
// followers. It returns when the token fails or ctx ends.
func (h *hub) control(ctx context.Context, tok *pgconn.PgConn, heard chan *pgconn.Notification, s *stream, retry *backoff.Capped, asked map[string]outboxWake) error {
	beat, _, _ := h.timing()
	followed := 3 * beat
	foreign := map[string]seenWake{}
	held := map[string]bool{}
	var covering *streamSet
	var lastForward, changedAt, pendingSince time.Time
	var lastDesired map[string]outboxWake
	for {
		if err := h.checkMembers(ctx, false); err != nil {
			return err
		}
		now := time.Now()
		for drained := false; !drained; {
			select {
			case n := <-heard:
				if n.Channel != h.share.channel {
					continue
				}
				if w, ok := parseWake(n.Payload); ok {
					foreign[w.Pub] = seenWake{w, now}
				}
			default:
				drained = true
			}
		}
		maps.DeleteFunc(foreign, func(_ string, f seenWake) bool { return now.Sub(f.seen) > followed })
		ready := h.ready()
		s.setLocals(ready)

		// The stream runs with a new set: hold its cover locks, and have
		// the followers of the outboxes new to it look once.
		if live := s.current(); live != covering {
			if err := h.cover(ctx, tok, live, held); err != nil {
				return err
			}
			covering = live
			if live != nil {
				retry.Reset()
			}
		}
		for _, l := range ready {
			switch {
			case covering != nil && covering.wakes[l.pub] == l.wake():
				l.pauses = l.tbl.pauses != (relation{})
				l.set(dialects.WakeupsListening, "", covering.slot, "")
			case covering == nil:
				l.set(dialects.WakeupsConnecting, reasonTakingOver, "", "")
			default:
				l.set(dialects.WakeupsConnecting, reasonExtending, "", "")
			}
		}

		// What the stream should cover: this hub's outboxes and those the
		// followers announced lately.
		desired := map[string]outboxWake{}
		for pub, f := range foreign {
			desired[pub] = f.wake
		}
		for _, l := range ready {
			desired[l.pub] = l.wake()
		}
		if !maps.Equal(desired, lastDesired) {
			lastDesired, changedAt = desired, now
		}
		wake := now.Add(beat)
		switch {
		case grows(asked, desired):
			if pendingSince.IsZero() {
				pendingSince = now
			}
			if now.Sub(changedAt) >= settle || now.Sub(pendingSince) >= settleAtMost {
				valid, err := h.published(ctx, tok, desired)
				if err != nil {
					return err
				}
				s.ask(newStreamSet(valid))
				asked, pendingSince = desired, time.Time{}
			} else {
				wake = minTime(wake, changedAt.Add(settle), pendingSince.Add(settleAtMost))
			}
		case len(desired) > 0 && len(desired) < len(asked):
			// Outboxes went away: once that settles, the stream leaves
			// them, and the server decodes for them no more.
			pendingSince = time.Time{}
			if now.Sub(changedAt) >= settleAtMost {
				valid, err := h.published(ctx, tok, desired)
				if err != nil {
					return err
				}
				s.ask(newStreamSet(valid))
				asked = desired
			} else {
				wake = minTime(wake, changedAt.Add(settleAtMost))
			}
		default:
			pendingSince = time.Time{}
		}

		// Forward, at most once per forwardEvery, to the outboxes that a
		// follower announced lately.
		isFollowed := func(pub string) bool { _, ok := foreign[pub]; return ok }
		if due := lastForward.Add(forwardEvery); now.Before(due) {
			if _, waiting := s.takeNews(isFollowed, false); waiting {
				wake = minTime(wake, due)
			}
		} else if news, _ := s.takeNews(isFollowed, true); len(news) > 0 {
			var b strings.Builder
			b.WriteString("SELECT ")
			i := 0
			for pub, bits := range news {
				if i > 0 {
					b.WriteString(", ")
				}
				i++
				fmt.Fprintf(&b, "pg_notify(%s, %s)", Quoting.Literal(forwardChannel(pub)), Quoting.Literal(letters(bits)))
			}
			if _, err := tok.Exec(ctx, b.String()).ReadAll(); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("forward to the other relays (the connection that holds the wake-ups lock): %w", err)
			}
			lastForward = now
		}
		if _, err := h.wait(ctx, tok, wake); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("the connection that holds the wake-ups lock failed: %w", err)
		}
	}
}

// grows says whether desired has an outbox that asked lacks (or has
// differently). Outboxes that went away leave it later (control).
func grows(asked, desired map[string]outboxWake) bool {
	for pub, w := range desired {
		if a, ok := asked[pub]; !ok || a != w {
			return true
		}
	}
	return false
}

func minTime(t time.Time, ts ...time.Time) time.Time {
	for _, u := range ts {
		if u.Before(t) {
			t = u
		}
	}
	return t
}

// published keeps the outboxes whose publications exist: an announcement
// that names a missing one must not break the stream for the others (the
// server would end it at the first change it decodes).
func (h *hub) published(ctx context.Context, tok *pgconn.PgConn, wakes map[string]outboxWake) (map[string]outboxWake, error) {
	var names []string
	for pub, w := range wakes {
		names = append(names, Quoting.Literal(pub))
		if w.Pauses != "" {
			names = append(names, Quoting.Literal(w.Pauses))
		}
	}
	if len(names) == 0 {
		return wakes, nil
	}
	rs, err := tok.Exec(ctx, "SELECT pubname::text FROM pg_publication WHERE pubname IN ("+strings.Join(names, ", ")+")").ReadAll()
	if err != nil {
		return nil, mapError(err)
	}
	exists := map[string]bool{}
	for _, r := range rs {
		for _, row := range r.Rows {
			exists[string(row[0])] = true
		}
	}
	out := map[string]outboxWake{}
	for pub, w := range wakes {
		if exists[pub] && (w.Pauses == "" || exists[w.Pauses]) {
			out[pub] = w
		}
	}
	return out, nil
}

// cover makes the token hold the cover locks of exactly the publications
// that live streams.
func (h *hub) cover(ctx context.Context, tok *pgconn.PgConn, live *streamSet, held map[string]bool) error {
	var calls []string
	want := map[string]bool{}
	var pubs []string
	if live != nil {
		pubs = live.pubs
	}
	for _, p := range pubs {
		want[p] = true
		if !held[p] {
			calls = append(calls, fmt.Sprintf("pg_advisory_lock_shared(%d)", coverKey(h.group, p)))
		}
	}
	for p := range held {
		if !want[p] {
			calls = append(calls, fmt.Sprintf("pg_advisory_unlock_shared(%d)", coverKey(h.group, p)))
		}
	}
	if len(calls) == 0 {
		return nil
	}
	if _, err := tok.Exec(ctx, "SELECT "+strings.Join(calls, ", ")).ReadAll(); err != nil {
		return fmt.Errorf("the wake-ups lock's connection: %w", mapError(err))
	}
	clear(held)
	maps.Copy(held, want)
	return nil
}
