package gcfloor

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testkit"
)

func TestPercentFor(t *testing.T) {
	for _, c := range []struct {
		live, headroom uint64
		base, want     int
	}{
		{8 << 20, 32 << 20, 100, 400},   // a small heap grows by the headroom
		{10 << 20, 32 << 20, 100, 320},  // rounded up
		{64 << 20, 32 << 20, 100, 100},  // a large heap keeps GOGC's rule
		{1 << 20, 32 << 20, 100, 1000},  // capped
		{0, 32 << 20, 100, 1000},        // nothing live yet
		{8 << 20, 32 << 20, 600, 600},   // never below the base
		{8 << 20, 32 << 20, -1, -1},     // collection turned off stays off
		{200 << 20, 32 << 20, 100, 100}, // the extra memory is bounded
	} {
		if got := percentFor(c.live, c.headroom, c.base); got != c.want {
			t.Errorf("percentFor(%d MiB live, %d MiB headroom, base %d) = %d, want %d",
				c.live>>20, c.headroom>>20, c.base, got, c.want)
		}
	}
}

func gogc() int64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// After collections on the test's small heap the percent is raised, it
// follows the live heap when that grows, and stop puts the base back.
func TestStartFollowsTheLiveHeap(t *testing.T) {
	// The runtime read GOGC when the test binary started; Setenv only hides
	// it from Start.
	t.Setenv("GOGC", "")
	base := gogc()
	if base < 0 || base > 300 {
		t.Skipf("the test binary runs with GOGC=%d, a percent this test cannot tell from its own", base)
	}
	stop := Start(64 << 20)
	defer stop()
	waitFor := func(what string, ok func(int64) bool) {
		t.Helper()
		// Each look collects: the floor follows what a cycle left live.
		testkit.Eventually(t, what, 10*time.Second, func() error {
			if p := gogc(); !ok(p) {
				runtime.GC()
				return fmt.Errorf("the percent is %d", p)
			}
			return nil
		})
	}
	waitFor("a small live heap", func(p int64) bool { return p > 300 })
	// 256 MiB live, four times the headroom: GOGC's own rule gives more.
	big := make([][]byte, 256)
	for i := range big {
		big[i] = make([]byte, 1<<20)
	}
	waitFor("a large live heap", func(p int64) bool { return p == base })
	runtime.KeepAlive(big)
	stop()
	if p := gogc(); p != base {
		t.Fatalf("after stop the percent is %d, want %d", p, base)
	}
}

// An operator's GOGC is left alone.
func TestStartLeavesGOGCAlone(t *testing.T) {
	base := gogc()
	t.Setenv("GOGC", "100")
	stop := Start(64 << 20)
	defer stop()
	// Cycles, and time for the floor to react to them: sleeps, since this
	// shows that nothing happens.
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if p := gogc(); p != base {
		t.Fatalf("with GOGC set the percent became %d, was %d", p, base)
	}
}
