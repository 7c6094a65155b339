package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects"
)

var _ dialects.WakeupSlotReader = (*Dialect)(nil)

// WakeupSlot reads where the wake-up slot of this database's relays stands
// (whichever relay holds it: every replica, and every outbox of the
// database, reads the same slot, which one stream shares); found is false
// while no relay holds one. Logical decoding reads all of the
// server's WAL, not only the outbox's, so under heavy writes elsewhere the
// slot runs behind and the server keeps the WAL it has not decoded yet.
func (d *Dialect) WakeupSlot(ctx context.Context) (s dialects.WakeupSlot, found bool, err error) {
	defer func() { err = mapError(err) }()
	var q wakeupStatements
	if err := dialects.Catalog(d.names, Quoting, wakeupsFS, "wakeups.sql", &q); err != nil {
		return s, false, err
	}
	err = d.pool.QueryRow(ctx, q.WakeupSlot, d.wakeRegistry().slotPrefix(), shareOf(d.names.Publication()).prefix).Scan(&s.Name, &s.RetainedBytes, &s.BehindBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, false, nil
	}
	return s, err == nil, err
}
