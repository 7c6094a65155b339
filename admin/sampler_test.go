package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testkit"
)

// fakeCounts is a database for the sampler's schedule: it counts the count
// attempts, can hold a count until released, and can fail. (The counts
// themselves against PostgreSQL are tested in server_test.go.)
type fakeCounts struct {
	dialects.Dialect // nil: only what the sampler calls is implemented

	counts    atomic.Int64
	fail      atomic.Bool
	inboxFail atomic.Bool   // only the inbox's count fails
	inboxAge  atomic.Int64  // the oldest received inbox row's wait, ns
	hold      atomic.Bool   // a count started while set waits for release
	release   chan struct{} // closed (or sent on) to end a held count
}

var errDown = errors.New("connection refused")

func (f *fakeCounts) OutboxPending(context.Context) (dialects.PendingSummary, error) {
	if f.fail.Load() {
		return dialects.PendingSummary{}, errDown
	}
	return dialects.PendingSummary{}, nil
}

func (f *fakeCounts) OutboxWriters(context.Context) ([]dialects.Writer, error) { return nil, nil }

func (f *fakeCounts) OutboxHorizon(context.Context) (dialects.Horizon, error) {
	return dialects.Horizon{DeadVersions: -1}, nil
}

func (f *fakeCounts) OutboxCountByTopic(ctx context.Context) ([]dialects.TopicCount, error) {
	f.counts.Add(1)
	if f.hold.Load() {
		select {
		case <-f.release:
		case <-ctx.Done():
		}
	}
	if f.fail.Load() {
		return nil, errDown
	}
	return []dialects.TopicCount{{Topic: "t", State: dialects.Pending, Rows: 1}}, nil
}

func (f *fakeCounts) OutboxDeadGroups(context.Context, int) ([]dialects.DeadGroup, error) {
	return nil, nil
}

func (f *fakeCounts) OutboxBlockedKeys(context.Context, dialects.BlockedKeysParams) ([]dialects.BlockedKey, error) {
	return nil, nil
}

func (f *fakeCounts) InboxOldestReceived(context.Context) (time.Duration, error) {
	return time.Duration(f.inboxAge.Load()), nil
}

func (f *fakeCounts) InboxStats(context.Context) (dialects.InboxStats, error) {
	if f.inboxFail.Load() {
		return dialects.InboxStats{}, errDown
	}
	return dialects.InboxStats{Rows: map[dialects.InboxState]int64{}, OldestReceived: time.Duration(f.inboxAge.Load())}, nil
}

func (f *fakeCounts) CopyCounts(context.Context) ([]dialects.DestinationCount, error) {
	return nil, nil
}

func (f *fakeCounts) CopyList(context.Context, dialects.CopyListParams) ([]dialects.CopyListed, error) {
	return nil, nil
}

// runSampler runs a sampler over f until the test ends.
func runSampler(t *testing.T, f *fakeCounts, minInterval time.Duration) *Sampler {
	t.Helper()
	s := newSampler(f, NewMetrics(nil), nil, slog.New(slog.DiscardHandler), minInterval)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// Reads that arrive while a count runs are served by that count: the admin
// page fetches three endpoints at once, and each used to start a count of
// its own right after the running one.
func TestReadsDuringACountAreServedByIt(t *testing.T) {
	t.Parallel()
	f := &fakeCounts{release: make(chan struct{})}
	s := runSampler(t, f, 20*time.Millisecond)
	ctx := context.Background()
	s.Demand(ctx) // the first count
	if n := f.counts.Load(); n != 1 {
		t.Fatalf("%d counts after the first read, want 1", n)
	}
	time.Sleep(60 * time.Millisecond) // time must pass: the count is older than its interval
	f.hold.Store(true)
	s.Demand(ctx) // starts the second count, which is held
	testkit.Eventually(t, "a count started by a read of a stale count", 5*time.Second, testkit.True(func() bool { return f.counts.Load() >= 2 }))
	s.Demand(ctx) // two more reads while it runs (it runs until released)
	s.Demand(ctx)
	f.hold.Store(false)
	close(f.release)
	// A sleep, to show that no count follows for the reads it served.
	time.Sleep(300 * time.Millisecond)
	if n := f.counts.Load(); n != 2 {
		t.Fatalf("%d counts, want 2: the reads during the second count started another", n)
	}
}

// While counting fails (the database is down), reads start at most one
// attempt per minimum interval, not one each; the first read does not wait
// for a count that cannot succeed; and the attempts stop with the reads.
func TestFailingCountsBackOff(t *testing.T) {
	t.Parallel()
	const minInterval = 200 * time.Millisecond
	f := &fakeCounts{}
	f.fail.Store(true)
	s := runSampler(t, f, minInterval)
	ctx := context.Background()
	start := time.Now()
	s.Demand(ctx)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the first read waited %v for a count that failed", took)
	}
	var wg sync.WaitGroup
	for range 20 { // 20 reads in a second, as the page and a scrape make: the pace is the test's subject
		time.Sleep(50 * time.Millisecond)
		wg.Add(1)
		go func() { defer wg.Done(); s.Demand(ctx) }()
	}
	wg.Wait()
	elapsed := time.Since(start)
	n := f.counts.Load()
	if most := 2 + int64(elapsed/minInterval); n > most {
		t.Fatalf("%d count attempts in %v of reads with a minimum interval of %v; want at most %d", n, elapsed, minInterval, most)
	}
	if n < 3 {
		t.Fatalf("%d count attempts in %v of reads; it should keep trying while read", n, elapsed)
	}
	if s.Snapshot().Err == "" {
		t.Error("the snapshot does not say that counting fails")
	}
	time.Sleep(3 * minInterval) // to show that no attempt follows
	if m := f.counts.Load(); m > n+1 {
		t.Fatalf("%d count attempts after the reads stopped (%d before)", m, n)
	}
}

// The schedule does not follow the wall clock: after the clock steps back
// an hour, a read of a stale count still starts the next one at once.
func TestAWallClockStepBackDoesNotStopCounting(t *testing.T) {
	t.Parallel()
	f := &fakeCounts{}
	s := newSampler(f, NewMetrics(nil), nil, slog.New(slog.DiscardHandler), 20*time.Millisecond)
	var back atomic.Int64 // how far the wall clock has stepped back
	s.wall = func() time.Time { return time.Now().Add(-time.Duration(back.Load())).Round(0) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	s.Demand(ctx)
	if n := f.counts.Load(); n != 1 {
		t.Fatalf("%d counts after the first read, want 1", n)
	}
	back.Store(int64(time.Hour))
	time.Sleep(60 * time.Millisecond) // time must pass: the count is older than its interval
	s.Demand(ctx)
	// Within 500 ms, under FastInterval: the read woke it.
	testkit.Eventually(t, "a count after the wall clock stepped back", 500*time.Millisecond, testkit.True(func() bool { return f.counts.Load() >= 2 }))
	testkit.Eventually(t, "the snapshot's time to follow the wall clock", 5*time.Second, func() error {
		if at := s.Snapshot().CountedAt; time.Since(at) < 59*time.Minute {
			return fmt.Errorf("counted at %v", at)
		}
		return nil
	})
}

// A count of the inbox that fails does not hold back the outbox's figures:
// they are published, and the snapshot says what failed.
func TestAFailingInboxCountKeepsTheOutboxFigures(t *testing.T) {
	t.Parallel()
	f := &fakeCounts{}
	f.inboxFail.Store(true)
	s := runSampler(t, f, time.Second) // no cheap read clears the error before the test looks
	s.Demand(context.Background())
	snap := s.Snapshot()
	if snap.Rows[string(dialects.Pending)] != 1 {
		t.Errorf("the outbox's count was not published: %v", snap.Rows)
	}
	if !strings.Contains(snap.Err, "counting the inbox") {
		t.Errorf("the snapshot does not say the inbox's count failed: %q", snap.Err)
	}
}

// The oldest received inbox row's wait is one of the cheap reads: it moves
// between counts, on the page and in its gauge.
func TestTheInboxAgeMovesBetweenCounts(t *testing.T) {
	t.Parallel()
	f := &fakeCounts{}
	f.inboxAge.Store(int64(time.Second))
	s := runSampler(t, f, 100*time.Millisecond) // cheap reads every 100 ms; counts only when read
	s.Demand(context.Background())
	counts := f.counts.Load()
	f.inboxAge.Store(int64(9 * time.Second))
	testkit.Eventually(t, "the gauge to show 9 s without a count", 5*time.Second, func() error {
		if v := testutil.ToFloat64(s.m.inboxAge); v != 9 {
			return fmt.Errorf("it shows %v s", v)
		}
		return nil
	})
	if in := s.Snapshot().Inbox; in == nil || in.OldestReceived != 9*time.Second {
		t.Errorf("the snapshot's inbox: %+v, want an oldest received wait of 9 s", in)
	}
	if n := f.counts.Load(); n != counts {
		t.Errorf("%d counts ran meanwhile; the age should come from the cheap reads alone", n-counts)
	}
}
