package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testdb"
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
			reqs := recv.Requests()
			// From the first request to the last: what the limit paces
			// (how soon the first row goes is the wake-up's, not the limit's).
			first, took := reqs[0].At.Sub(began), reqs[len(reqs)-1].At.Sub(reqs[0].At)
			gap, at := longestGap(reqs)
			t.Logf("20 rows at 2 a second, one at a time: the first after %v, the rest in %v; longest gap %v at +%v",
				first.Round(time.Millisecond), took.Round(time.Millisecond), gap.Round(time.Millisecond), at.Round(time.Millisecond))
			if took > 10*time.Second {
				t.Errorf("20 rows took %v from the first to the last, want about 9 s (what the limit alone takes)", took.Round(time.Millisecond))
			}
			if first > 5*time.Second {
				t.Errorf("the first row went %v after the insert", first.Round(time.Millisecond))
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

// With the default circuit breaker, 14 rows with max_attempts 2 (three
// tries) survive a 15 s outage in which every request fails, although the
// circuit opens only after its 5 s window: a last try that fails while
// every request fails is not counted, nor is a probe's failure, and while
// the circuit is open the rows wait without a request. After the outage
// every row is delivered, none dead, none past its tries.
func TestABreakerKeepsRowsThroughAnOutage(t *testing.T) {
	t.Parallel()
	var until atomic.Int64 // the outage's end, unix nanoseconds
	recv := testrecv.New(t, func(*testrecv.Request) (int, string, map[string]string) {
		if time.Now().UnixNano() < until.Load() {
			return 503, "down for maintenance", nil
		}
		return 200, "", nil
	})
	dbURL := testdb.Database(t)
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
outbox: { pollIntervalMs: 100 }
destinations:
  hook: { type: http, url: "%s/hook" }
routes:
  - { topicPattern: "#", destination: hook }
admin: { listen: "127.0.0.1:0" }
`, dbURL, recv.URL))
	if _, stderr, code := run(t, "migrate", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	r := startRelay(t, "--config", cfg)
	page := r.pageURL(t)
	d := openPostgres(t, dbURL)
	ctx := context.Background()
	rows := testkit.Rows(7, "order.created", func(i int) []testkit.RowOption {
		return []testkit.RowOption{testkit.Key(fmt.Sprintf("cust-%d", i%2))}
	}, testkit.MaxAttempts(2))
	rows = append(rows, testkit.Rows(7, "order.viewed", nil, testkit.MaxAttempts(2))...)
	const outage = 15 * time.Second
	began := time.Now()
	until.Store(began.Add(outage).UnixNano())
	if err := d.OutboxInsert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	var opened time.Time
	testkit.Eventually(t, "the circuit to open", outage, func() error {
		if metric(t, page, `queuebox_destination_circuit_open{destination="hook"}`) != 1 {
			return fmt.Errorf("closed")
		}
		opened = time.Now()
		return nil
	})
	state := func() (dead, spent int) {
		t.Helper()
		if err := d.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'dead'), count(*) FILTER (WHERE attempt > max_attempts) FROM outbox`).Scan(&dead, &spent); err != nil {
			t.Fatal(err)
		}
		return dead, spent
	}
	if dead, _ := state(); dead != 0 {
		t.Fatalf("%d rows dead by the time the circuit opened (+%v)", dead, opened.Sub(began).Round(time.Millisecond))
	}
	recv.WaitDelivered(t, len(rows), 2*time.Minute)
	took := time.Since(began)
	testkit.Eventually(t, "every outcome written", 0, func() error {
		var delivered int
		if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM outbox WHERE state = 'delivered'`).Scan(&delivered); err != nil || delivered != len(rows) {
			return fmt.Errorf("%d delivered (%v)", delivered, err)
		}
		return nil
	})
	if dead, spent := state(); dead != 0 || spent != 0 {
		t.Errorf("%d rows dead, %d counted more attempts than max_attempts", dead, spent)
	}
	// While the circuit is open, only its probes go out: one per probe
	// interval (5 s). A second after it opened, requests in flight then
	// have ended.
	end := began.Add(outage)
	probes := 0
	for _, q := range recv.Requests() {
		if q.At.After(opened.Add(time.Second)) && q.At.Before(end) {
			probes++
		}
	}
	if most := int(end.Sub(opened)/(5*time.Second)) + 1; probes > most {
		t.Errorf("%d requests while the circuit was open (from +%v to +%v); want its probes only, at most %d",
			probes, opened.Sub(began).Round(time.Millisecond), outage, most)
	}
	recv.CheckOrder(t)
	t.Logf("14 rows through a %v outage: circuit open at +%v, all delivered at +%v, %d requests in all",
		outage, opened.Sub(began).Round(time.Millisecond), took.Round(time.Millisecond), len(recv.Requests()))
	r.stop(t)
}
