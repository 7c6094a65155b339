package routing

import (
	"fmt"
	"strings"
)

// Pattern is a compiled topic pattern.
type Pattern struct {
	src  string
	segs []string
	// literal is set when the pattern has no wildcard: matching is then a
	// string comparison.
	literal bool
}

// CompilePattern parses a dot-separated topic pattern. Segments are
// non-empty; "*" and "#" must stand alone in their segment.
func CompilePattern(s string) (*Pattern, error) {
	if s == "" {
		return nil, fmt.Errorf("the pattern is empty; use # to match every topic")
	}
	segs := strings.Split(s, ".")
	literal := true
	for i, seg := range segs {
		switch {
		case seg == "":
			return nil, fmt.Errorf("%q has an empty segment (segment %d): segments are separated by single dots", s, i+1)
		case seg == "*" || seg == "#":
			literal = false
		case strings.ContainsAny(seg, "*#"):
			return nil, fmt.Errorf("%q: %q mixes a wildcard with text; * and # must be a whole segment, as in order.* or order.#", s, seg)
		}
	}
	return &Pattern{src: s, segs: segs, literal: literal}, nil
}

// String returns the pattern's source.
func (p *Pattern) String() string { return p.src }

// Match reports whether topic matches the pattern. It does not allocate,
// and its time is linear in the topic's length times the pattern's
// segments, whatever the wildcards: a pattern is a small automaton whose
// states are "the first i segments matched", run over the topic's segments
// with every state at once (a backtracking matcher takes exponential time on
// patterns with several # segments).
func (p *Pattern) Match(topic string) bool {
	if p.literal {
		return topic == p.src
	}
	if len(p.segs) >= 64 {
		return p.matchLong(topic)
	}
	n := len(p.segs)
	states := p.closure(1) // state 0: nothing matched yet
	for rest, more := topic, topic != ""; more && states != 0; {
		var seg string
		seg, rest, more = strings.Cut(rest, ".")
		var next uint64
		for i := 0; i < n; i++ {
			if states&(1<<i) == 0 {
				continue
			}
			switch p.segs[i] {
			case "#":
				next |= 1 << i // # takes this segment and may take more
			case "*":
				next |= 1 << (i + 1)
			default:
				if p.segs[i] == seg {
					next |= 1 << (i + 1)
				}
			}
		}
		states = p.closure(next)
	}
	return states&(1<<n) != 0
}

// closure adds the states reachable without taking a segment: past a #,
// which may take none.
func (p *Pattern) closure(states uint64) uint64 {
	for i, seg := range p.segs {
		if seg == "#" && states&(1<<i) != 0 {
			states |= 1 << (i + 1)
		}
	}
	return states
}

// matchLong is Match for patterns of 64 segments or more (too many for the
// bit set): the same automaton with a slice of states.
func (p *Pattern) matchLong(topic string) bool {
	n := len(p.segs)
	states, next := make([]bool, n+1), make([]bool, n+1)
	closure := func(st []bool) {
		for i, seg := range p.segs {
			if seg == "#" && st[i] {
				st[i+1] = true
			}
		}
	}
	states[0] = true
	closure(states)
	for rest, more := topic, topic != ""; more; {
		var seg string
		seg, rest, more = strings.Cut(rest, ".")
		clear(next)
		any := false
		for i := 0; i < n; i++ {
			if !states[i] {
				continue
			}
			switch p.segs[i] {
			case "#":
				next[i], any = true, true
			case "*":
				next[i+1], any = true, true
			default:
				if p.segs[i] == seg {
					next[i+1], any = true, true
				}
			}
		}
		if !any {
			return false
		}
		closure(next)
		states, next = next, states
	}
	return states[n]
}
