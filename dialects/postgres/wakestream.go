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
// starts with fifty outboxes restarts its stream a few times, not fifty.
const (
	settle       = 100 * time.Millisecond
	settleAtMost = time.Second
)

// target is where a change to a table goes: the outbox of a publication,
// and which of its channels.
type target struct {
	pub string
	bit uint32
}

// streamSet is what one run of the stream covers.
type streamSet struct {
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

// stream is the holder's replication connection. The control asks for a
// set (ask); the stream takes it at its next message, restarting if it
// runs, and says when it runs with it (live).
type stream struct {
	h    *hub
	conn *pgconn.PgConn
	slot string
	lead *Listener
	beat time.Duration

	mu   sync.Mutex
	want *streamSet
	live *streamSet
	// recv ends when a set is asked for: the stream's wait for the next
	// message ends with it.
	recv       context.Context
	recvCancel context.CancelFunc
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
	if s.recvCancel != nil {
		s.recvCancel()
	}
}

func (s *stream) current() *streamSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live
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

// start starts streaming set from lsn (0: where the slot stands).
func (s *stream) start(ctx context.Context, set *streamSet, lsn pglogrepl.LSN) error {
	args := []string{"proto_version '1'", set.publicationNames()}
	if err := pglogrepl.StartReplication(ctx, s.conn, s.slot, lsn, pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication, PluginArgs: args}); err != nil {
		return fmt.Errorf("start replication: %w", s.classify(err))
	}
	s.mu.Lock()
	s.live = set
	s.recv, s.recvCancel = context.WithCancel(ctx)
	if s.want != nil {
		s.recvCancel()
	}
	s.mu.Unlock()
	nudge(s.h.poke)
	return nil
}

// next is the set asked for, if one is (taken), and the context of the
// wait for the next message.
func (s *stream) next() (*streamSet, context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.want
	s.want = nil
	return set, s.recv
}

// run reads the stream until it fails or ctx ends, restarting it when
// the control asks for another set.
func (s *stream) run(ctx context.Context) error {
	defer func() {
		s.mu.Lock()
		if s.recvCancel != nil {
			s.recvCancel()
		}
		s.mu.Unlock()
	}()
	set, _ := s.next()
	if err := s.start(ctx, set, 0); err != nil {
		return err
	}
	var acked pglogrepl.LSN
	relations := map[uint32][]target{}
	// changed says which outboxes' tables the transaction being read
	// inserted into (the destinations table: changed in any way).
	changed := map[string]uint32{}
	silence := max(3*s.beat, 30*time.Second)
	next, heard := time.Now().Add(s.beat), time.Now()

	// handle reads one CopyData message; keepalive says it was one.
	handle := func(data []byte) (keepalive bool, err error) {
		if len(data) == 0 {
			return false, nil
		}
		switch data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
			if err != nil {
				return false, err
			}
			acked = max(acked, k.ServerWALEnd)
			if k.ReplyRequested {
				next = time.Time{}
			}
			return true, nil
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(data[1:])
			if err != nil {
				return false, err
			}
			m, err := pglogrepl.Parse(x.WALData)
			if err != nil {
				return false, fmt.Errorf("decode a message of the replication stream: %w", err)
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
		return false, nil
	}
	// receive waits for the next CopyData until deadline (nil data: none
	// came, or another message).
	receive := func(rctx context.Context) ([]byte, error) {
		msg, err := s.conn.ReceiveMessage(rctx)
		if err != nil {
			return nil, err
		}
		heard = time.Now()
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			return m.Data, nil
		case *pgproto3.ErrorResponse:
			return nil, s.classify(pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			return nil, errors.New("the server ended the replication stream")
		}
		return nil, nil
	}
	// restart ends the stream once the server has said how far it has
	// sent, and starts it again from there with the new set: the outboxes
	// covered before miss nothing.
	restart := func(newSet *streamSet) error {
		if err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: acked, ReplyRequested: true}); err != nil {
			return fmt.Errorf("send a status update: %w", err)
		}
		until := time.Now().Add(silence)
		for got := false; !got; {
			rctx, cancel := context.WithDeadline(ctx, until)
			data, err := receive(rctx)
			cancel()
			if err != nil {
				return err
			}
			if got, err = handle(data); err != nil {
				return err
			}
		}
		s.conn.Frontend().Send(&pgproto3.CopyDone{})
		if err := s.conn.Frontend().Flush(); err != nil {
			return fmt.Errorf("end the replication stream: %w", err)
		}
		for done := false; !done; {
			rctx, cancel := context.WithDeadline(ctx, until)
			msg, err := s.conn.ReceiveMessage(rctx)
			cancel()
			if err != nil {
				return fmt.Errorf("end the replication stream: %w", err)
			}
			switch m := msg.(type) {
			case *pgproto3.CopyData:
				if _, err := handle(m.Data); err != nil {
					return err
				}
			case *pgproto3.ErrorResponse:
				return s.classify(pgconn.ErrorResponseToPgError(m))
			case *pgproto3.ReadyForQuery:
				done = true
			}
		}
		clear(relations)
		clear(changed)
		set = newSet
		return s.start(ctx, set, acked)
	}
	for {
		if !time.Now().Before(next) {
			if silent := time.Since(heard); silent > silence {
				return fmt.Errorf("the server sent nothing for %s", silent.Round(time.Second))
			}
			// The position is acknowledged as written, flushed and applied:
			// the server may recycle WAL up to it. ReplyRequested asks for
			// a keepalive, so that a dead server is noticed.
			if err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: acked, ReplyRequested: true}); err != nil {
				return fmt.Errorf("send a status update: %w", err)
			}
			next = time.Now().Add(s.beat)
		}
		newSet, recv := s.next()
		if newSet != nil {
			if err := restart(newSet); err != nil {
				return err
			}
			continue
		}
		rctx, cancel := context.WithDeadline(recv, next)
		data, err := receive(rctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && (pgconn.Timeout(err) || errors.Is(err, context.Canceled) && recv.Err() != nil):
			continue
		case err != nil:
			return err
		}
		if _, err := handle(data); err != nil {
			return err
		}
	}
}

// classify names the missing setting or grant, as Listener.classify does,
// except for a missing publication: the stream covers many, each member's
// check says which is missing, and the others' stream must come back
// after the backoff rather than after the recheck. (The server also says
// so of a publication created after the position it decodes.)
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

// hold creates the slot and streams, with the control on the token, until
// either fails or ctx ends. It closes conn.
func (h *hub) hold(ctx context.Context, tok *pgconn.PgConn, heard chan *pgconn.Notification, conn *pgconn.PgConn, lead *Listener, retry *backoff.Capped) error {
	pid := conn.PID()
	// The walsender carries the relay's application_name: it is not
	// another relay (OtherRelays).
	h.addPID(pid)
	defer h.removePID(pid)
	defer lead.close(conn)
	slot, err := h.share.slotName()
	if err != nil {
		return err
	}
	lead.log.Debug("wake-ups: creating the replication slot; it waits for the transactions running now to end", "slot", slot)
	// NOEXPORT_SNAPSHOT: no snapshot to hand out, the slot is for now on.
	// The old spelling works on every supported server.
	if _, err := pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{
		Temporary: true, SnapshotAction: "NOEXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication,
	}); err != nil {
		return fmt.Errorf("create the replication slot: %w", lead.classify(err))
	}
	if _, err := tok.Exec(ctx, "LISTEN "+Quoting.Ident(h.share.channel)).ReadAll(); err != nil {
		return mapError(err)
	}
	ready := h.ready()
	if len(ready) == 0 {
		return errNoneReady
	}
	first := map[string]outboxWake{}
	for _, l := range ready {
		first[l.pub] = l.wake()
	}
	beat, _, _ := h.timing()
	s := &stream{h: h, conn: conn, slot: slot, lead: lead, beat: beat, news: map[string]uint32{}}
	s.setLocals(ready)
	s.ask(newStreamSet(first))
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.run(gctx) })
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
			news := map[string]uint32{}
			for pub, w := range live.wakes {
				if covering == nil || covering.wakes[pub] != w {
					news[pub] = fwdAll
				}
			}
			s.dispatchNews(news)
			covering = live
			retry.Reset()
		}
		for _, l := range ready {
			switch {
			case covering != nil && covering.wakes[l.pub] == l.wake():
				l.pauses = l.tbl.pauses != (relation{})
				l.set(dialects.WakeupsListening, "", s.slot, "")
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
			// them, so that dropping one's publication (its schema) does
			// not end the stream of the others, as a missing publication
			// does.
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

// dispatchNews keeps news for the followers, without nudging the members.
func (s *stream) dispatchNews(news map[string]uint32) {
	s.mu.Lock()
	for pub, bits := range news {
		s.news[pub] |= bits
	}
	s.mu.Unlock()
}

// grows says whether desired has an outbox that asked lacks (or has
// differently): outboxes that went away wait for the next restart.
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
	for _, p := range live.pubs {
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
