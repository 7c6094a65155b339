package actors_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testnats"
	"github.com/queuebox/queuebox/internal/testrecv"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
	httpsink "github.com/queuebox/queuebox/sinks/http"
	natssink "github.com/queuebox/queuebox/sinks/nats"
)

// attemptsTable is the qualified name of the harness's attempt history.
func (h *harness) attemptsTable() string {
	n := h.d.Names()
	return pgx.Identifier{n.Schema, n.Outbox + "_attempts"}.Sanitize()
}

func (h *harness) countAttempts() int {
	h.t.Helper()
	var n int
	if err := h.d.Pool().QueryRow(context.Background(), "SELECT count(*) FROM "+h.attemptsTable()).Scan(&n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

// With the history on, a row that failed once and was then delivered has
// both attempts: when and how long, the outcome, the status, the error
// redacted and cut like last_error, and an excerpt of each answer.
func TestAttemptsAreRecordedWithTheirOutcomes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const secret = "s3cr3t-in-the-answer"
	recv := testrecv.New(t, func(r *testrecv.Request) (int, string, map[string]string) {
		if r.Attempt == 0 {
			return 500, "boom " + secret + " " + strings.Repeat("é", 400), nil
		}
		return 200, `{"ok":true}`, nil
	})
	h.opts.Router = routing.NewRouter([]routing.Route{route("#", "hook")})
	h.opts.Destinations = map[string]actors.SinkFactory{"hook": httpDest(t, recv.URL+"/x", func(c *httpsink.Config) { c.MaxErrorBody = 5000 })}
	h.opts.MaxErrorBytes = 301
	h.opts.Redact = strings.NewReplacer(secret, "[REDACTED]").Replace
	h.opts.History = actors.History{Enabled: true}
	h.insert(testkit.Row("order.created", testkit.Key("k"), testkit.Payload(`{"n":1}`)))
	before := time.Now()
	h.start()
	h.waitState(dialects.Delivered, 1, time.Minute)
	after := time.Now()

	listed, _, err := dialects.List(context.Background(), h.d, dialects.Filter{States: dialects.States}, nil, 1)
	if err != nil || len(listed) != 1 {
		t.Fatalf("list: %v %v", listed, err)
	}
	row, found, err := h.d.OutboxRow(context.Background(), listed[0].ID, 10)
	if err != nil || !found {
		t.Fatalf("OutboxRow: %v %v", found, err)
	}
	if len(row.Attempts) != 2 {
		t.Fatalf("want 2 attempts, got %+v", row.Attempts)
	}
	fail, ok := row.Attempts[0], row.Attempts[1]
	if fail.Outcome != "retry" || fail.Try != 1 || fail.Status != "HTTP 500 Internal Server Error" || fail.Destination != "hook" {
		t.Errorf("the failed attempt: %+v", fail)
	}
	for what, s := range map[string]string{"error": fail.Error, "response": fail.Response} {
		if strings.Contains(s, secret) || !strings.Contains(s, "[REDACTED]") || len(s) > 301 || !strings.HasSuffix(s, "é") {
			t.Errorf("the failed attempt's %s is not redacted and cut on a character: %d bytes %q", what, len(s), s[:min(len(s), 60)])
		}
	}
	if !strings.HasPrefix(fail.Error, "HTTP 500") || !strings.HasPrefix(fail.Response, "boom ") {
		t.Errorf("error %q, response %q", fail.Error[:20], fail.Response[:20])
	}
	if ok.Outcome != "delivered" || ok.Try != 2 || ok.Status != "HTTP 200 OK" || ok.Error != "" || ok.Response != `{"ok":true}` {
		t.Errorf("the delivered attempt: %+v", ok)
	}
	for _, a := range row.Attempts {
		if a.At.Before(before.Add(-time.Millisecond)) || a.At.After(after) || a.Duration <= 0 || a.Duration > after.Sub(before) {
			t.Errorf("attempt %d: at %v, took %v; the test ran from %v to %v", a.Try, a.At, a.Duration, before, after)
		}
	}
	if !ok.At.After(fail.At) {
		t.Errorf("the retry (%v) is not after the failure (%v)", ok.At, fail.At)
	}
}

// A first try that succeeds writes no attempt: the row tells it, and
// OutboxRow shows it from the row. A row that failed first has every try
// recorded, its failures and the delivery after them. With allDeliveries
// every delivery is recorded, a first try too, with what it answered.
func TestAFirstTryThatSucceedsIsToldByTheRow(t *testing.T) {
	t.Parallel()
	for _, all := range []bool{false, true} {
		t.Run(fmt.Sprintf("allDeliveries=%v", all), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			recv := testrecv.New(t, failPolicy)
			h.routeAllTo(httpDest(t, recv.URL+"/x", nil))
			h.opts.History = actors.History{Enabled: true, AllDeliveries: all}
			// Keyed and unkeyed rows, half of them failing twice first.
			h.insert(rows(2, 2, 4, func(i int) int { return 2 * (i % 2) })...)
			h.start()
			h.waitState(dialects.Delivered, 8, time.Minute)

			want := 4 * 3 // the rows that failed twice: two failures and the delivery each
			if all {
				want += 4 // and the first tries that succeeded
			}
			if n := h.countAttempts(); n != want {
				t.Errorf("the history holds %d attempts, want %d", n, want)
			}
			listed, _, err := dialects.List(context.Background(), h.d, dialects.Filter{States: dialects.States}, nil, 10)
			if err != nil || len(listed) != 8 {
				t.Fatalf("list: %d rows, %v", len(listed), err)
			}
			for _, l := range listed {
				row, _, err := h.d.OutboxRow(context.Background(), l.ID, 10)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, a := range row.Attempts {
					switch {
					case a.FromRow:
						got = append(got, fmt.Sprintf("told %d", a.Try))
						if !a.At.Equal(row.UpdatedAt) || a.Status != "" || a.Duration != 0 {
							t.Errorf("row %s: the delivery told by the row %+v; want it at %v, its answer unknown", l.ID, a, row.UpdatedAt)
						}
					default:
						got = append(got, fmt.Sprintf("%s %d", a.Outcome, a.Try))
						if a.Status == "" || a.Destination != "dest" || a.Duration <= 0 {
							t.Errorf("row %s: attempt %+v without its answer", l.ID, a)
						}
					}
				}
				want := "retry 1, retry 2, delivered 3"
				if row.Attempt == 0 {
					want = "told 1"
					if all {
						want = "delivered 1"
					}
				}
				if strings.Join(got, ", ") != want {
					t.Errorf("row %s (attempt %d): %s; want %s", l.ID, row.Attempt, strings.Join(got, ", "), want)
				}
			}
		})
	}
}

// With the history off, nothing is written to its table.
func TestHistoryOffRecordsNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recv := testrecv.New(t, failPolicy)
	h.routeOrdersToHook(recv.URL+"/x", "#")
	h.insert(rows(3, 5, 5, func(i int) int { return i % 2 })...)
	h.start()
	h.waitState(dialects.Delivered, 20, time.Minute)
	if n := h.countAttempts(); n != 0 {
		t.Fatalf("the history is off, yet its table holds %d attempts", n)
	}
	st, _ := h.d.OutboxStats(context.Background())
	if st.Rows[dialects.Delivered] != 20 {
		t.Fatalf("rows %v", st.Rows)
	}
}

// The janitor deletes the attempts older than the history's retention,
// and only those. (The row it delivers at its first try records none.)
func TestJanitorDeletesOldAttempts(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recv := testrecv.New(t, nil)
	h.routeOrdersToHook(recv.URL+"/x", "#")
	h.opts.Retention = actors.Retention{Interval: 50 * time.Millisecond, BatchSize: 2}
	h.opts.History = actors.History{Enabled: true, Retention: time.Hour}
	_, err := h.d.Pool().Exec(context.Background(), fmt.Sprintf(`
		INSERT INTO %s (row_id, attempted_at, duration_us, try, outcome)
		SELECT gen_random_uuid(), now() - interval '2 hours' - g * interval '1 second', 10, 1, 'delivered' FROM generate_series(1, 5) g
		UNION ALL
		SELECT gen_random_uuid(), now() - interval '10 minutes', 10, 1, 'delivered'`, h.attemptsTable()))
	if err != nil {
		t.Fatal(err)
	}
	h.insert(testkit.Row("order.created"))
	h.start()
	h.waitState(dialects.Delivered, 1, time.Minute)
	testkit.Eventually(t, "the old attempts deleted", 30*time.Second, func() error {
		if n := h.countAttempts(); n != 1 {
			return fmt.Errorf("%d attempts left, want the recent one", n)
		}
		return nil
	})
	if !strings.Contains(h.logs.String(), "retention deleted attempts") {
		t.Error("the deletion was not logged")
	}
}

// A broker's answer reaches the history too: NATS JetStream's ack names the
// stream and the sequence that stored each row, keyed rows published in
// one batch included (first tries that succeeded: recorded with
// allDeliveries).
func TestABrokersAnswerIsRecorded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	srv := testnats.Start(t)
	prefix := testnats.Unique("hist")
	srv.NewStream(t, prefix, prefix+".>")
	subject, err := routing.ParseTemplate(prefix + ".{{ topic }}")
	if err != nil {
		t.Fatal(err)
	}
	h.routeAllTo(func() (sinks.Sink, error) {
		return natssink.New(natssink.Config{URL: srv.URL, Subject: subject, JetStream: true})
	})
	h.opts.History = actors.History{Enabled: true, AllDeliveries: true}
	h.insert(rows(2, 5, 2, func(int) int { return 0 })...)
	h.start()
	h.waitState(dialects.Delivered, 12, time.Minute)
	listed, _, err := dialects.List(context.Background(), h.d, dialects.Filter{States: dialects.States}, nil, 20)
	if err != nil || len(listed) != 12 {
		t.Fatalf("list: %d rows, %v", len(listed), err)
	}
	seqs := map[string]bool{}
	for _, l := range listed {
		row, _, err := h.d.OutboxRow(context.Background(), l.ID, 10)
		if err != nil || len(row.Attempts) != 1 {
			t.Fatalf("row %s: %+v %v", l.ID, row.Attempts, err)
		}
		a := row.Attempts[0]
		if !strings.HasPrefix(a.Status, "stream "+prefix+" seq ") || a.Outcome != "delivered" || a.Destination != "dest" || a.Try != 1 {
			t.Errorf("row %s: attempt %+v", l.ID, a)
		}
		seqs[a.Status] = true
	}
	if len(seqs) != 12 {
		t.Errorf("12 rows stored under %d sequences: %v", len(seqs), seqs)
	}
}

// With a circuit breaker and the history on, the tries the breaker does not
// count are recorded as such: the row's last try that fails while the
// destination is down, and the open circuit's probes, each marked as a
// probe. A try not counted leaves the row's attempt as it was, so the next
// try has the same number; the probe that succeeds is a probe, counted.
func TestUncountedTriesAndProbesAreRecorded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var failing atomic.Bool
	failing.Store(true)
	recv := testrecv.New(t, func(*testrecv.Request) (int, string, map[string]string) {
		if failing.Load() {
			return 503, "down", nil
		}
		return 200, "", nil
	})
	h.routeAllTo(httpDest(t, recv.URL, nil))
	h.opts.Policies = map[string]actors.DestinationPolicy{"dest": {CircuitBreaker: actors.CircuitBreaker{
		Window: 300 * time.Millisecond, MinAttempts: 2, ProbeInterval: 200 * time.Millisecond}}}
	h.opts.History = actors.History{Enabled: true}
	e := h.start()
	h.explain(e)
	// Two tries: the second is the last, and fails while every request
	// has failed.
	h.insert(testkit.Row("audit.logged", testkit.MaxAttempts(1)))
	// Probes go out one at a time: once the third has started, two have
	// failed (the third may fail too, or find the destination back).
	testkit.Eventually(t, "two failed probes", time.Minute, testkit.True(func() bool {
		return status(t, e, "dest").Probes >= 3 && len(recv.Requests()) >= 4
	}))
	failing.Store(false)
	h.waitState(dialects.Delivered, 1, time.Minute)

	listed, _, err := dialects.List(context.Background(), h.d, dialects.Filter{States: dialects.States}, nil, 1)
	if err != nil || len(listed) != 1 {
		t.Fatalf("list: %v %v", listed, err)
	}
	row, _, err := h.d.OutboxRow(context.Background(), listed[0].ID, 100)
	if err != nil {
		t.Fatal(err)
	}
	counted, uncounted, probes := 0, 0, 0
	for i, a := range row.Attempts {
		if a.Try != counted+1 {
			t.Errorf("attempt %d is try %d, after %d tries counted: %+v", i, a.Try, counted, a)
		}
		switch {
		case a.Outcome == "retry" && a.Uncounted:
			uncounted++
		case a.Outcome == "retry":
			counted++
		case a.Uncounted:
			t.Errorf("attempt %d: %s, yet not counted", i, a.Outcome)
		}
		if a.Probe {
			probes++
		}
	}
	last := row.Attempts[len(row.Attempts)-1]
	if counted != 1 || row.Attempt != 1 || uncounted < 3 || probes < 3 || last.Outcome != "delivered" || !last.Probe || last.Try != 2 {
		t.Fatalf("the row (attempt %d) has %d tries counted, %d not counted, %d probes; want 1, at least 3 (the last try, two probes), at least 3 (two failed, the delivery); the last %+v",
			row.Attempt, counted, uncounted, probes, last)
	}
	if first := row.Attempts[1]; !first.Uncounted || first.Probe {
		t.Errorf("the last try, failed while the destination was down: %+v; want not counted, no probe", first)
	}
}
