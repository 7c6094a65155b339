package sinks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestNotDelivered(t *testing.T) {
	perm := NotDelivered("id-1", Permanent(errors.New("bad address")))
	if IsPermanent(perm) || !strings.Contains(perm.Error(), "id-1") || !strings.Contains(perm.Error(), "bad address") {
		t.Errorf("after a permanent failure: %v (permanent %v)", perm, IsPermanent(perm))
	}
	if err := NotDelivered("id-1", fmt.Errorf("broker: %w", context.Canceled)); !errors.Is(err, context.Canceled) {
		t.Errorf("after a cancellation: %v does not wrap context.Canceled", err)
	}
	if err := NotDelivered("id-1", context.DeadlineExceeded); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("after a timeout: %v", err)
	}
	if err := NotDelivered("id-1", errors.New("nack")); errors.Is(err, context.Canceled) || errors.Unwrap(err) != nil {
		t.Errorf("after a nack: %v unwraps to %v", err, errors.Unwrap(err))
	}
}
