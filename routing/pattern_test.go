package routing

import (
	"strings"
	"testing"
	"time"
)

func TestPatternMatch(t *testing.T) {
	cases := []struct {
		pattern, topic string
		want           bool
	}{
		{"order.created", "order.created", true},
		{"order.created", "order.paid", false},
		{"order.*", "order.created", true},
		{"order.*", "order.line.added", false},
		{"order.*", "order", false},
		{"order.#", "order", true},
		{"order.#", "order.created", true},
		{"order.#", "order.line.added", true},
		{"order.#", "orders.created", false},
		{"#", "anything.at.all", true},
		{"#", "x", true},
		{"*.created", "order.created", true},
		{"*.created", "order.line.created", false},
		{"#.created", "order.line.created", true},
		{"#.created", "created", true},
		{"#.created", "order.paid", false},
		{"order.#.added", "order.added", true},
		{"order.#.added", "order.line.item.added", true},
		{"order.#.added", "order.line.item.removed", false},
		{"a.*.c", "a.b.c", true},
		{"a.*.c", "a..c", true},
		{"a.#", "a.", true},
		{"*", "x", true},
		{"*", "x.y", false},
	}
	for _, c := range cases {
		p, err := CompilePattern(c.pattern)
		if err != nil {
			t.Fatalf("%s: %v", c.pattern, err)
		}
		if got := p.Match(c.topic); got != c.want {
			t.Errorf("%q matches %q = %v, want %v", c.pattern, c.topic, got, c.want)
		}
	}
}

func TestPatternErrors(t *testing.T) {
	for _, bad := range []string{"", "order..created", "order.*x", "or#der", ".order", "order."} {
		if _, err := CompilePattern(bad); err == nil {
			t.Errorf("%q compiled", bad)
		}
	}
}

func TestPatternMatchDoesNotAllocate(t *testing.T) {
	p, _ := CompilePattern("order.#.added")
	allocs := testing.AllocsPerRun(100, func() { p.Match("order.line.item.added") })
	if allocs != 0 {
		t.Fatalf("Match allocated %v times", allocs)
	}
}

func BenchmarkPatternMatch(b *testing.B) {
	p, _ := CompilePattern("order.#.added")
	for b.Loop() {
		p.Match("order.line.item.added")
	}
}

// Patterns with many # segments match in linear time: a backtracking
// matcher took exponential time on this one (found by fuzzing).
func TestManyHashesMatchQuickly(t *testing.T) {
	p, err := CompilePattern("#.#.#.#.#.#.#.#.#.#.#.#.#.#.#.#.x")
	if err != nil {
		t.Fatal(err)
	}
	topic := strings.Repeat("a.", 200) + "y"
	done := make(chan bool, 1)
	go func() { done <- p.Match(topic) }()
	select {
	case got := <-done:
		if got {
			t.Fatal("matched a topic that does not end in x")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("matching did not finish in 10 seconds")
	}
	if !p.Match(strings.Repeat("a.", 200) + "x") {
		t.Fatal("did not match a topic that ends in x")
	}
}

// Patterns of 64 segments or more take the slower path with the same result.
func TestLongPatterns(t *testing.T) {
	segs := make([]string, 70)
	for i := range segs {
		segs[i] = "*"
	}
	segs[10] = "#"
	p, err := CompilePattern(strings.Join(segs, "."))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Match(strings.Repeat("a.", 68) + "a") { // 69 segments: # takes none
		t.Fatal("69 segments")
	}
	if !p.Match(strings.Repeat("a.", 99) + "a") {
		t.Fatal("100 segments")
	}
	if p.Match(strings.Repeat("a.", 67) + "a") {
		t.Fatal("68 segments matched 69 stars")
	}
}
