package postgres

import "github.com/queuebox/queuebox/dialects"

// BoundsArgs are the arguments a claim sends for floors and positions.
func BoundsArgs(c *BoundsText, floors []int64, ps []dialects.KeyPosition) (f, keys, after any) {
	keys, after = (*boundsText)(c).positionsArgs(ps)
	return (*boundsText)(c).floorsArg(floors), keys, after
}

// BoundsText is the dialect's cache of the bounds' text.
type BoundsText boundsText

// WakeupRegistry is a process's registry of wake-up hubs: a test makes
// registries of its own to act as separate processes.
type WakeupRegistry = wakeRegistry

// NewWakeupRegistry makes a registry whose hubs share a lock, a channel
// and a slot prefix named for group: hubs of other groups never meet them.
func NewWakeupRegistry(group string) *WakeupRegistry { return &wakeRegistry{group: group} }

// UseWakeupRegistry makes the listeners of d join r's hubs.
func (d *Dialect) UseWakeupRegistry(r *WakeupRegistry) { d.wake = r }

// SlotPrefix starts the names of the slots of r's hubs.
func (r *WakeupRegistry) SlotPrefix() string { return r.slotPrefix() }

// WakeupChannel is the channel on which the holder forwards to the
// followers of d's outbox.
func (d *Dialect) WakeupChannel() string { return forwardChannel(d.names.Publication()) }
