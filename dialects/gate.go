package dialects

import (
	"math"
	"slices"
	"time"
)

// Probe is what one OutboxProbe read: where the outbox sequence stood, and
// then, read after it, where the transaction ids stood. Transaction ids are
// 64-bit and grow; on SQL Server they are the engine's transaction ids.
type Probe struct {
	// Last is the last sequence value handed out (0 when none yet).
	Last int64
	// Xmin: every transaction with a smaller id has ended.
	Xmin int64
	// Next is the next transaction id to be assigned, read after Last:
	// every transaction that had an id when Last was read is below it.
	// (PostgreSQL's snapshot xmax is not that bound: it is one past the
	// newest id that ended, and a transaction with a newer id may run.)
	Next int64
	// Rewinds is the table's rewind counter (see Bounds), read with Last;
	// 0 where the dialect keeps none.
	Rewinds int64
	// Writer is the id of the oldest open transaction that drew a value of
	// the table's sequence, read after Last: NoWriters when none is open,
	// 0 when the dialect cannot tell (then only Xmin settles). Transactions
	// that write no row of the table are not writers, so a long one (a
	// batch job on other tables, a session left idle in transaction) does
	// not hold rows back.
	Writer int64
	// Writers are the ids of every open transaction that drew a value of
	// the table's sequence, read after Last, oldest first (Writer is the
	// first); empty when none is open, nil when the dialect cannot tell
	// (or one writer's id could not be read: then Writer is 0 too).
	Writers []int64
	// NextDue is how long until the earliest pending row scheduled later
	// comes due, and Later whether one is (OutboxProbe only): a relay that
	// has taken everything due claims again then.
	NextDue time.Duration
	Later   bool
}

// NoWriters is Probe.Writer when no transaction that drew a sequence value
// is open.
const NoWriters = math.MaxInt64

// Epoch is a sequence value and the transaction horizon that settles it:
// once a snapshot's Xmin reaches Next, every transaction that drew a value
// up to Last has ended.
type Epoch struct {
	Last, Next int64
}

// Gate restricts a claim to settled keyed rows. A keyed row is settled when
// every transaction that could still commit a row of its key with a smaller
// sequence has ended, so that the head rule sees every earlier row. Rows
// with a sequence up to Settled are settled; the claim's own snapshot may
// settle more of the Open epochs. Unkeyed rows take part in no order and
// pass the gate always.
type Gate struct {
	Settled int64
	Open    []Epoch
	// Writers are a probe's writers (Probe.Writers), read after every open
	// epoch's Last: an open epoch also settles in a claim whose snapshot
	// no longer sees any of them below its Next running (they ended before
	// the snapshot; any other transaction that drew a value up to its Last
	// had ended before the probe). Nil when not known.
	Writers []int64
}

// maxOpenEpochs bounds how many epochs a Watermark keeps: while a
// transaction holds the horizon back, new probes replace the newest open
// epoch instead of growing the list.
const maxOpenEpochs = 8

// Watermark follows probes and settles epochs. It is not safe for
// concurrent use; its owner (the claimer) hands out copies of its Gate.
//
// Why it is right (PostgreSQL; SQL Server's transaction views play the same
// part): a transaction has its id before it draws a sequence value (the
// outbox's xid_first trigger sees to it), and a probe reads the sequence
// before it reads Next. A transaction that drew a value up to Last
// therefore had an id below Next. When a later snapshot's Xmin is at or past
// Next, all of those transactions have ended: committed (their rows are
// visible to any statement that starts afterwards) or rolled back. Nothing
// can later appear with a sequence up to Last.
type Watermark struct {
	settled int64
	open    []Epoch
	// lastSeen is the newest Last of any probe; opened is when each open
	// epoch was opened (the first probe of an epoch that took in others).
	lastSeen int64
	opened   []time.Time
	// writers are the writers of the probe that had seen the newest Last,
	// writersLast (see Gate.Writers).
	writers     []int64
	writersLast int64
}

// Observe adds a probe: its own epoch, and its horizon, which may settle
// open epochs (its own included). The horizon is the later of Xmin (no
// transaction below it runs) and Writer (no transaction below it that drew
// a sequence value runs): either way, every transaction that could still
// commit a row up to an epoch's Last has ended once the horizon reaches the
// epoch's Next, because it drew that value before this probe read Writer.
func (w *Watermark) Observe(p Probe, now time.Time) {
	if p.Last > w.lastSeen {
		w.lastSeen = p.Last
	}
	if p.Last > w.settled {
		if n := len(w.open); n > 0 && (n >= maxOpenEpochs || w.open[n-1].Next >= p.Next) {
			// Keep the list short: the newest epoch takes the newer Last
			// and the later horizon.
			w.open[n-1] = Epoch{Last: max(w.open[n-1].Last, p.Last), Next: max(w.open[n-1].Next, p.Next)}
		} else {
			w.open = append(w.open, Epoch{Last: p.Last, Next: p.Next})
			w.opened = append(w.opened, now)
		}
	}
	// Probes may be observed out of the order they ran in (each claim
	// probes, and claims overlap). Xmin settles an epoch whatever the
	// order: no transaction below it runs, and one that drew a value up to
	// the epoch's Last had an id below its Next. The writers only tell of
	// the values this probe had seen: an epoch with a later Last was read
	// after them, and a transaction may have drawn its values since.
	if p.Last >= w.writersLast {
		w.writers, w.writersLast = p.Writers, p.Last
	}
	w.settle(p.Xmin, max(p.Xmin, p.Writer), p.Last, now)
}

// SettleBelow settles every open epoch whose horizon is at or below xmin:
// no transaction with an id below xmin that could commit a row is running.
func (w *Watermark) SettleBelow(xmin int64, now time.Time) { w.settle(xmin, xmin, 0, now) }

// settle settles the open epochs, oldest first, whose horizon is at or
// below xmin, or at or below horizon if their Last is at most upTo.
func (w *Watermark) settle(xmin, horizon, upTo int64, now time.Time) {
	i := 0
	for i < len(w.open) && (w.open[i].Next <= xmin || (w.open[i].Last <= upTo && w.open[i].Next <= horizon)) {
		w.settled = max(w.settled, w.open[i].Last)
		i++
	}
	if i > 0 {
		w.open = slices.Delete(w.open, 0, i)
		w.opened = slices.Delete(w.opened, 0, i)
	}
}

// Clone returns an independent copy.
func (w *Watermark) Clone() *Watermark {
	c := *w
	c.open = slices.Clone(w.open)
	c.opened = slices.Clone(w.opened)
	c.writers = slices.Clone(w.writers)
	return &c
}

// Gate returns the gate for the next claim (a copy).
func (w *Watermark) Gate() *Gate {
	g := &Gate{Settled: w.settled, Open: slices.Clone(w.open)}
	if n := len(w.open); n == 0 || w.open[n-1].Last <= w.writersLast {
		g.Writers = slices.Clone(w.writers)
	}
	return g
}

// Settled is the watermark: keyed rows up to it are settled.
func (w *Watermark) Settled() int64 { return w.settled }

// LastSeen is the newest sequence value any probe saw.
func (w *Watermark) LastSeen() int64 { return w.lastSeen }

// Waiting reports since when the oldest open epoch waits, and whether one
// does: keyed rows inserted since then wait for running transactions. It
// is when that epoch was opened, not when the last one before it settled:
// the walks look back to it (see the claimer's reach), and a later time
// let them pass over rows of the epochs still open, which then waited for
// a look for stragglers once they settled.
func (w *Watermark) Waiting() (time.Time, bool) {
	if len(w.open) == 0 {
		return time.Time{}, false
	}
	return w.opened[0], true
}
