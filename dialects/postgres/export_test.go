package postgres

import "github.com/queuebox/queuebox/dialects"

// BoundsArgs are the arguments a claim sends for floors and positions.
func BoundsArgs(c *BoundsText, floors []int64, ps []dialects.KeyPosition) (f, keys, after any) {
	keys, after = (*boundsText)(c).positionsArgs(ps)
	return (*boundsText)(c).floorsArg(floors), keys, after
}

// BoundsText is the dialect's cache of the bounds' text.
type BoundsText boundsText
