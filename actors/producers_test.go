package actors_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// Producer transactions race against a live relay the way applications do:
// each writes several keys, in random order, with pauses between its
// inserts, and some also lock a shared business row (so that one waits on
// another's lock and commits after it although it drew the smaller sequence
// value). No producer transaction fails or waits because of QueueBox, and at
// the receiver every key's rows arrive in sequence order.
func TestConcurrentProducersKeepKeyOrder(t *testing.T) {
	t.Parallel()
	h, recv, tbl, biz := producerWorld(t, 3)
	ctx := context.Background()

	const producers, txPerProducer, keys = 8, 40, 12
	var rows, failed atomic.Int64
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(p), 42))
			for range txPerProducer {
				n, err := produce(ctx, h, tbl, biz, rnd, keys)
				if err != nil {
					failed.Add(1)
					t.Errorf("a producer transaction failed: %v", err)
					continue
				}
				rows.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d producer transactions failed", failed.Load())
	}
	h.waitState(dialects.Delivered, rows.Load(), 2*time.Minute)
	if dups := recv.CheckOrder(t); dups != 0 {
		t.Errorf("%d duplicates without a fault", dups)
	}
	if got := recv.Delivered(); got != int(rows.Load()) {
		t.Fatalf("the receiver accepted %d rows, want %d", got, rows.Load())
	}
}

// produce runs one application transaction: 2 to 5 rows over random keys in
// random order (see businessTx).
func produce(ctx context.Context, h *harness, tbl, biz string, rnd *rand.Rand, keys int) (int, error) {
	return businessTx(ctx, h, biz, rnd, 2+rnd.IntN(4), func(tx pgx.Tx, _ int) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload) VALUES ('t', $1, '{}')`, fmt.Sprintf("k%d", rnd.IntN(keys)))
		return err
	})
}

// producerWorld starts a relay delivering every row to a receiver, beside
// an application's business table (accounts, rows 1 to accounts) in the
// same schema; it returns the relay's harness, the receiver, and the
// quoted names of the outbox and the business table.
func producerWorld(t *testing.T, accounts int) (h *harness, recv *testrecv.Receiver, tbl, biz string) {
	t.Helper()
	h = newHarness(t)
	recv = testrecv.New(t, nil)
	h.routeAllTo(httpDest(t, recv.URL+"/x", nil))
	schema := h.d.Names().Schema
	tbl = pgx.Identifier{schema, "outbox"}.Sanitize()
	biz = pgx.Identifier{schema, "accounts"}.Sanitize()
	if _, err := h.d.Pool().Exec(context.Background(), `CREATE TABLE `+biz+` (id int PRIMARY KEY, balance int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := h.d.Pool().Exec(context.Background(), `INSERT INTO `+biz+` SELECT g, 0 FROM generate_series(1, $1::int) AS g`, accounts); err != nil {
		t.Fatal(err)
	}
	h.start()
	return h, recv, tbl, biz
}

// businessTx runs one application transaction of n inserts, a pause of 0
// to 2 ms after each and, one time in three, an update of a shared
// business row of biz (ids 1 to 3) before one of them: transactions wait on
// each other's business-row locks as real ones do.
func businessTx(ctx context.Context, h *harness, biz string, rnd *rand.Rand, n int, insert func(tx pgx.Tx, i int) error) (int, error) {
	tx, err := h.d.Pool().Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	lockAt := -1
	if rnd.IntN(3) == 0 {
		lockAt = rnd.IntN(n)
	}
	for i := range n {
		if i == lockAt {
			if _, err := tx.Exec(ctx, `UPDATE `+biz+` SET balance = balance + 1 WHERE id = $1`, 1+rnd.IntN(3)); err != nil {
				return 0, err
			}
		}
		if err := insert(tx, i); err != nil {
			return 0, err
		}
		// The application works a little between its inserts.
		if _, err := tx.Exec(ctx, `SELECT pg_sleep($1)`, float64(rnd.IntN(3))/1000); err != nil {
			return 0, err
		}
	}
	return n, tx.Commit(ctx)
}
