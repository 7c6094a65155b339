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

// Match reports whether topic matches the pattern. It does not allocate.
func (p *Pattern) Match(topic string) bool {
	if p.literal {
		return topic == p.src
	}
	return matchSegs(p.segs, topic)
}

// matchSegs matches pattern segments against the rest of a topic, walking
// the topic by offsets rather than splitting it.
func matchSegs(segs []string, topic string) bool {
	for i, seg := range segs {
		if seg == "#" {
			rest := segs[i+1:]
			if len(rest) == 0 {
				return true
			}
			// "#" takes zero or more segments: try every split point.
			if matchSegs(rest, topic) {
				return true
			}
			for j := 0; j < len(topic); j++ {
				if topic[j] == '.' && matchSegs(rest, topic[j+1:]) {
					return true
				}
			}
			return false
		}
		if topic == "" && (i > 0 || seg != "") {
			return false
		}
		next := strings.IndexByte(topic, '.')
		var head string
		if next < 0 {
			head, topic = topic, ""
		} else {
			head, topic = topic[:next], topic[next+1:]
		}
		if seg != "*" && seg != head {
			return false
		}
		if next < 0 && i < len(segs)-1 {
			// The topic ended; only trailing "#" segments can still match.
			for _, s := range segs[i+1:] {
				if s != "#" {
					return false
				}
			}
			return true
		}
		if next >= 0 && i == len(segs)-1 {
			return false
		}
	}
	return topic == ""
}
