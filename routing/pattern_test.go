package routing

import "testing"

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
