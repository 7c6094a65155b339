package postgres

// Logical wake-ups: the server tells the relay that rows arrived.
//
// The relays of a database share one stream (wakeshare.go): one of them
// holds the slot and forwards what it hears to the others, and in each
// process one hub serves every outbox of the database (a Listener per
// outbox, a hub per database). The holder keeps one replication
// connection (replication=database) with a TEMPORARY logical slot and the
// pgoutput plugin, subscribed to the publications of migration V16 of
// every outbox it covers, which publish the inserts into the outbox and
// inbox tables (only their id, from PostgreSQL 15 on). pgoutput sends a
// transaction's changes when it commits, and nothing of one that rolls
// back; the stream reads the Relation messages to know which relation id
// is which outbox's table, by schema and name (renamed tables and schemas
// work), and on each Commit whose transaction inserted into a table it
// nudges that table's channel of that outbox (dialects.Wakeups). The
// protocol is jackc/pglogrepl's.
//
// What it may cost, and what not:
//
//   - No history. A nudge says "something was inserted after I started
//     listening", so the slot is created for now (no snapshot exported),
//     and every position the server reports is acknowledged at once: the
//     server keeps no WAL for it beyond what it is decoding. The slot is
//     temporary: the server drops it when the session ends, however it
//     ends (a crash, kill -9, a lost network), so nothing is left behind.
//   - Never the engine's time. Nudges are coalesced into channels that hold
//     one each; a send never waits.
//   - Never a row. A nudge is a hint; claims, the gate and the head rule
//     decide what is delivered. A lost or late nudge costs latency: the
//     relay keeps a slow probe while listening and its probe pace while not.
//
// The listener reconnects after a lost connection with a capped backoff
// (internal/backoff), and reports where it stands (dialects.WakeupStatus):
// listening, connecting, reconnecting, unavailable (a missing setting or
// grant, named; asked again every few minutes, so that a grant takes effect
// without a restart) or off. Each change of state nudges both channels, so
// that the engine looks at once and adapts its probe pace.
//
// Wakeups decides at start: with database.wakeups = logical, a server that
// cannot provide logical replication fails it with a sentence that names
// the missing setting or grant; with auto, the relay probes and the status
// says why; with probe, nothing connects.

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/backoff"
)

//go:embed wakeups.sql
var wakeupsFS embed.FS

// wakeupStatements is the catalog of wakeups.sql.
type wakeupStatements struct {
	WakeupsServer, WakeupSlot string
}

// WakeupOptions configure a Listener. Only Mode is required. The listeners
// of one database share a hub (wakeshare.go), which takes the shortest
// Heartbeat and Recheck among them and the first one's Retry.
type WakeupOptions struct {
	Mode dialects.WakeupMode
	// Logger receives the decision at start and every change of state;
	// nil discards them.
	Logger *slog.Logger
	// OnStatus, when set, is called with every new status, on the hub's
	// goroutine, which serves every outbox of the database: it must not
	// block (a metric, a log line).
	OnStatus func(dialects.WakeupStatus)
	// Retry paces reconnection after a failure; zero: from 100 ms, doubling
	// up to 30 s. It starts over once the listener listens again.
	Retry backoff.Capped
	// Recheck is how long the listener waits before asking again a server
	// that was unavailable; zero: 5 minutes.
	Recheck time.Duration
	// Heartbeat is how often the listener reports its position and asks the
	// server for a sign of life; zero: 10 s. A server silent for three
	// heartbeats, and at least 30 s, is taken for lost (a busy server may
	// be slow to answer; taking it for lost would cost a new slot).
	Heartbeat time.Duration
}

// Listener is the logical wake-up source of one outbox of a relay (see
// the top of this file). It implements dialects.Wakeups; Run joins the
// hub of its database, which does the work.
type Listener struct {
	d       *Dialect
	q       wakeupStatements
	opts    WakeupOptions
	log     *slog.Logger
	outbox  chan struct{}
	inbox   chan struct{}
	pauseCh chan struct{}
	status  atomic.Pointer[dialects.WakeupStatus]
	// pauses: the session listening now hears the destinations table too
	// (the publication of migration V20 exists).
	pauses bool
	// role is the server's name of the connecting role, for the sentences
	// about grants (stored by each check; read by the stream's goroutine).
	role    atomic.Pointer[string]
	running atomic.Bool
	// pub is the outbox's publication, which names it to the hub.
	pub string
	// The hub's goroutine alone reads and writes these (wakehub.go):
	// ready says that the last check passed, checkedAt when, tbl what it
	// found; recheckAt is when an unavailable listener is checked again.
	ready     bool
	checkedAt time.Time
	recheckAt time.Time
	tbl       tables
}

var _ dialects.Wakeups = (*Listener)(nil)

// unavailable is why the server cannot provide logical wake-ups: a sentence
// that names the missing setting or grant.
type unavailable struct {
	reason string
	// room: the server has no room for one more slot or WAL sender, which
	// only the relay that holds the slot needs.
	room bool
}

func (u *unavailable) Error() string { return u.reason }

// relation is a table as the replication stream names it.
type relation struct{ schema, name string }

// tables are the outbox and inbox tables as the server names them, and
// the destinations table when the publication of its changes exists; a
// missing one has an empty name.
type tables struct{ outbox, inbox, pauses relation }

// Wakeups makes the wake-up source that opts.Mode asks for, and decides
// what it can be: with WakeupsProbe it never connects (Status says off);
// otherwise it checks the server and opens a replication connection once,
// then closes it (Run opens its own). With WakeupsLogical, a server that
// cannot provide logical replication, or that cannot be asked, is an error
// whose text names what is missing; with WakeupsAuto the listener is then
// unavailable or reconnecting, and the relay probes. Call Run to listen.
func (d *Dialect) Wakeups(ctx context.Context, opts WakeupOptions) (*Listener, error) {
	l := &Listener{d: d, opts: opts, log: opts.Logger, outbox: make(chan struct{}, 1), inbox: make(chan struct{}, 1),
		pauseCh: make(chan struct{}, 1), pub: d.names.Publication()}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.opts.Retry.First <= 0 {
		l.opts.Retry = backoff.Capped{First: 100 * time.Millisecond, Max: 30 * time.Second}
	}
	l.opts.Recheck = cmp.Or(l.opts.Recheck, 5*time.Minute)
	l.opts.Heartbeat = cmp.Or(l.opts.Heartbeat, 10*time.Second)
	switch opts.Mode {
	case dialects.WakeupsProbe:
		l.set(dialects.WakeupsOff, "database.wakeups is probe", "", "")
		return l, nil
	case dialects.WakeupsAuto, dialects.WakeupsLogical:
	default:
		return nil, fmt.Errorf("database.wakeups is %q; use %s, %s or %s", opts.Mode, dialects.WakeupsAuto, dialects.WakeupsLogical, dialects.WakeupsProbe)
	}
	if err := dialects.Catalog(d.names, Quoting, wakeupsFS, "wakeups.sql", &l.q); err != nil {
		return nil, err
	}
	// The checks of a relay that may follow: another relay may hold the
	// slot, so a server without room for one more is no reason to refuse
	// this one; the relay that takes the lock checks the room (round).
	_, err := l.check(ctx, false)
	if err == nil {
		var conn *pgconn.PgConn
		if conn, err = l.dial(ctx); err == nil {
			l.close(conn)
		}
		var u *unavailable
		if err == nil || errors.As(err, &u) && u.room {
			l.set(dialects.WakeupsConnecting, "", "", "")
			return l, nil
		}
	}
	var u *unavailable
	if opts.Mode == dialects.WakeupsLogical {
		if errors.As(err, &u) {
			return nil, fmt.Errorf("database.wakeups is logical, but %s", u.reason)
		}
		return nil, fmt.Errorf("database.wakeups is logical, but the server could not be asked for logical replication: %w", err)
	}
	if errors.As(err, &u) {
		l.set(dialects.WakeupsUnavailable, u.reason, "", "")
	} else {
		l.set(dialects.WakeupsConnecting, err.Error(), "", "")
	}
	return l, nil
}

// Outbox receives a nudge after inserts into the outbox table committed.
func (l *Listener) Outbox() <-chan struct{} { return l.outbox }

// Inbox receives a nudge after inserts into the inbox table committed.
func (l *Listener) Inbox() <-chan struct{} { return l.inbox }

// Pauses receives a nudge after a change to the destinations table (a
// pause or a resumption) committed.
func (l *Listener) Pauses() <-chan struct{} { return l.pauseCh }

// Status says where the listener stands.
func (l *Listener) Status() dialects.WakeupStatus { return *l.status.Load() }

// Run listens until ctx ends: it joins the hub of its database, which
// follows the relay that holds the database's slot or holds it, for every
// outbox of the process on that database (wakeshare.go), and after a
// failure starts over (after the backoff, or after Recheck when the server
// or this outbox was unavailable). It returns nil when ctx ends; the last
// listener of a database returns once the hub's connections are closed
// (and with them the slot dropped and the locks released). It returns at
// once for a listener that is off. Call it once.
func (l *Listener) Run(ctx context.Context) error {
	if l.Status().State == dialects.WakeupsOff {
		<-ctx.Done()
		return nil
	}
	if !l.running.CompareAndSwap(false, true) {
		return errors.New("the wake-up listener runs already")
	}
	r := l.d.wakeRegistry()
	h := r.join(l)
	<-ctx.Done()
	r.leave(h, l)
	return nil
}

// check asks the server whether it can provide logical wake-ups (a
// missing setting or grant is an *unavailable) and which tables the
// stream will name. Only a listener that is to hold the slot (leading)
// needs room for one more slot and WAL sender.
func (l *Listener) check(ctx context.Context, leading bool) (tables, error) {
	var tbl tables
	var walLevel string
	var mayReplicate, published, outboxPublished, inboxPublished bool
	var maxSlots, slots, maxSenders, senders int
	var inboxSchema, inboxName *string
	var outboxSchema, outboxName *string
	var pausesSchema, pausesName *string
	var role string
	err := l.d.pool.QueryRow(ctx, l.q.WakeupsServer).Scan(&walLevel, &role, &mayReplicate, &maxSlots, &slots, &maxSenders, &senders,
		&outboxSchema, &outboxName, &inboxSchema, &inboxName, &published, &outboxPublished, &inboxPublished, &pausesSchema, &pausesName)
	if err != nil {
		return tbl, mapError(err)
	}
	l.role.Store(&role)
	pub := l.d.names.Publication()
	outbox := l.d.names.Outbox
	if l.d.names.Schema != "" {
		outbox = l.d.names.Schema + "." + outbox
	}
	switch {
	case walLevel != "logical":
		return tbl, &unavailable{reason: fmt.Sprintf("the server's wal_level is %s, and logical replication needs wal_level = logical "+
			"(ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL)", walLevel)}
	case outboxName == nil:
		return tbl, &unavailable{reason: fmt.Sprintf("the outbox table %s does not exist (run queuebox migrate up)", outbox)}
	case !published:
		return tbl, &unavailable{reason: fmt.Sprintf("the publication %s does not exist: migration V16 creates it when its role has CREATE on the database; "+
			"otherwise create it as the tables' owner (docs/configuration.md, \"Enabling logical replication\")", pub)}
	case !outboxPublished:
		return tbl, &unavailable{reason: fmt.Sprintf("the publication %s does not publish the inserts into %s.%s", pub, *outboxSchema, *outboxName)}
	case inboxName != nil && !inboxPublished:
		return tbl, &unavailable{reason: fmt.Sprintf("the publication %s does not publish the inserts into %s.%s", pub, *inboxSchema, *inboxName)}
	case leading && slots >= maxSlots:
		return tbl, &unavailable{reason: slotsReason(maxSlots), room: true}
	case leading && senders >= maxSenders:
		return tbl, &unavailable{reason: sendersReason(maxSenders), room: true}
	}
	tbl.outbox = relation{*outboxSchema, *outboxName}
	if inboxName != nil {
		tbl.inbox = relation{*inboxSchema, *inboxName}
	}
	if pausesName != nil {
		tbl.pauses = relation{*pausesSchema, *pausesName}
	}
	if !mayReplicate {
		// A membership allowed it (Amazon RDS's rds_replication): fine.
		l.log.Debug("wake-ups: the role has no REPLICATION attribute, yet may replicate", "role", role)
	}
	return tbl, nil
}

// dial opens the replication connection.
func (l *Listener) dial(ctx context.Context) (*pgconn.PgConn, error) {
	cfg := l.d.cfg.ConnConfig.Config.Copy()
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		var u *unavailable
		if c := l.classify(err); errors.As(c, &u) {
			return nil, c
		}
		return nil, mapError(err)
	}
	return conn, nil
}

// slotsReason and sendersReason say that the server has no room for one
// more listener; n is the limit, or 0 when it is not known.
func slotsReason(n int) string {
	return fmt.Sprintf("all%s replication slots of the server are in use (max_replication_slots); the relay that listens for a database needs one: "+
		"raise max_replication_slots (a restart) or drop the slots that nothing uses", count(n))
}

func sendersReason(n int) string {
	return fmt.Sprintf("all%s WAL senders of the server are in use (max_wal_senders); the relay that listens for a database needs one: "+
		"raise max_wal_senders (a restart)", count(n))
}

func count(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(" %d", n)
}

// classify turns the server's refusals that a setting or grant would lift
// into an *unavailable that names it; other errors are returned as they are.
func (l *Listener) classify(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	role := ""
	if r := l.role.Load(); r != nil {
		role = *r
	}
	switch {
	case pgErr.Code == "42501":
		return &unavailable{reason: fmt.Sprintf("the role %s may not open a replication connection: grant it with ALTER ROLE %s REPLICATION "+
			"(on Amazon RDS: GRANT rds_replication TO %s)", role, Quoting.Ident(role), Quoting.Ident(role))}
	case pgErr.Code == "53400":
		return &unavailable{reason: slotsReason(0), room: true}
	case pgErr.Code == "53300" && strings.Contains(pgErr.Message, "max_wal_senders"):
		return &unavailable{reason: sendersReason(0), room: true}
	case pgErr.Code == "55000" && strings.Contains(pgErr.Message, "wal_level"):
		return &unavailable{reason: "the server's wal_level is below logical, and logical replication needs wal_level = logical " +
			"(ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL)"}
	case pgErr.Code == "42704" && strings.Contains(pgErr.Message, "publication"):
		return &unavailable{reason: fmt.Sprintf("the publication %s does not exist: migration V16 creates it when its role has CREATE on the database; "+
			"otherwise create it as the tables' owner (docs/configuration.md, \"Enabling logical replication\")", l.d.names.Publication())}
	case strings.HasPrefix(pgErr.Code, "28"):
		return &unavailable{reason: fmt.Sprintf("the server refused the role %s a replication connection (%s): "+
			"a pg_hba.conf line must allow it for this database", role, pgErr.Message)}
	}
	return err
}

func (l *Listener) close(conn *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// nudge sends on a channel that holds one value, without waiting: a value
// already there says the same.
func nudge(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// nudgeBits nudges the channels of the tables that bits name.
func (l *Listener) nudgeBits(bits uint32) {
	if bits&fwdOutbox != 0 {
		nudge(l.outbox)
	}
	if bits&fwdInbox != 0 {
		nudge(l.inbox)
	}
	if bits&fwdPauses != 0 {
		nudge(l.pauseCh)
	}
}

// set changes the status, logs the change, reports it, and nudges both
// channels (see dialects.Wakeups). A status that does not change is not
// reported again.
func (l *Listener) set(state dialects.WakeupState, reason, slot, channel string) {
	if old := l.status.Load(); old != nil && old.State == state && old.Reason == reason && old.Slot == slot && old.Channel == channel {
		return
	}
	st := dialects.WakeupStatus{Mode: l.opts.Mode, State: state, Reason: reason, Slot: slot, Channel: channel, Since: time.Now(),
		Pauses: state == dialects.WakeupsListening && l.pauses}
	moved := false
	if old := l.status.Load(); old != nil && old.State == state && state == dialects.WakeupsListening && old.Channel == channel {
		// Only the slot changed: the stream moved to a new one as an
		// outbox came or went.
		moved = true
		st.Since = old.Since
	}
	l.status.Store(&st)
	switch {
	case moved:
		l.log.Debug("wake-ups: listening on a new slot", "slot", slot, "publication", l.d.names.Publication())
	case state == dialects.WakeupsListening && channel != "":
		l.log.Info("wake-ups: listening through the replica that holds this database's slot", "channel", channel, "publication", l.d.names.Publication())
	case state == dialects.WakeupsListening:
		l.log.Info("wake-ups: listening for inserts with logical replication", "slot", slot, "publication", l.d.names.Publication())
	case state == dialects.WakeupsConnecting && (reason == reasonTakingOver || reason == reasonHolderStarting || reason == reasonExtending):
		// Setting up as designed: nothing for an operator to do.
		l.log.Info("wake-ups: probing until logical replication is set up", "reason", reason)
	case state == dialects.WakeupsConnecting:
		if reason != "" {
			l.log.Warn("wake-ups: probing until logical replication is set up", "reason", reason)
		}
	case state == dialects.WakeupsReconnecting:
		l.log.Warn("wake-ups: the replication connection failed; probing until it is back", "reason", reason)
	case state == dialects.WakeupsUnavailable:
		l.log.Info("wake-ups: probing, logical replication is not available", "reason", reason)
	case state == dialects.WakeupsOff:
		l.log.Info("wake-ups: probing", "reason", reason)
	}
	nudge(l.outbox)
	nudge(l.inbox)
	nudge(l.pauseCh)
	if l.opts.OnStatus != nil {
		l.opts.OnStatus(st)
	}
}
