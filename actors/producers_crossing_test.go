package actors_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testkit"
)

// Two application transactions write two keys in opposite orders and are
// both open at once, round after round, against a live relay: T1 inserts
// key A then key B, T2 key B then key A, and both have inserted their first
// row before either inserts its second. Whichever commits first, one key's
// row with the later sequence value is committed while the transaction
// holding that key's earlier row is still open. With a shared business row,
// one transaction also waits on the other's row lock, and so commits after
// it although it drew the smaller sequence value of a key. Commits come
// together, back to back, or with pauses that give the relay time to see
// the first one alone. No transaction may fail (V12's key locks made such
// pairs deadlock, 40P01), every row is delivered exactly once, and at the
// receiver every key's rows arrive in sequence order.
func TestCrossingProducersKeepKeyOrder(t *testing.T) {
	t.Parallel()
	t.Run("opposite key orders", func(t *testing.T) {
		t.Parallel()
		runCrossing(t, false)
	})
	t.Run("opposite key orders and a shared row lock", func(t *testing.T) {
		t.Parallel()
		runCrossing(t, true)
	})
}

// producedRow is a row an application transaction inserted.
type producedRow struct {
	key string
	seq int64
}

// appTx is one application transaction on a connection of its own (not
// the relay's pool). The test runs its steps one at a time, or starts a
// step that is to wait on a lock and collects its result later; a
// connection never runs two steps at once.
type appTx struct {
	conn *pgx.Conn
	tx   pgx.Tx
	rows map[string]producedRow
	tbl  string
}

func newAppTx(t *testing.T, h *harness, tbl string) *appTx {
	t.Helper()
	cfg := h.d.Pool().Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "queuebox-test-producer"
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return &appTx{conn: conn, tbl: tbl}
}

// start runs one step in a goroutine; its error comes on the channel.
func (a *appTx) start(step func(ctx context.Context) error) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done <- step(ctx)
	}()
	return done
}

func (a *appTx) begin(ctx context.Context) (err error) {
	a.rows = map[string]producedRow{}
	a.tx, err = a.conn.Begin(ctx)
	return err
}

func (a *appTx) insert(key string, round int) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var id string
		var seq int64
		if err := a.tx.QueryRow(ctx, `INSERT INTO `+a.tbl+` (topic, key, payload) VALUES ('t', $1, $2) RETURNING id::text, sequence`,
			key, fmt.Sprintf(`{"round":%d}`, round)).Scan(&id, &seq); err != nil {
			return fmt.Errorf("insert %s: %w", key, err)
		}
		a.rows[id] = producedRow{key: key, seq: seq}
		return nil
	}
}

// work keeps the transaction busy for d before its next statement, as an
// application's work between its insert and its commit would.
func (a *appTx) work(d time.Duration) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := a.tx.Exec(ctx, `SELECT pg_sleep($1)`, d.Seconds())
		return err
	}
}

func (a *appTx) update(biz string, by int) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if _, err := a.tx.Exec(ctx, `UPDATE `+biz+` SET balance = balance + $1 WHERE id = 1`, by); err != nil {
			return fmt.Errorf("update the shared row: %w", err)
		}
		return nil
	}
}

func (a *appTx) commit(ctx context.Context) error {
	if err := a.tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// await waits for a started step.
func await(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("an application statement hangs")
		return nil
	}
}

// waitOnLock waits until the session of a is waiting on a lock; its step
// must not end first.
func waitOnLock(t *testing.T, h *harness, a *appTx, done <-chan error) {
	t.Helper()
	pid := a.conn.PgConn().PID()
	testkit.Eventually(t, "the update of the shared row waits on a lock", 30*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("the update of the shared row did not wait for the other transaction's lock (err %v)", err)
		default:
		}
		var waiting bool
		if err := h.d.Pool().QueryRow(context.Background(),
			`SELECT COALESCE(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting); err != nil {
			return err
		}
		if !waiting {
			return errors.New("its session is not waiting on a lock")
		}
		return nil
	})
}

func runCrossing(t *testing.T, shared bool) {
	h, recv, tbl, biz := producerWorld(t, 1)
	ctx := context.Background()

	txs := [2]*appTx{newAppTx(t, h, tbl), newAppTx(t, h, tbl)}
	produced := map[string]producedRow{}
	var failures []string
	// -1: both commit at once (without a shared row only: there one waits).
	delays := []time.Duration{-1, 0, 2 * time.Millisecond, 20 * time.Millisecond}
	if shared {
		delays = delays[1:]
	}
	const rounds = 48
	for r := range rounds {
		// first inserts its first row first, and so draws the smaller
		// sequence value of key a; other draws the smaller one of key b.
		// lead commits first; with a shared row it takes the row's lock
		// first, and the other one waits for it.
		first, other := txs[r%2], txs[1-r%2]
		lead, trail := first, other
		if (r/2)%2 == 1 {
			lead, trail = other, first
		}
		delay := delays[(r/4)%len(delays)]
		a, b := fmt.Sprintf("a%d", r%3), fmt.Sprintf("b%d", r%3)
		second := map[*appTx]string{first: b, other: a}

		err := func() error {
			for _, tx := range txs {
				if err := tx.begin(ctx); err != nil {
					return err
				}
			}
			// Both insert their first row before either inserts its second.
			if err := await(t, first.start(first.insert(a, r))); err != nil {
				return err
			}
			if err := await(t, other.start(other.insert(b, r))); err != nil {
				return err
			}
			if shared {
				if err := await(t, lead.start(lead.update(biz, 1))); err != nil {
					return err
				}
				waited := trail.start(trail.update(biz, -1))
				waitOnLock(t, h, trail, waited)
				lerr := await(t, lead.start(lead.insert(second[lead], r)))
				if lerr == nil && delay > 0 {
					lerr = await(t, lead.start(lead.work(delay)))
				}
				if lerr == nil {
					lerr = await(t, lead.start(lead.commit))
				} else {
					_ = lead.tx.Rollback(ctx)
				}
				// The lead's end releases the row lock.
				if err := await(t, waited); err != nil {
					return err
				}
				if lerr != nil {
					return lerr
				}
				keepCommitted(produced, lead)
				if err := await(t, trail.start(trail.insert(second[trail], r))); err != nil {
					return err
				}
				if err := await(t, trail.start(trail.commit)); err != nil {
					return err
				}
				keepCommitted(produced, trail)
				return nil
			}
			// The second rows at once, then the commits.
			d1, d2 := first.start(first.insert(b, r)), other.start(other.insert(a, r))
			if err1, err2 := await(t, d1), await(t, d2); err1 != nil || err2 != nil {
				return errors.Join(err1, err2)
			}
			if delay < 0 {
				d1, d2 := lead.start(lead.commit), trail.start(trail.commit)
				err1, err2 := await(t, d1), await(t, d2)
				if err1 == nil {
					keepCommitted(produced, lead)
				}
				if err2 == nil {
					keepCommitted(produced, trail)
				}
				return errors.Join(err1, err2)
			}
			if err := await(t, lead.start(lead.commit)); err != nil {
				return err
			}
			keepCommitted(produced, lead)
			if delay > 0 {
				if err := await(t, trail.start(trail.work(delay))); err != nil {
					return err
				}
			}
			if err := await(t, trail.start(trail.commit)); err != nil {
				return err
			}
			keepCommitted(produced, trail)
			return nil
		}()
		if err != nil {
			failures = append(failures, fmt.Sprintf("round %d: %v", r, err))
			for _, tx := range txs {
				if tx.tx != nil {
					_ = tx.tx.Rollback(ctx)
				}
			}
			if len(failures) == 3 {
				break // a deadlock costs a second a round
			}
		}
	}
	if len(failures) != 0 {
		t.Fatalf("application transactions failed (a deadlock, 40P01, or a serialization failure would be QueueBox's):\n%s",
			strings.Join(failures, "\n"))
	}
	if len(produced) != rounds*4 {
		t.Fatalf("%d rows committed, want %d", len(produced), rounds*4)
	}

	h.waitState(dialects.Delivered, int64(len(produced)), 2*time.Minute)
	if dups := recv.CheckOrder(t); dups != 0 {
		t.Errorf("%d duplicates without a fault", dups)
	}
	reqs := recv.Requests()
	if len(reqs) != len(produced) {
		t.Errorf("the receiver got %d requests for %d rows", len(reqs), len(produced))
	}
	seen := map[string]bool{}
	for _, q := range reqs {
		p, ok := produced[q.ID]
		switch {
		case !ok:
			t.Errorf("the receiver got row %s, which no transaction committed", q.ID)
		case q.Key != p.key || q.Sequence != p.seq:
			t.Errorf("row %s arrived as key %s sequence %d, was inserted as key %s sequence %d", q.ID, q.Key, q.Sequence, p.key, p.seq)
		case q.Status != 200:
			t.Errorf("row %s: status %d", q.ID, q.Status)
		}
		seen[q.ID] = true
	}
	for id := range produced {
		if !seen[id] {
			t.Errorf("row %s was never delivered", id)
		}
	}
}

// keepCommitted records the rows of a committed transaction.
func keepCommitted(produced map[string]producedRow, tx *appTx) {
	for id, r := range tx.rows {
		produced[id] = r
	}
}
