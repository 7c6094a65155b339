package faults

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testkit"
)

// TestRollingRestart restarts two replicas one after the other under 500
// rows per second, as an orchestrator's rolling update does: SIGTERM to
// one, which drains and exits 0; a new replica in its place, ready (its
// /readyz answers 200) before the next one gets SIGTERM. Each restart is a
// phase of the ledger in which no duplicate is allowed (a drain finishes
// its deliveries and writes their outcomes, and hands the rest back), and
// the verdict fails on any row lost, any key out of order, any row not
// delivered at the end.
func TestRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs replicas of the binary under load")
	}
	s := settings{replicas: 2, keys: 200, rate: 500, producers: 4, minRows: 4000, leaseMs: 3000, timeoutMs: 1000,
		slow: 2500 * time.Millisecond, settleLimit: 90 * time.Second}
	w := newWorld(t, s)
	consumeCtx, stopConsuming := context.WithCancel(context.Background())
	consumed := w.consume(consumeCtx)
	defer func() { stopConsuming(); consumed() }()
	for i := range s.replicas {
		w.ready(w.start(fmt.Sprintf("r%d", i+1)))
	}
	w.prod.start()
	defer w.prod.halt()
	time.Sleep(2 * time.Second) // load before the first restart: time must pass

	loadStart, rowsBefore := time.Now(), w.prod.count()
	for i := range s.replicas {
		old := fmt.Sprintf("r%d", i+1)
		rec := &faultRecord{Name: fmt.Sprintf("rolling restart: SIGTERM to %s, then %s in its place", old, w.nextName()), Start: time.Now()}
		w.faults = append(w.faults, rec)
		r := w.replica(old)
		w.waitInFlight(old)
		r.signal(t, syscall.SIGTERM)
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not exit within 30 s of SIGTERM:\n%s", old, tail(r.logs.String(), 3000))
		}
		if r.err != nil || !strings.Contains(r.logs.String(), `"msg":"stopped"`) {
			t.Errorf("%s after SIGTERM: exit %v; its log:\n%s", old, r.err, tail(r.logs.String(), 3000))
		}
		w.ready(w.start(w.nextName()))
		rec.Healed = time.Now()
		rec.Recovered = w.settle(w.dbNow(), rec.Healed, rec.Name)
		t.Logf("%-60s recovered in %s", rec.Name, rec.Recovered.Round(10*time.Millisecond))
		time.Sleep(time.Second) // load between the restarts
	}
	rate := float64(w.prod.count()-rowsBefore) / time.Since(loadStart).Seconds()
	t.Logf("%.0f rows/s committed while the replicas restarted", rate)
	// The producers tick at 500 rows/s; a machine too busy to commit them
	// would test less than it says.
	if rate < 0.6*s.rate {
		t.Errorf("the producers committed %.0f rows/s during the restarts, below %.0f: the machine is too busy for this test to mean 500 rows/s", rate, 0.6*s.rate)
	}
	w.conclude(stopConsuming, consumed, "")
}

// ready waits until the replica's /readyz answers 200, as an orchestrator
// waits before it stops the next replica.
func (w *world) ready(r *replica) {
	w.t.Helper()
	if err := testkit.Poll(time.Minute, func() error {
		res, err := http.Get("http://" + r.addr + "/readyz")
		if err != nil {
			return err
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(res.Body)
			return fmt.Errorf("%d %s", res.StatusCode, b)
		}
		return nil
	}); err != nil {
		w.t.Fatalf("%s never became ready (%v):\n%s", r.name, err, tail(r.logs.String(), 3000))
	}
}
