package postgres

// One slot per database: the relays that share an outbox share one
// listener.
//
// A WAL sender decodes every transaction of the database, whatever it
// touched, before pgoutput keeps the inserts of the publication. With a
// slot per relay, each relay's sender decoded the whole drain again: three
// relays draining 100,000 rows made the server decode it three times, and
// drained at 0.6 of one relay where relays that probed drained at 0.8.
//
// So the relays of one publication take turns. Each listener keeps one
// plain connection (the token) on which it asks for a session advisory
// lock named after the publication. The relay that gets it opens the
// replication connection and the slot, and forwards what it hears with
// pg_notify on a channel named after the publication too: a letter per
// table that changed, at most once per forwardEvery. The others LISTEN on
// that channel and nudge their own channels from it; they ask for the lock
// again every heartbeat, so that one of them takes over when the holder's
// session ends (a crash, kill -9, a lost network: the server releases a
// session's locks when it ends), and they see, in the same statement,
// whether the holder's slot listens yet.
//
// What it costs: the followers' check, one statement per heartbeat each,
// which also says hello to the holder; the holder's pg_notify, a small
// transaction (with synchronous_commit off on the token, so it waits for
// no flush) at most once per forwardEvery while rows arrive, never while
// none do, and never while no follower said hello lately: a relay alone on
// its outbox forwards nothing. A lost or late forward costs
// what a lost nudge costs: the relay's safety-net probe. The holder's own
// nudges are unchanged.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/backoff"
)

// forwardEvery is the least time between two forwards of the slot's
// holder: the followers' nudges while rows arrive steadily. They matter
// only to a follower with nothing to do (a busy one claims again at once),
// and the holder is woken for every commit.
const forwardEvery = 20 * time.Millisecond

// share names what the listeners of one publication share: the advisory
// lock that says which of them holds the slot, the channel on which it
// forwards, and the prefix of its slot's name.
type share struct {
	key     int64
	channel string
	prefix  string
}

func shareOf(publication string) share {
	h := fnv.New64a()
	_, _ = h.Write([]byte("queuebox wake-ups " + publication))
	sum := h.Sum64()
	id := fmt.Sprintf("%016x", sum)
	return share{key: int64(sum), channel: "queuebox_wake_" + id, prefix: "queuebox_" + id + "_"}
}

// slotName is a new name for the holder's temporary slot: the prefix,
// which the followers look for, and a random part, so that a slot still
// being dropped never clashes with the next.
func (s share) slotName() (string, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return s.prefix + hex.EncodeToString(b), nil
}

// The letters of a forward: which tables changed.
const (
	fwdOutbox uint32 = 1 << iota
	fwdInbox
	fwdPauses
)

// forwarder sends the holder's news to the followers on the token
// connection, coalesced: add never waits.
type forwarder struct {
	conn    *pgconn.PgConn
	sql     string // SELECT pg_notify('channel', '
	pending atomic.Uint32
	wake    chan struct{}
	// heard brings the token's notifications: the followers' hellos.
	// Forwards go out only
	// while a hello came within followed: a relay alone on its outbox
	// spends no transaction on them.
	heard     <-chan string
	followed  time.Duration
	lastHello time.Time
}

func newForwarder(conn *pgconn.PgConn, channel string, heard <-chan string, beat time.Duration) *forwarder {
	return &forwarder{conn: conn, sql: "SELECT pg_notify(" + Quoting.Literal(channel) + ", '", wake: make(chan struct{}, 1),
		heard: heard, followed: 3 * beat}
}

func (f *forwarder) add(bits uint32) {
	if bits == 0 {
		return
	}
	f.pending.Or(bits)
	nudge(f.wake)
}

// run forwards until ctx ends or the token connection fails: then the lock
// may be gone, and the session must end (Listener.session).
func (f *forwarder) run(ctx context.Context) error {
	for {
		if err := f.await(ctx); err != nil {
			return fmt.Errorf("the connection that holds the wake-ups lock failed: %w", err)
		}
		if ctx.Err() != nil {
			return nil
		}
		for drained := false; !drained; {
			select {
			case p := <-f.heard:
				if strings.ContainsRune(p, 'h') {
					f.lastHello = time.Now()
				}
			default:
				drained = true
			}
		}
		// Without a follower the news waits: a relay that starts
		// following gets it with its first hello, and looks once.
		if f.pending.Load() == 0 || time.Since(f.lastHello) > f.followed {
			continue
		}
		bits := f.pending.Swap(0)
		var b strings.Builder
		for i, c := range "oip" {
			if bits&(1<<i) != 0 {
				b.WriteRune(c)
			}
		}
		if _, err := f.conn.Exec(ctx, f.sql+b.String()+"')").ReadAll(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("forward to the other relays (the connection that holds the wake-ups lock): %w", err)
		}
		t := time.NewTimer(forwardEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// await waits for news to forward while reading the token connection, so
// that a session the server ended (and with it the lock) is seen at once
// rather than at the next forward, which may not come for a long time.
func (f *forwarder) await(ctx context.Context) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		select {
		case <-f.wake:
			cancel()
		case <-done:
		}
	}()
	err := f.conn.WaitForNotification(wctx)
	close(done)
	if err != nil && wctx.Err() == nil {
		return err
	}
	return nil
}

// The reasons a listener gives while it sets up its wake-ups as designed:
// it probes until the slot streams, which is no fault, so the change is
// logged at info (set); a connecting listener with any other reason met an
// error, and that is a warning.
const (
	reasonTakingOver     = "this relay takes over the database's wake-ups: creating the slot"
	reasonHolderStarting = "another relay holds this database's wake-ups and has no slot listening yet"
)

// round is one life of the token connection: the listener follows until
// the lock is its own, then holds the slot until something fails or ctx
// ends. Closing the token releases the lock and the LISTEN.
func (l *Listener) round(ctx context.Context, retry *backoff.Capped) error {
	tbl, err := l.check(ctx, false)
	if err != nil {
		return err
	}
	tok, heard, err := l.dialToken(ctx)
	if err != nil {
		return err
	}
	pid := tok.PID()
	l.d.own.add(pid)
	defer l.d.own.remove(pid)
	defer l.close(tok)
	if err := l.follow(ctx, tok, heard, tbl, retry); err != nil {
		return err
	}
	// The lock is this listener's: it holds the slot. Nothing is forwarded
	// to it any more, so it probes until its own slot streams.
	l.set(dialects.WakeupsConnecting, reasonTakingOver, "", "")
	conn, tbl, err := l.prepare(ctx)
	if err != nil {
		return err
	}
	return l.session(ctx, conn, tbl, retry, newForwarder(tok, l.share.channel, heard, l.opts.Heartbeat))
}

// dialToken opens the token connection. Its notifications arrive on heard
// (payloads; a full channel drops one: a forward says what the next says,
// and hellos repeat).
func (l *Listener) dialToken(ctx context.Context) (*pgconn.PgConn, chan string, error) {
	heard := make(chan string, 64)
	cfg := l.d.cfg.ConnConfig.Config.Copy()
	// A forward is a transaction with a commit record: it need not wait
	// for the flush.
	cfg.RuntimeParams["synchronous_commit"] = "off"
	cfg.OnNotification = func(c *pgconn.PgConn, n *pgconn.Notification) {
		if n.PID == c.PID() {
			return // its own hello or forward
		}
		select {
		case heard <- n.Payload:
		default:
		}
	}
	// The server must notice a holder whose network is gone, to release
	// its lock: the token is an ordinary session (wal_sender_timeout does
	// not apply), so its keepalives say, within about 25 s.
	cfg.RuntimeParams["tcp_keepalives_idle"] = "10"
	cfg.RuntimeParams["tcp_keepalives_interval"] = "5"
	cfg.RuntimeParams["tcp_keepalives_count"] = "3"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, nil, mapError(err)
	}
	// A holder alone sends nothing on its token for as long as it holds
	// the slot: idle_session_timeout (PostgreSQL 14 on) must not end it.
	// Older servers do not know the setting.
	if _, err := conn.Exec(ctx, "SET idle_session_timeout = 0").ReadAll(); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42704" {
			l.close(conn)
			return nil, nil, mapError(err)
		}
	}
	return conn, heard, nil
}

// follow listens on the share's channel, nudging this listener's channels
// from what the holder forwards, until the lock is this listener's (nil)
// or the token connection fails.
func (l *Listener) follow(ctx context.Context, tok *pgconn.PgConn, heard chan string, tbl tables, retry *backoff.Capped) error {
	if _, err := tok.Exec(ctx, "LISTEN "+Quoting.Ident(l.share.channel)).ReadAll(); err != nil {
		return mapError(err)
	}
	// The lock; whether the holder's slot streams; and a hello, which
	// tells the holder that someone follows (it forwards only then).
	// Slots are the server's, locks and channels the database's: another
	// database's outbox of the same name has slots of the same prefix.
	ask := fmt.Sprintf("SELECT pg_try_advisory_lock(%d), EXISTS (SELECT FROM pg_replication_slots "+
		"WHERE starts_with(slot_name, %s) AND database = current_database() AND active AND confirmed_flush_lsn IS NOT NULL), pg_notify(%s, 'h')",
		l.share.key, Quoting.Literal(l.share.prefix), Quoting.Literal(l.share.channel))
	for first := true; ; first = false {
		rs, err := tok.Exec(ctx, ask).ReadAll()
		if err != nil {
			return mapError(err)
		}
		if len(rs) != 1 || len(rs[0].Rows) != 1 || len(rs[0].Rows[0]) != 3 {
			return errors.New("the wake-ups lock: an unexpected answer")
		}
		if string(rs[0].Rows[0][0]) == "t" {
			// The token keeps listening: the followers' hellos come on it.
			return nil
		}
		if first {
			retry.Reset()
		}
		l.pauses = tbl.pauses != (relation{})
		if string(rs[0].Rows[0][1]) == "t" {
			l.set(dialects.WakeupsListening, "", "", l.share.channel)
		} else {
			l.set(dialects.WakeupsConnecting, reasonHolderStarting, "", "")
		}
		next := time.Now().Add(l.opts.Heartbeat)
		for time.Now().Before(next) {
			wctx, cancel := context.WithDeadline(ctx, next)
			err := tok.WaitForNotification(wctx)
			cancel()
			switch {
			case ctx.Err() != nil:
				return ctx.Err()
			case err != nil && !pgconn.Timeout(err):
				return mapError(err)
			}
			for drained := false; !drained; {
				select {
				case p := <-heard:
					if !strings.ContainsAny(p, "oip") {
						continue // another follower's hello
					}
					// The holder forwards only while its slot listens.
					l.set(dialects.WakeupsListening, "", "", l.share.channel)
					if strings.ContainsRune(p, 'o') {
						nudge(l.outbox)
					}
					if strings.ContainsRune(p, 'i') {
						nudge(l.inbox)
					}
					if strings.ContainsRune(p, 'p') {
						nudge(l.pauseCh)
					}
				default:
					drained = true
				}
			}
		}
	}
}
