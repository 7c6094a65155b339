package postgres

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
)

// The copies table of fan-out routes (dialects.Copies).

func (d *Dialect) CopyClaim(ctx context.Context, p dialects.ClaimParams) (dialects.Claimed, error) {
	return dialects.Claimed{}, dialects.ErrNotSupported
}

func (d *Dialect) CopyRenewLeases(ctx context.Context, claims []dialects.Claim, lease time.Duration) ([]dialects.Claim, error) {
	return nil, dialects.ErrNotSupported
}

func (d *Dialect) CopyComplete(ctx context.Context, outcomes []dialects.Outcome) ([]dialects.Claim, error) {
	return nil, dialects.ErrNotSupported
}

func (d *Dialect) CopyReleaseExpired(ctx context.Context, limit int, keep []uuid.UUID) (int, error) {
	return 0, dialects.ErrNotSupported
}

func (d *Dialect) CopyProbe(ctx context.Context) (dialects.Probe, error) {
	return dialects.Probe{}, dialects.ErrNotSupported
}

func (d *Dialect) CopyPurge(ctx context.Context, p dialects.PurgeParams) (int, error) {
	return 0, dialects.ErrNotSupported
}

func (d *Dialect) CopyCounts(ctx context.Context) ([]dialects.DestinationCount, error) {
	return nil, dialects.ErrNotSupported
}

func (d *Dialect) CopyList(ctx context.Context, p dialects.CopyListParams) ([]dialects.CopyListed, error) {
	return nil, dialects.ErrNotSupported
}

func (d *Dialect) CopiesOfRow(ctx context.Context, rowID uuid.UUID) ([]dialects.CopyListed, error) {
	return nil, dialects.ErrNotSupported
}

func (d *Dialect) CopyReplay(ctx context.Context, destination string, rowIDs []uuid.UUID, states []dialects.State, by string) (int, error) {
	return 0, dialects.ErrNotSupported
}

func (d *Dialect) CopyBackfill(ctx context.Context, destination string, rowIDs []uuid.UUID, by string) (int, error) {
	return 0, dialects.ErrNotSupported
}
