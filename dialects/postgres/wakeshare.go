package postgres

// Many outboxes, one stream: the relays of a database share one slot.
//
// A WAL sender decodes every transaction of the database, whatever it
// touched, before pgoutput keeps the inserts of its publications. A slot
// per relay made the server decode a drain once per relay, and a slot per
// outbox would make a relay with fifty outboxes (schemas of one database)
// need fifty slots and fifty WAL senders (the server's default allows ten)
// and the server decode all its WAL fifty times. So one stream per
// database serves every outbox of every relay:
//
//   - In a process, the Listeners of one server, database and role share a
//     hub (wakehub.go): Dialect.Wakeups still returns a Listener per outbox,
//     and Run joins the hub of its database; the last to leave stops it.
//   - The hubs of a database, in every process, take turns. Each keeps one
//     plain connection (the token) on which it asks for a session advisory
//     lock named for the database's wake-ups (hubShare), whatever outboxes
//     it serves. The hub that gets it, the holder, opens the replication
//     connection and one temporary slot, and subscribes to the
//     publications of every outbox it covers (each outbox's migration V16
//     and V20 publications; publication_names takes a list). A Relation
//     message names its table, and the holder knows which outbox, and
//     which of its channels, each table is.
//   - The others, the followers, announce on the database's channel the
//     outboxes they serve, every heartbeat: their publications and tables
//     (outboxWake). The holder covers the union of its own members' and the
//     recent announcements, so relays with different sets of outboxes
//     share the slot all the same. A new outbox, local or announced,
//     moves the stream to a new slot with the longer list (stream.run):
//     the holder opens it beside the old one, and drops the old one once
//     the new one streams (a server with no room for both gets the old
//     one dropped first, and the outboxes probe meanwhile); every outbox
//     looks once, for what committed between the two. (A stream cannot
//     start again on its slot: the WAL sender ends a second logical
//     stream of a session at once, as it keeps the first one's end.)
//     Outboxes that go away leave the list a few seconds later
//     (settleAtMost), the same way, and so does an outbox whose
//     publication went (its schema dropped): its next check, every
//     Recheck, says so. Were the server to end the stream over a missing
//     publication, the hub would start again with a new slot, as after a
//     lost connection.
//   - The holder says which publications its stream covers with a shared
//     advisory lock per publication on its token (coverKey); a follower
//     reports listening for an outbox only while that lock is held, so
//     its status is truthful: an outbox the holder does not cover (yet)
//     probes, and says so. The locks go with the holder's session.
//   - The holder forwards what it hears with pg_notify on each outbox's
//     channel (shareOf(publication).channel): a letter per table that
//     changed, at most once per forwardEvery, and only for outboxes that
//     a follower announced lately: a relay alone on its database forwards
//     nothing. The followers LISTEN on their outboxes' channels, and ask
//     for the lock again every heartbeat, so that one of them takes over
//     when the holder's session ends (a crash, kill -9, a lost network:
//     the server releases a session's locks when it ends).
//
// What it costs: one slot and one WAL sender per database for all the
// relays on it, and one token per relay and database; a follower's check,
// one statement per heartbeat, which announces its outboxes; the holder's
// forwards, a small transaction (synchronous_commit off on the token) at
// most once per forwardEvery while rows arrive; and a new slot when an
// outbox comes or goes (creating one waits for the transactions running
// at that moment; the old slot streams meanwhile). A lost or late nudge
// costs what it always costs: the relay's safety-net probe. Nudges are
// hints: no row waits on one, whatever a holder covers or misses.
//
// Where a shared stream cannot be had (no room for the slot, a role that
// may not replicate, an outbox whose publication is missing), each outbox
// concerned probes exactly as without wake-ups, and its status says why.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
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

// share names what the listeners of a database share: the advisory lock
// that says which of them holds the slot, the channel of the followers'
// announcements, and the prefix of the slot's name.
type share struct {
	key     int64
	channel string
	prefix  string
}

func shareOf(name string) share {
	h := fnv.New64a()
	_, _ = h.Write([]byte("queuebox wake-ups " + name))
	sum := h.Sum64()
	id := fmt.Sprintf("%016x", sum)
	return share{key: int64(sum), channel: "queuebox_wake_" + id, prefix: "queuebox_" + id + "_"}
}

// hubShare is the share of a database's hubs. Advisory locks and channels
// belong to a database, and slots are filtered by their database, so one
// name serves every database.
func hubShare(group string) share { return shareOf("\x00database " + group) }

// forwardChannel is the channel on which the holder forwards what it
// heard for the outbox of a publication.
func forwardChannel(publication string) string { return shareOf(publication).channel }

// coverKey is the shared advisory lock that the holder keeps while its
// stream covers a publication.
func coverKey(group, publication string) int64 {
	return shareOf("\x00covers " + group + "\x00" + publication).key
}

// slotName is a new name for the holder's temporary slot: the prefix,
// which WakeupSlot looks for, and a random part, so that a slot still
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
	fwdAll = fwdOutbox | fwdInbox | fwdPauses
)

func letters(bits uint32) string {
	var b strings.Builder
	for i, c := range "oip" {
		if bits&(1<<i) != 0 {
			b.WriteRune(c)
		}
	}
	return b.String()
}

func bitsOf(letters string) uint32 {
	var bits uint32
	for i, c := range "oip" {
		if strings.ContainsRune(letters, c) {
			bits |= 1 << i
		}
	}
	return bits
}

// outboxWake is what a stream needs of one outbox: its publications and
// its tables as the stream names them. Followers announce theirs in this
// form (JSON, on the database's channel).
type outboxWake struct {
	Pub string `json:"p"`
	// Pauses is the publication of the destinations table's changes,
	// empty while it does not exist (then Table is empty too).
	Pauses string    `json:"q,omitempty"`
	Outbox [2]string `json:"o"`
	Inbox  [2]string `json:"i"`
	Table  [2]string `json:"d"`
}

// wake is the outboxWake of a member that passed its check.
func (l *Listener) wake() outboxWake {
	w := outboxWake{Pub: l.pub, Outbox: [2]string{l.tbl.outbox.schema, l.tbl.outbox.name}, Inbox: [2]string{l.tbl.inbox.schema, l.tbl.inbox.name}}
	if l.tbl.pauses != (relation{}) {
		w.Pauses = l.d.names.PausesPublication()
		w.Table = [2]string{l.tbl.pauses.schema, l.tbl.pauses.name}
	}
	return w
}

func parseWake(payload string) (outboxWake, bool) {
	var w outboxWake
	if err := json.Unmarshal([]byte(payload), &w); err != nil || w.Pub == "" || w.Outbox[1] == "" || (w.Pauses == "") != (w.Table[1] == "") {
		return w, false
	}
	return w, true
}

// The reasons a listener gives while it sets up its wake-ups as designed:
// it probes until the stream covers its outbox, which is no fault, so the
// change is logged at info (set); a connecting listener with any other
// reason met an error, and that is a warning.
const (
	reasonTakingOver     = "this relay takes over the database's wake-ups: creating the slot"
	reasonHolderStarting = "another relay holds this database's wake-ups and does not listen for this outbox yet"
	reasonExtending      = "this relay holds the database's wake-ups and is adding this outbox to its stream"
)

// dialToken opens the token connection. Its notifications arrive on heard
// (a full channel drops one: a forward says what the next says, and
// announcements repeat).
func (l *Listener) dialToken(ctx context.Context) (*pgconn.PgConn, chan *pgconn.Notification, error) {
	heard := make(chan *pgconn.Notification, 1024)
	cfg := l.d.cfg.ConnConfig.Config.Copy()
	// A forward is a transaction with a commit record: it need not wait
	// for the flush.
	cfg.RuntimeParams["synchronous_commit"] = "off"
	cfg.OnNotification = func(c *pgconn.PgConn, n *pgconn.Notification) {
		if n.PID == c.PID() {
			return // its own announcement or forward
		}
		select {
		case heard <- n:
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

// wait reads the token's notifications until one comes, deadline passes
// or the hub is poked; poked says whether a poke ended it.
func (h *hub) wait(ctx context.Context, tok *pgconn.PgConn, deadline time.Time) (poked bool, err error) {
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	stop, out := make(chan struct{}), make(chan bool, 1)
	go func() {
		select {
		case <-h.poke:
			cancel()
			out <- true
		case <-stop:
			out <- false
		}
	}()
	err = tok.WaitForNotification(wctx)
	close(stop)
	poked = <-out
	switch {
	case ctx.Err() != nil:
		return poked, ctx.Err()
	case err == nil, pgconn.Timeout(err), poked && errors.Is(err, context.Canceled):
		return poked, nil
	}
	return poked, mapError(err)
}

// follow follows the holder, nudging the members from what it forwards,
// until the lock is this hub's (nil) or the token connection fails.
func (h *hub) follow(ctx context.Context, tok *pgconn.PgConn, heard chan *pgconn.Notification, retry *backoff.Capped) error {
	listening := map[string]bool{}
	var asked time.Time
	for first := true; ; first = false {
		if err := h.checkMembers(ctx, false); err != nil {
			return err
		}
		ready := h.ready()
		if len(ready) == 0 {
			return errNoneReady
		}
		var listen strings.Builder
		for _, l := range ready {
			if ch := forwardChannel(l.pub); !listening[ch] {
				listen.WriteString("LISTEN " + Quoting.Ident(ch) + ";")
				listening[ch] = true
			}
		}
		if listen.Len() > 0 {
			if _, err := tok.Exec(ctx, listen.String()).ReadAll(); err != nil {
				return mapError(err)
			}
		}
		got, covered, err := h.ask(ctx, tok, ready)
		if err != nil {
			return err
		}
		asked = time.Now()
		if got {
			// The token keeps its LISTENs: harmless, the holder forwards
			// nothing to itself.
			return nil
		}
		if first {
			retry.Reset()
		}
		for _, l := range ready {
			if covered[l.pub] {
				l.pauses = l.tbl.pauses != (relation{}) && covered[l.d.names.PausesPublication()]
				l.set(dialects.WakeupsListening, "", "", forwardChannel(l.pub))
			} else {
				l.set(dialects.WakeupsConnecting, reasonHolderStarting, "", "")
			}
		}
		beat, _, _ := h.timing()
		next := time.Now().Add(beat)
		for again := false; !again && time.Now().Before(next); {
			poked, err := h.wait(ctx, tok, next)
			if err != nil {
				return err
			}
			// A member came or went: ask (and announce) at once.
			again = poked
			byChannel := map[string][]*Listener{}
			for _, l := range h.ready() {
				byChannel[forwardChannel(l.pub)] = append(byChannel[forwardChannel(l.pub)], l)
			}
			for drained := false; !drained; {
				select {
				case n := <-heard:
					bits := bitsOf(n.Payload)
					for _, l := range byChannel[n.Channel] {
						l.nudgeBits(bits)
						// The holder covers it now: ask once more, rather
						// than probe until the next heartbeat.
						if bits == fwdAll && !l.Status().Listening() && time.Since(asked) > forwardEvery {
							again = true
						}
					}
				default:
					drained = true
				}
			}
		}
	}
}

// ask tries the lock, reads which of the members' publications the
// holder's stream covers, and announces the members to the holder, in one
// statement.
func (h *hub) ask(ctx context.Context, tok *pgconn.PgConn, ready []*Listener) (got bool, covered map[string]bool, err error) {
	var pubs []string
	var anns []string
	for _, l := range ready {
		w := l.wake()
		pubs = append(pubs, w.Pub)
		if w.Pauses != "" {
			pubs = append(pubs, w.Pauses)
		}
		b, err := json.Marshal(w)
		if err != nil {
			return false, nil, err
		}
		anns = append(anns, Quoting.Literal(string(b)))
	}
	var values strings.Builder
	for i, p := range pubs {
		k := uint64(coverKey(h.group, p))
		if i > 0 {
			values.WriteString(", ")
		}
		fmt.Fprintf(&values, "(%d, %d::oid, %d::oid)", i, uint32(k>>32), uint32(k))
	}
	q := fmt.Sprintf(`SELECT pg_try_advisory_lock(%d),
       ARRAY(SELECT v.i FROM (VALUES %s) AS v(i, c, o)
              WHERE EXISTS (SELECT FROM pg_locks l
                             WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.classid = v.c AND l.objid = v.o
                               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())))::text,
       (SELECT count(pg_notify(%s, a)) FROM unnest(ARRAY[%s]::text[]) AS a)`,
		h.share.key, values.String(), Quoting.Literal(h.share.channel), strings.Join(anns, ", "))
	rs, err := tok.Exec(ctx, q).ReadAll()
	if err != nil {
		return false, nil, mapError(err)
	}
	if len(rs) != 1 || len(rs[0].Rows) != 1 || len(rs[0].Rows[0]) != 3 {
		return false, nil, errors.New("the wake-ups lock: an unexpected answer")
	}
	row := rs[0].Rows[0]
	covered = map[string]bool{}
	for _, s := range strings.Split(strings.Trim(string(row[1]), "{}"), ",") {
		if i, err := strconv.Atoi(s); err == nil && i >= 0 && i < len(pubs) {
			covered[pubs[i]] = true
		}
	}
	return string(row[0]) == "t", covered, nil
}
