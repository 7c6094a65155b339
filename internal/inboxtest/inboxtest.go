// Package inboxtest holds what the tests of the inbox's broker sources
// share: the stored rows, an observer that counts outcomes, and a bounded
// wait.
package inboxtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/inbox"
)

// Row is a stored inbox row; N is the payload's "n" (-1 without one).
type Row struct {
	MessageID, Topic string
	AggregateID      *string
	Headers          map[string]string
	N                int
}

// Rows returns the inbox rows in receive order.
func Rows(t *testing.T, d *postgres.Dialect) []Row {
	t.Helper()
	tbl := pgx.Identifier{d.Names().Schema, "inbox"}.Sanitize()
	rs, err := d.Pool().Query(context.Background(), `SELECT message_id, topic, aggregate_id, headers, COALESCE((payload->>'n')::int, -1) FROM `+tbl+` ORDER BY sequence`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (Row, error) {
		var x Row
		err := r.Scan(&x.MessageID, &x.Topic, &x.AggregateID, &x.Headers, &x.N)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Counter is an inbox.Observer that counts outcomes.
type Counter struct {
	mu sync.Mutex
	n  map[inbox.Outcome]int
}

func (c *Counter) InboxReceived(_ string, o inbox.Outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[inbox.Outcome]int{}
	}
	c.n[o]++
}

// Get returns how many messages had outcome o.
func (c *Counter) Get(o inbox.Outcome) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[o]
}

// String shows the counts, for failure messages.
func (c *Counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(c.n)
}

// WaitFor waits up to 90 s for cond.
func WaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("waited 90 s for %s", what)
}
