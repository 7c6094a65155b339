package dialects_test

import (
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// An epoch settles only when a later probe's xmin reaches the next
// transaction id read with it; the watermark never moves back.
func TestWatermarkSettlesEpochsInOrder(t *testing.T) {
	var w dialects.Watermark
	now := time.Now()
	// Transaction 100 is running (xmin 100); the sequence stands at 10.
	w.Observe(dialects.Probe{Last: 10, Xmin: 100, Next: 105}, now)
	if w.Settled() != 0 {
		t.Fatalf("settled %d while transactions below 105 may run", w.Settled())
	}
	if _, waiting := w.Waiting(); !waiting {
		t.Fatal("an open epoch is not reported as waiting")
	}
	w.Observe(dialects.Probe{Last: 20, Xmin: 104, Next: 110}, now)
	if w.Settled() != 0 {
		t.Fatalf("settled %d although transaction 104 may have drawn a value up to 10", w.Settled())
	}
	w.Observe(dialects.Probe{Last: 25, Xmin: 105, Next: 112}, now)
	if w.Settled() != 10 {
		t.Fatalf("settled %d, want 10: every transaction below 105 has ended", w.Settled())
	}
	g := w.Gate()
	if g.Settled != 10 || len(g.Open) != 2 || g.Open[0] != (dialects.Epoch{Last: 20, Next: 110}) {
		t.Fatalf("gate %+v", g)
	}
	// No transaction running: the probe settles its own epoch.
	w.Observe(dialects.Probe{Last: 30, Xmin: 120, Next: 120}, now)
	if w.Settled() != 30 || len(w.Gate().Open) != 0 {
		t.Fatalf("settled %d, open %v; want everything up to 30", w.Settled(), w.Gate().Open)
	}
	if _, waiting := w.Waiting(); waiting {
		t.Fatal("waiting with nothing open")
	}
	w.Observe(dialects.Probe{Last: 30, Xmin: 90, Next: 121}, now)
	if w.Settled() != 30 {
		t.Fatal("the watermark moved back")
	}
	if w.LastSeen() != 30 {
		t.Fatalf("last seen %d", w.LastSeen())
	}
}

// While a long transaction holds xmin back, the epochs stay few, and
// settling below a writer's id (no writer is older) settles what it can.
func TestWatermarkStaysSmallWhileHeldBack(t *testing.T) {
	var w dialects.Watermark
	now := time.Now()
	for i := range int64(100) {
		w.Observe(dialects.Probe{Last: 10 + i, Xmin: 50, Next: 100 + i}, now)
	}
	if n := len(w.Gate().Open); n > 8 {
		t.Fatalf("%d open epochs", n)
	}
	w.SettleBelow(103, now)
	if s := w.Settled(); s != 13 {
		t.Fatalf("settled %d below 103, want 13 (the epochs whose next id is at most 103)", s)
	}
	w.SettleBelow(1000, now)
	if s := w.Settled(); s != 109 {
		t.Fatalf("settled %d, want everything (109)", s)
	}
}

// Probes may be observed out of the order they ran in. An older probe's
// xmin still settles, but what it said of the writers holds only for the
// values it had seen: its "no writer" must not settle an epoch whose Last
// a later probe read after a transaction drew it. Nor do its writers
// replace those of the later probe in the claims' gate.
func TestWatermarkTakesAnOlderProbesWritersOnlyForWhatItSaw(t *testing.T) {
	var w dialects.Watermark
	now := time.Now()
	// The later probe: a transaction (id 150, still open) drew 10 and a
	// committed one 11; the sequence stands at 11.
	w.Observe(dialects.Probe{Last: 11, Xmin: 100, Next: 160, Writer: 150, Writers: []int64{150}}, now)
	if w.Settled() != 0 {
		t.Fatalf("settled %d while writer 150 is open", w.Settled())
	}
	// The older probe, observed last: the sequence stood at 9, no writer.
	w.Observe(dialects.Probe{Last: 9, Xmin: 100, Next: 140, Writer: dialects.NoWriters, Writers: []int64{}}, now)
	if w.Settled() > 9 {
		t.Fatalf("settled %d on an older probe that had not seen 10 and 11", w.Settled())
	}
	g := w.Gate()
	if len(g.Writers) != 1 || g.Writers[0] != 150 {
		t.Fatalf("gate writers %v, want the later probe's [150]", g.Writers)
	}
	// An older probe's xmin settles whatever the order.
	w.Observe(dialects.Probe{Last: 9, Xmin: 160, Next: 161, Writer: dialects.NoWriters, Writers: []int64{}}, now)
	if w.Settled() != 11 {
		t.Fatalf("settled %d, want 11: no transaction below 160 runs", w.Settled())
	}
}

// A probe that could not tell a writer's id (Writers nil) gives the claims
// no writers to settle by.
func TestAGateWithoutKnownWritersHasNone(t *testing.T) {
	var w dialects.Watermark
	w.Observe(dialects.Probe{Last: 5, Xmin: 100, Next: 120, Writers: []int64{110}, Writer: 110}, time.Now())
	if g := w.Gate(); len(g.Writers) != 1 {
		t.Fatalf("gate %+v, want the writer 110", g)
	}
	w.Observe(dialects.Probe{Last: 6, Xmin: 100, Next: 125}, time.Now())
	if g := w.Gate(); g.Writers != nil {
		t.Fatalf("gate %+v after a probe that did not know its writers, want none", g)
	}
}

// Waiting tells when the oldest epoch still open was opened, also after
// the epochs before it settled: the walks look back to it.
func TestWaitingIsSinceTheOldestEpochStillOpen(t *testing.T) {
	var w dialects.Watermark
	t0 := time.Unix(1000, 0)
	// Two epochs open while a writer (id 100) holds both.
	w.Observe(dialects.Probe{Last: 10, Xmin: 100, Next: 105, Writer: 100, Writers: []int64{100}}, t0)
	w.Observe(dialects.Probe{Last: 20, Xmin: 100, Next: 110, Writer: 100, Writers: []int64{100, 106}}, t0.Add(time.Second))
	if since, waiting := w.Waiting(); !waiting || !since.Equal(t0) {
		t.Fatalf("two epochs open: waiting since %v (%v), want %v", since, waiting, t0)
	}
	// Writer 100 ended; 106 still runs: the first epoch settles, the second
	// (opened a second later) still waits.
	w.Observe(dialects.Probe{Last: 20, Xmin: 100, Next: 111, Writer: 106, Writers: []int64{106}}, t0.Add(3*time.Second))
	if w.Settled() != 10 {
		t.Fatalf("settled %d, want 10", w.Settled())
	}
	if since, waiting := w.Waiting(); !waiting || !since.Equal(t0.Add(time.Second)) {
		t.Fatalf("after the first epoch settled: waiting since %v (%v), want %v (when the second opened)", since, waiting, t0.Add(time.Second))
	}
	w.Observe(dialects.Probe{Last: 20, Xmin: 111, Next: 112, Writer: dialects.NoWriters, Writers: []int64{}}, t0.Add(4*time.Second))
	if _, waiting := w.Waiting(); waiting || w.Settled() != 20 {
		t.Fatalf("every writer ended: waiting %v, settled %d, want none and 20", waiting, w.Settled())
	}
}
