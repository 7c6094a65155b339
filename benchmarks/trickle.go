package benchmarks

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/admin"
	"github.com/queuebox/queuebox/dialects"
)

// The trickle scenario measures what a relay costs its database at the
// rates most outboxes see: single-row transactions at 1, 10, 50 and 200
// rows a second over 100 keys, each rate for --seconds (default 30), into
// one replica of the real binary with logical wake-ups, in a database of
// its own. It counts every transaction of that database (pg_stat_database)
// from the first insert until every row has arrived and the statistics
// have been flushed, less the inserts themselves, and sets that against
// the budget: three transactions per delivered row and two a second.

// trickleRates are the insert rates, rows per second.
var trickleRates = []int{1, 10, 50, 200}

// trickleKeys is how many keys the rows spread over.
const trickleKeys = 100

// statsFlush is how long a server's statistics may take to count a
// transaction: an idle session reports its counts within ten seconds.
const statsFlush = 11 * time.Second

func runTrickle(ctx context.Context, e *env) ([]Result, error) {
	bin, err := e.binary()
	if err != nil {
		return nil, err
	}
	window := 30 * time.Second
	if e.o.secondsGiven {
		window = time.Duration(e.o.Seconds) * time.Second
	}
	db, err := e.ownDatabase(ctx, "trickle")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	if !db.own {
		return nil, fmt.Errorf("trickle: the bench may not create a database of its own (%s): the count would include the bench's own work", db.why)
	}
	r, err := e.startWakeRelays(ctx, bin, db.url, "logical", 1, false)
	if err != nil {
		return nil, err
	}
	defer r.stop()
	// Reading the replica's metrics (to see it listen) keeps its admin
	// sampler reading for a while, as an operator's open page would.
	if err := sleepCtx(ctx, admin.WatchedFor+5*time.Second); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	count := func() (xacts, error) {
		var x xacts
		err := conn.QueryRow(ctx, `SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = $1`, db.name).Scan(&x.commits, &x.rollbacks)
		return x, err
	}
	var out []Result
	for _, rate := range trickleRates {
		res, err := e.trickleAt(ctx, r, count, rate, window)
		if err != nil {
			return out, err
		}
		out = append(out, res)
		fmt.Fprintf(e.o.Progress, "bench: trickle: %d rows/s: %s\n", rate, res.Note)
	}
	return out, nil
}

// trickleAt inserts rows at rate for window, one transaction each, waits
// for them all, and counts the database's transactions meanwhile.
// xacts are a database's committed and rolled-back transactions.
type xacts struct{ commits, rollbacks int64 }

func (e *env) trickleAt(ctx context.Context, r *wakeRelay, count func() (xacts, error), rate int, window time.Duration) (Result, error) {
	// Whatever the last rate left is counted before this one starts.
	if err := sleepCtx(ctx, statsFlush); err != nil {
		return Result{}, err
	}
	x0, err := count()
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	n := int(float64(rate) * window.Seconds())
	ids := make([]uuid.UUID, n)
	committed := make([]time.Time, n)
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); wait > 0 {
			if err := sleepCtx(ctx, wait); err != nil {
				return Result{}, err
			}
		}
		ids[i] = uuid.New()
		key := fmt.Sprintf("key-%d", i%trickleKeys)
		if err := r.d.OutboxInsert(ctx, []dialects.NewRow{{ID: &ids[i], Topic: "bench.trickle", Key: &key, Payload: e.payload}}); err != nil {
			return Result{}, err
		}
		committed[i] = time.Now()
		e.progress.add(1)
	}
	// Every row arrives (or a minute passes).
	deadline := time.Now().Add(time.Minute)
	var lat []float64
	missing := int64(0)
	for i := range n {
		for {
			if at, ok := r.dest.at(ids[i].String()); ok {
				lat = append(lat, max(0, float64(at.Sub(committed[i]))/float64(time.Millisecond)))
				break
			}
			if time.Now().After(deadline) {
				missing++
				break
			}
			if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
				return Result{}, err
			}
		}
	}
	if err := sleepCtx(ctx, statsFlush); err != nil {
		return Result{}, err
	}
	x1, err := count()
	if err != nil {
		return Result{}, err
	}
	seconds := time.Since(start).Seconds()
	delivered := int64(n) - missing
	// The relay's transactions are the database's commits less the
	// inserts. Its rollbacks are the WAL sender's: logical decoding reads
	// the catalogs of each committed transaction inside a transaction that
	// it then rolls back (no commit, no WAL), as for any logical
	// replication client; they are counted apart.
	relay := float64(x1.commits-x0.commits) - float64(n)
	decoding := float64(x1.rollbacks - x0.rollbacks)
	res := Result{Scenario: "trickle", Variant: fmt.Sprintf("%d rows/s", rate), Rows: n, Keys: trickleKeys, Replicas: 1,
		Seconds: seconds, Failed: missing, TransactionsPerSec: ptr(relay / seconds)}
	if delivered > 0 {
		perRow := relay / float64(delivered)
		budget := 3 + 2*seconds/float64(delivered)
		res.TransactionsPerRow, res.Ratio = ptr(perRow), ptr(perRow/budget)
		res.Note = fmt.Sprintf("%.0f relay transactions for %d rows in %.0f s: %.2f a row against a budget of %.2f (3 a row and 2 a second); and %.0f rolled back by logical decoding (%.2f a row)",
			relay, delivered, seconds, perRow, budget, decoding, decoding/float64(delivered))
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(p float64) *float64 { return ptr(lat[min(len(lat)-1, int(p*float64(len(lat))))]) }
		res.P50, res.P95, res.P99 = q(0.50), q(0.95), q(0.99)
	}
	return res, nil
}
