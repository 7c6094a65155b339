package postgres_test

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
)

// The floors and positions go to the server in PostgreSQL's text form for
// arrays, made once for the slices the claimer hands out. The server reads
// them back as exactly the arrays pgx would have sent in binary, whatever
// the keys hold (quotes, backslashes, commas, braces, spaces, the word
// NULL, an empty key, other scripts), and a claim with other slices gets
// their text, not the last one's.
func TestBoundsTextReadsBackAsTheArrays(t *testing.T) {
	t.Parallel()
	d := open(t, 0)
	keys := []string{"", "a", `"`, `\`, `\"`, `a,b`, `{x}`, "}", "NULL", "null", " lead", "trail ", "ünï 鍵",
		"tab\tnew\nline", `'quoted'`, "key-42"}
	slices.Sort(keys) // bytewise, as the claimer sorts them
	ps := make([]dialects.KeyPosition, len(keys))
	for i, k := range keys {
		ps[i] = dialects.KeyPosition{Key: k, After: int64(i*1000 - 3)}
	}
	floors := []int64{0, -1, 1, math.MaxInt64, math.MinInt64, 42}
	var cache postgres.BoundsText
	check := func(floors []int64, ps []dialects.KeyPosition) {
		t.Helper()
		f, k, a := postgres.BoundsArgs(&cache, floors, ps)
		wantKeys, wantAfter := make([]string, len(ps)), make([]int64, len(ps))
		for i, p := range ps {
			wantKeys[i], wantAfter[i] = p.Key, p.After
		}
		var gotFloors, gotAfter []int64
		var gotKeys []string
		if err := d.Pool().QueryRow(context.Background(), `SELECT $1::bigint[], $2::text[], $3::bigint[]`, f, k, a).
			Scan(&gotFloors, &gotKeys, &gotAfter); err != nil {
			t.Fatalf("the server did not read the text (%q, %q, %q): %v", f, k, a, err)
		}
		if !slices.Equal(gotFloors, floors) || !slices.Equal(gotKeys, wantKeys) || !slices.Equal(gotAfter, wantAfter) {
			t.Fatalf("read back floors %v, keys %q, positions %v; want %v, %q, %v", gotFloors, gotKeys, gotAfter, floors, wantKeys, wantAfter)
		}
	}
	check(floors, ps)
	check(floors, ps) // from the cache
	// Other slices of the same length: their own text.
	floors2 := slices.Clone(floors)
	floors2[5] = 43
	ps2 := slices.Clone(ps)
	ps2[3].After = 7
	check(floors2, ps2)
	// None: NULL, which the claims read as no bounds.
	f, k, a := postgres.BoundsArgs(&cache, nil, nil)
	var nulls []bool
	if err := d.Pool().QueryRow(context.Background(), `SELECT ARRAY[$1::bigint[] IS NULL, $2::text[] IS NULL, $3::bigint[] IS NULL]`, f, k, a).Scan(&nulls); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(nulls, []bool{true, true, true}) {
		t.Fatalf("no floors or positions: NULL %v, want all NULL", nulls)
	}
}
