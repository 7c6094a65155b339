package dialects

import (
	"cmp"
	"slices"

	"github.com/google/uuid"
)

// SortClaimed orders claimed rows by key, then sequence, so that the rows of
// one key form one run in sequence order.
func SortClaimed(rows []Row) {
	slices.SortFunc(rows, func(a, b Row) int {
		if c := cmp.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return cmp.Compare(a.Sequence, b.Sequence)
	})
}

// Tokens returns the distinct claim tokens of claims.
func Tokens(claims []Claim) []uuid.UUID {
	seen := map[uuid.UUID]struct{}{}
	var out []uuid.UUID
	for _, c := range claims {
		if _, ok := seen[c.Token]; !ok {
			seen[c.Token] = struct{}{}
			out = append(out, c.Token)
		}
	}
	return out
}
