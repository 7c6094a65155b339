// Package inboxtest holds what the tests of the inbox's sources share: the
// stored rows, an observer that counts outcomes, a bounded wait, and a relay
// engine that takes the inbox through the outbox to an HTTP receiver. The
// cases every source must pass are in inbox/sourcetest.
package inboxtest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
	httpsink "github.com/queuebox/queuebox/sinks/http"
)

// Row is a stored inbox row; N is the payload's "n" (-1 without one).
type Row struct {
	// ID is the inbox id, which the outbox row relayed from it keeps.
	ID               string
	MessageID, Topic string
	AggregateID      *string
	Headers          map[string]string
	N                int
}

// Rows returns the inbox rows in receive order.
func Rows(t *testing.T, d *postgres.Dialect) []Row {
	t.Helper()
	tbl := pgx.Identifier{d.Names().Schema, "inbox"}.Sanitize()
	rs, err := d.Pool().Query(context.Background(), `SELECT id::text, message_id, topic, aggregate_id, headers, COALESCE((payload->>'n')::int, -1) FROM `+tbl+` ORDER BY sequence`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (Row, error) {
		var x Row
		err := r.Scan(&x.ID, &x.MessageID, &x.Topic, &x.AggregateID, &x.Headers, &x.N)
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

// Wait is how long WaitFor waits: brokers' consumer groups and sessions
// take their time on a loaded machine.
const Wait = 90 * time.Second

// WaitFor polls cond (testkit.Eventually) for up to Wait.
func WaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, "waiting for "+what, Wait, testkit.True(cond))
}

// Relay runs the relay engine on d, with the inbox relay on, delivering
// every topic over HTTP to url (a template: "{{ topic }}" may be in it).
// It stops when the test ends.
func Relay(t *testing.T, d *postgres.Dialect, url string) *actors.Engine {
	t.Helper()
	pattern, err := routing.CompilePattern("#")
	if err != nil {
		t.Fatal(err)
	}
	addr, err := routing.ParseTemplate(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg := httpsink.Config{URL: addr, Method: "POST", Timeout: 5 * time.Second, MaxConnections: 16, MaxErrorBody: 1024}
	e, err := actors.New(actors.Options{
		Dialect: d, Router: routing.NewRouter([]routing.Route{{Name: "all", Pattern: pattern, Destination: "recv"}}),
		Destinations: map[string]actors.SinkFactory{"recv": func() (sinks.Sink, error) { return httpsink.New(cfg) }},
		BatchSize:    100, MaxInFlight: 1000, Lease: 10 * time.Second, PollInterval: 50 * time.Millisecond,
		ProbeInterval: 2 * time.Millisecond, KeyIdle: 200 * time.Millisecond, DrainTimeout: 5 * time.Second,
		Backoff: actors.Backoff{Initial: 10 * time.Millisecond, Multiplier: 2, Max: 100 * time.Millisecond},
		Inbox:   actors.InboxRelay{Enabled: true, MaxAttempts: 5},
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	return e
}

// Settled waits until want inbox rows are relayed and as many outbox rows
// delivered, with nothing left to do, and fails if there are more.
func Settled(t *testing.T, d *postgres.Dialect, want int64) {
	t.Helper()
	var in dialects.InboxStats
	var out dialects.Stats
	WaitFor(t, fmt.Sprintf("%d rows relayed and delivered", want), func() bool {
		var err error
		if in, err = d.InboxStats(context.Background()); err != nil {
			t.Fatal(err)
		}
		if out, err = d.OutboxStats(context.Background()); err != nil {
			t.Fatal(err)
		}
		return in.Rows[dialects.InboxReceived] == 0 && in.Rows[dialects.InboxRelayed] >= want && out.Rows[dialects.Delivered] >= want &&
			out.Rows[dialects.Pending]+out.Rows[dialects.Processing] == 0
	})
	if in.Rows[dialects.InboxRelayed] != want || out.Rows[dialects.Delivered] != want {
		t.Fatalf("inbox %v and outbox %v, want %d relayed and delivered", in.Rows, out.Rows, want)
	}
}
