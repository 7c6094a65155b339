package postgres

import (
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/queuebox/queuebox/dialects"
)

// The floors (dialects.FloorGroups values) and, while a long transaction
// holds the horizon back, up to a thousand keys' positions go with every
// claim. Encoded as binary arrays for each claim, they cost the relay about
// 200 µs of CPU and a few thousand allocations a claim, and made a claim's
// round trip 0.6 ms longer (measured on an idle 2-core machine: 90 µs
// without them, 720 to 840 µs with them). They change rarely: the floors
// when they are read again, the positions at most every 100 ms (the claimer
// hands out the same slices in between). So each is written once in
// PostgreSQL's text form for arrays and sent as text: pgx sends a string
// parameter as it is, and the server reads it as the statement's bigint[]
// or text[] (the round trip with all three: 465 µs).

// boundsText caches the text form of the bounds' arrays, for the slices it
// was made from (the same backing array and length); a claim with other
// slices makes it again. Entries are immutable; concurrent claims share
// them through atomic pointers.
type boundsText struct {
	floors    atomic.Pointer[floorsText]
	positions atomic.Pointer[positionsText]
}

type floorsText struct {
	from []int64
	text string
}

type positionsText struct {
	from        []dialects.KeyPosition
	keys, after string
}

// sameSlice says whether a and b are the same slice: the same first
// element and length (the claimer never changes a slice it handed out).
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && len(a) > 0 && &a[0] == &b[0]
}

// floorsArg is the floors as a statement argument: NULL when there are
// none, their text form otherwise.
func (c *boundsText) floorsArg(fs []int64) any {
	if len(fs) == 0 {
		return []int64(nil)
	}
	if t := c.floors.Load(); t != nil && sameSlice(t.from, fs) {
		return t.text
	}
	t := &floorsText{from: fs, text: int64sText(fs)}
	c.floors.Store(t)
	return t.text
}

// positionsArgs is the positions as two statement arguments, the keys and
// their positions: NULL when there are none.
func (c *boundsText) positionsArgs(ps []dialects.KeyPosition) (keys, after any) {
	if len(ps) == 0 {
		return []string(nil), []int64(nil)
	}
	if t := c.positions.Load(); t != nil && sameSlice(t.from, ps) {
		return t.keys, t.after
	}
	var k, a strings.Builder
	k.Grow(len(ps) * 12)
	a.Grow(len(ps) * 12)
	k.WriteByte('{')
	a.WriteByte('{')
	for i, p := range ps {
		if i > 0 {
			k.WriteByte(',')
			a.WriteByte(',')
		}
		quoteArrayElement(&k, p.Key)
		a.WriteString(strconv.FormatInt(p.After, 10))
	}
	k.WriteByte('}')
	a.WriteByte('}')
	t := &positionsText{from: ps, keys: k.String(), after: a.String()}
	c.positions.Store(t)
	return t.keys, t.after
}

// int64sText writes xs as an array literal: {1,2,3}.
func int64sText(xs []int64) string {
	var b strings.Builder
	b.Grow(len(xs)*8 + 2)
	b.WriteByte('{')
	for i, x := range xs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(x, 10))
	}
	b.WriteByte('}')
	return b.String()
}

// quoteArrayElement writes s as a double-quoted element of an array
// literal: inside the quotes a backslash escapes the next character, so
// every backslash and double quote is escaped, and anything else (commas,
// braces, spaces, the word NULL) is taken as it is.
func quoteArrayElement(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
}
