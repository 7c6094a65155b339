package actors

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: time.Second, Multiplier: 2, Max: 10 * time.Second, Jitter: 0.2}
	// rnd = 0.5 is the middle of the jitter: the plain formula.
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 50: 10 * time.Second} {
		if got := b.Delay(n, 0.5); got != want {
			t.Errorf("retry %d: %v, want %v", n, got, want)
		}
	}
	if lo, hi := b.Delay(2, 0), b.Delay(2, 1); lo != 1600*time.Millisecond || hi != 2400*time.Millisecond {
		t.Errorf("jitter bounds: %v..%v", lo, hi)
	}
	if got := b.Delay(5, 1); got != 10*time.Second {
		t.Errorf("jitter must not pass the maximum: %v", got)
	}
}

func TestCutUTF8(t *testing.T) {
	s := strings.Repeat("é", 10) // 2 bytes each
	for n := 0; n <= 21; n++ {
		c := CutUTF8(s, n)
		if (n > 0 && len(c) > n) || !utf8.ValidString(c) {
			t.Errorf("cut to %d: %d bytes, valid=%v", n, len(c), utf8.ValidString(c))
		}
	}
	if CutUTF8("abc", 2) != "ab" {
		t.Error("plain ASCII")
	}
}
