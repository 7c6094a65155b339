package backoff

import (
	"testing"
	"time"
)

func TestCappedDoublesToItsCapAndStartsOverOnReset(t *testing.T) {
	b := Capped{First: 100 * time.Millisecond, Max: time.Second}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := b.Next(); got != w*time.Millisecond {
			t.Fatalf("delay %d: got %s, want %s", i+1, got, w*time.Millisecond)
		}
	}
	if b.Failures() != len(want) {
		t.Fatalf("failures: got %d, want %d", b.Failures(), len(want))
	}
	b.Reset()
	if got := b.Next(); got != 100*time.Millisecond {
		t.Fatalf("after reset: got %s, want 100ms", got)
	}
}

func TestCappedNeverOverflowsAfterManyFailures(t *testing.T) {
	b := Capped{First: time.Millisecond, Max: 5 * time.Second}
	for range 10000 {
		if d := b.Next(); d <= 0 || d > 5*time.Second {
			t.Fatalf("delay out of bounds: %s", d)
		}
	}
}
