package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testrecv"
)

// longestGap is the longest time between two requests the receiver got,
// and when it began (since the first request).
func longestGap(reqs []testrecv.Request) (gap, at time.Duration) {
	for i := 1; i < len(reqs); i++ {
		if d := reqs[i].At.Sub(reqs[i-1].At); d > gap {
			gap, at = d, reqs[i-1].At.Sub(reqs[0].At)
		}
	}
	return gap, at
}

// perSecond counts the requests of each second since the first.
func perSecond(reqs []testrecv.Request) []int {
	var n []int
	for _, r := range reqs {
		s := int(r.At.Sub(reqs[0].At) / time.Second)
		for len(n) <= s {
			n = append(n, 0)
		}
		n[s]++
	}
	return n
}

// The documented example, rateLimit {perSecond: 50, burst: 50} with
// maxConcurrency 8, delivers 500 unkeyed rows at the rate: the burst, then
// 50 a second, about 9 s in all. Each request takes about a millisecond, so
// the concurrency never binds; the rows wait for their tokens in the
// relay, in turn, and none waits for a reschedule far behind its turn.
func TestRateLimitWithConcurrencyKeepsThePace(t *testing.T) {
	t.Parallel()
	recv, dbURL, cfg := destinationsSetup(t, ", rateLimit: { perSecond: 50, burst: 50 }, maxConcurrency: 8")
	r := startRelay(t, "--config", cfg)
	page := r.pageURL(t)
	d := openPostgres(t, dbURL)
	began := time.Now()
	if err := d.OutboxInsert(context.Background(), testkit.Rows(500, "order.viewed", nil)); err != nil {
		t.Fatal(err)
	}
	recv.WaitDelivered(t, 500, time.Minute)
	took := time.Since(began)
	reqs := recv.Requests()
	gap, at := longestGap(reqs)
	deferred := metric(t, page, `queuebox_destination_deferred_rows_total{destination="hook",reason="throttled"}`)
	t.Logf("500 rows at 50 a second with 8 at once: %v; rows per second %v; longest gap %v at +%v; %v rows deferred",
		took.Round(time.Millisecond), perSecond(reqs), gap.Round(time.Millisecond), at.Round(time.Millisecond), deferred)
	if took > 14*time.Second {
		t.Errorf("500 rows took %v, want at most 14 s (the limit alone needs 9 s)", took.Round(time.Millisecond))
	}
	if took < 8*time.Second {
		t.Errorf("500 rows took %v: faster than the limit lets them go", took.Round(time.Millisecond))
	}
	// At 50 a second a request is due every 20 ms: a stall of a second is
	// rows waiting for something other than their turn.
	if gap > time.Second {
		t.Errorf("no request for %v from +%v", gap.Round(time.Millisecond), at.Round(time.Millisecond))
	}
	// 500 rows are far less than half the relay's credit (outbox.maxInFlight,
	// 10,000): each waits for its token in the relay, none is sent back to
	// the database to come back later.
	if deferred != 0 {
		t.Errorf("%v rows were deferred for the limit; want every row waiting in the relay for its turn", deferred)
	}
	r.stop(t)
}

// Under rateLimit {perSecond: 2} and maxConcurrency 1, 20 unkeyed rows take
// what the limit alone takes (the burst of 2, then 18 at 2 a second: 9 s),
// and 20 keyed rows over 3 keys have no idle gap longer than the limit's
// interval (0.5 s): when one key's row has gone, another key's row is
// already waiting for the next token.
func TestSlowRateLimitHasNoIdleGaps(t *testing.T) {
	t.Parallel()
	for _, keyed := range []bool{false, true} {
		t.Run(map[bool]string{false: "unkeyed", true: "keyed"}[keyed], func(t *testing.T) {
			t.Parallel()
			recv, dbURL, cfg := destinationsSetup(t, ", rateLimit: { perSecond: 2 }, maxConcurrency: 1")
			r := startRelay(t, "--config", cfg)
			d := openPostgres(t, dbURL)
			rows := testkit.Rows(20, "order.created", func(i int) []testkit.RowOption {
				if keyed {
					return []testkit.RowOption{testkit.Key(fmt.Sprintf("cust-%d", i%3))}
				}
				return nil
			})
			began := time.Now()
			if err := d.OutboxInsert(context.Background(), rows); err != nil {
				t.Fatal(err)
			}
			recv.WaitDelivered(t, 20, time.Minute)
			took := time.Since(began)
			reqs := recv.Requests()
			gap, at := longestGap(reqs)
			t.Logf("20 rows at 2 a second, one at a time: %v; longest gap %v at +%v", took.Round(time.Millisecond), gap.Round(time.Millisecond), at.Round(time.Millisecond))
			if took > 11*time.Second {
				t.Errorf("20 rows took %v, want about 9 s (what the limit alone takes)", took.Round(time.Millisecond))
			}
			// The interval is 0.5 s. A loaded machine stretches one now and
			// then, never to twice as long; a row that waits for a
			// reschedule leaves the destination idle for seconds.
			if gap > time.Second {
				t.Errorf("no request for %v from +%v: the limit's interval is 0.5 s", gap.Round(time.Millisecond), at.Round(time.Millisecond))
			}
			if keyed {
				recv.CheckOrder(t)
			}
			if t.Failed() {
				for _, q := range reqs {
					t.Logf("+%v %s %d", q.At.Sub(reqs[0].At).Round(time.Millisecond), q.Key, q.Sequence)
				}
				t.Log(r.log())
			}
			r.stop(t)
		})
	}
}
