package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testkit"
)

// BenchmarkClaimComplete drains a backlog with the two hot statements: claim
// n rows, then mark them delivered, by one loop or two overlapping loops.
// Rows per second is the figure to compare with the raw baseline
// (`queuebox bench --scenarios raw`, docs/performance.md).
func BenchmarkClaimComplete(b *testing.B) {
	for _, batch := range []int{1, 100, 1000} {
		for _, loops := range []int{1, 2} {
			for _, keyed := range []bool{false, true} {
				name := fmt.Sprintf("batch=%d/loops=%d/keys=%v", batch, loops, keyed)
				b.Run(name, func(b *testing.B) { benchClaimComplete(b, batch, loops, keyed) })
			}
		}
	}
}

func benchClaimComplete(b *testing.B, batch, loops int, keyed bool) {
	d := open(b, 0)
	ctx := context.Background()
	rows := 20000
	if batch == 1 {
		rows = 2000
	}
	tbl := pgx.Identifier{d.Names().Schema, "outbox"}.Sanitize()
	keyExpr := "NULL"
	if keyed {
		keyExpr = "'k' || (g % 1000)"
	}
	var elapsed time.Duration
	drained := 0
	for b.Loop() {
		b.StopTimer()
		if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (topic, key, payload) SELECT 'bench', `+keyExpr+`, '{"a":1}' FROM generate_series(1, $1) AS g`, rows); err != nil {
			b.Fatal(err)
		}
		_, _ = d.Pool().Exec(ctx, `ANALYZE `+tbl)
		b.StartTimer()
		start := time.Now()
		done := make(chan int, loops)
		for range loops {
			go func() {
				n := 0
				for {
					got, err := rowsOf(d.OutboxClaim(ctx, dialects.ClaimParams{Limit: batch, Lease: time.Minute, Token: uuid.New()}))
					if err != nil {
						b.Error(err)
						break
					}
					if len(got) == 0 {
						break
					}
					out := make([]dialects.Outcome, len(got))
					for i, r := range got {
						out[i] = dialects.Outcome{Claim: r.Claim, Kind: dialects.OutcomeDelivered}
					}
					if _, err := d.OutboxComplete(ctx, out); err != nil {
						b.Error(err)
						break
					}
					n += len(got)
				}
				done <- n
			}()
		}
		for range loops {
			drained += <-done
		}
		elapsed += time.Since(start)
	}
	b.ReportMetric(float64(drained)/elapsed.Seconds(), "rows/s")
}

// BenchmarkProducerInsert measures what the producer-ordering trigger costs
// an application: rows per second inserted in statements of 100 rows, with
// distinct keys, one hot key, or no key, with the trigger on and off.
func BenchmarkProducerInsert(b *testing.B) {
	for _, keys := range []string{"none", "distinct", "one"} {
		for _, trigger := range []bool{true, false} {
			b.Run(fmt.Sprintf("keys=%s/trigger=%v", keys, trigger), func(b *testing.B) {
				d := open(b, 0)
				ctx := context.Background()
				tbl := pgx.Identifier{d.Names().Schema, "outbox"}.Sanitize()
				if !trigger {
					if _, err := d.Pool().Exec(ctx, `ALTER TABLE `+tbl+` DISABLE TRIGGER outbox_order_key`); err != nil {
						b.Fatal(err)
					}
				}
				const total, per = 20000, 100
				start := time.Now()
				n := 0
				for range b.N {
					for i := 0; i < total; i += per {
						rows := make([]dialects.NewRow, per)
						for j := range rows {
							rows[j] = testkit.Row("t", testkit.Payload(`{"a":1}`))
							switch keys {
							case "distinct":
								k := fmt.Sprintf("k%d-%d", n, i+j)
								rows[j].Key = &k
							case "one":
								k := "hot"
								rows[j].Key = &k
							}
						}
						if err := d.OutboxInsert(ctx, rows); err != nil {
							b.Fatal(err)
						}
					}
					n++
				}
				b.ReportMetric(float64(total*b.N)/time.Since(start).Seconds(), "rows/s")
			})
		}
	}
}
