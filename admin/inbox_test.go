package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/migrations"
)

// Status counts the inbox: received rows wait for the relay, relayed ones
// are outbox rows.
func TestStatusCountsTheInbox(t *testing.T) {
	d := outbox(t)
	ctx := context.Background()
	msgs := []dialects.InboxMessage{
		{Source: "web", MessageID: "a", Topic: "in", Payload: []byte(`{}`)},
		{Source: "web", MessageID: "b", Topic: "in", Payload: []byte(`{}`)},
		{Source: "web", MessageID: "c", Topic: "in", Payload: []byte(`{}`)},
	}
	if _, err := d.InboxReceive(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := d.InboxRelay(ctx, dialects.InboxRelayParams{Limit: 1, MaxAttempts: 5}); err != nil {
		t.Fatal(err)
	}
	st, err := Status(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if st.Inbox.Received != 2 || st.Inbox.Relayed != 1 || st.Inbox.OldestReceived < 0 {
		t.Fatalf("inbox status %+v, want 2 received and 1 relayed", st.Inbox)
	}
}

// inboxServer serves the admin routes over d with metrics that know the
// inbox source "web", as a replica that configures it does.
func inboxServer(t *testing.T, d dialects.Dialect) (*Metrics, *httptest.Server) {
	t.Helper()
	m := NewMetrics([]string{"web"})
	s := NewServer(Options{Dialect: d, Metrics: m, CountInterval: 50 * time.Millisecond, ThroughputStep: 50 * time.Millisecond})
	s.Start(context.Background())
	t.Cleanup(s.Stop)
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return m, hs
}

// scraped scrapes /metrics until every series named in want (a metric with
// its labels, as the text format writes it) has a value that ok accepts.
func scraped(t *testing.T, hs *httptest.Server, want map[string]func(float64) bool) {
	t.Helper()
	testkit.Eventually(t, "/metrics to get there", 0, func() error {
		body := call(t, hs, "GET", "/metrics", "").body
		missing := ""
		for series, ok := range want {
			m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
			if m == nil {
				missing += fmt.Sprintf("\n%s: absent", series)
				continue
			}
			if v, err := strconv.ParseFloat(m[1], 64); err != nil || !ok(v) {
				missing += fmt.Sprintf("\n%s: %s", series, m[1])
			}
		}
		if missing != "" {
			return errors.New(missing)
		}
		return nil
	})
}

func is(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

func positive(v float64) bool { return v > 0 }

// /api/stats and /metrics follow the inbox: its rows per state, the
// oldest received row's wait, and what each source of this replica
// handled.
func TestStatsAndMetricsFollowTheInbox(t *testing.T) {
	t.Parallel()
	d := outbox(t)
	ctx := context.Background()
	m, hs := inboxServer(t, d)

	// An empty inbox: the object and the series are there, at zero.
	v := counted(t, hs, func(v StatsView) bool { return v.Inbox != nil })
	if v.Inbox.Rows["received"] != 0 || v.Inbox.Rows["relayed"] != 0 || v.Inbox.OldestReceivedSeconds != 0 {
		t.Errorf("an empty inbox reads %+v", *v.Inbox)
	}
	if got := fmt.Sprint(v.Inbox.Sources); got != "map[web:map[duplicate:0 rejected:0 stored:0]]" {
		t.Errorf("the sources read %s, want web at zero", got)
	}
	scraped(t, hs, map[string]func(float64) bool{
		`queuebox_inbox_rows{outbox="default",state="received"}`: is(0), `queuebox_inbox_rows{outbox="default",state="relayed"}`: is(0),
		`queuebox_inbox_oldest_received_age_seconds{outbox="default"}`: is(0),
	})

	// Three messages stored through the source's storer, one of them twice.
	storer := inbox.NewStorer("web", d, m, slog.New(slog.DiscardHandler))
	var msgs []dialects.InboxMessage
	for _, id := range []string{"a", "b", "c", "a"} {
		msgs = append(msgs, dialects.InboxMessage{Source: "web", MessageID: id, Topic: "in", Payload: []byte(`{}`)})
	}
	if _, err := storer.Store(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	v = counted(t, hs, func(v StatsView) bool {
		return v.Inbox != nil && v.Inbox.Rows["received"] == 3 && v.Inbox.OldestReceivedSeconds > 0
	})
	if v.Inbox.Rows["relayed"] != 0 {
		t.Errorf("relayed %d before any relay", v.Inbox.Rows["relayed"])
	}
	if s := v.Inbox.Sources["web"]; s["stored"] != 3 || s["duplicate"] != 1 || s["rejected"] != 0 {
		t.Errorf("the source web reads %v, want 3 stored and 1 duplicate", s)
	}
	scraped(t, hs, map[string]func(float64) bool{
		`queuebox_inbox_rows{outbox="default",state="received"}`: is(3), `queuebox_inbox_rows{outbox="default",state="relayed"}`: is(0),
		`queuebox_inbox_oldest_received_age_seconds{outbox="default"}`: positive,
	})

	// Two relayed, then the last: the oldest received row's wait ends.
	if _, err := d.InboxRelay(ctx, dialects.InboxRelayParams{Limit: 2, MaxAttempts: 5}); err != nil {
		t.Fatal(err)
	}
	counted(t, hs, func(v StatsView) bool {
		return v.Inbox != nil && v.Inbox.Rows["received"] == 1 && v.Inbox.Rows["relayed"] == 2 && v.Inbox.OldestReceivedSeconds > 0
	})
	scraped(t, hs, map[string]func(float64) bool{
		`queuebox_inbox_rows{outbox="default",state="received"}`: is(1), `queuebox_inbox_rows{outbox="default",state="relayed"}`: is(2),
	})
	if _, err := d.InboxRelay(ctx, dialects.InboxRelayParams{Limit: 10, MaxAttempts: 5}); err != nil {
		t.Fatal(err)
	}
	v = counted(t, hs, func(v StatsView) bool {
		return v.Inbox != nil && v.Inbox.Rows["received"] == 0 && v.Inbox.Rows["relayed"] == 3
	})
	if v.Inbox.OldestReceivedSeconds != 0 {
		t.Errorf("the oldest received row waited %v s with none received", v.Inbox.OldestReceivedSeconds)
	}
	scraped(t, hs, map[string]func(float64) bool{
		`queuebox_inbox_rows{outbox="default",state="received"}`: is(0), `queuebox_inbox_rows{outbox="default",state="relayed"}`: is(3),
		`queuebox_inbox_oldest_received_age_seconds{outbox="default"}`: is(0),
	})
	// The relayed rows are outbox rows: the outbox's counts are unchanged
	// otherwise (three dead, one delivered, one pending before).
	if v.Rows["pending"] != 4 || v.Rows["dead"] != 3 {
		t.Errorf("the outbox after the relay reads %v, want 4 pending and 3 dead", v.Rows)
	}
}

// A schema without the inbox table: /api/stats leaves the inbox out and
// reports no error; the outbox is counted as before.
func TestStatsWithoutAnInboxTable(t *testing.T) {
	t.Parallel()
	schema, dbURL := testdb.Schema(t)
	ctx := context.Background()
	names := dialects.DefaultNames()
	names.Schema = schema
	open := func(n dialects.Names) *postgres.Dialect {
		d, err := postgres.Open(ctx, postgres.Options{URL: dbURL, Names: n, ApplicationName: testdb.ApplicationName})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		return d
	}
	if _, err := migrations.Up(ctx, open(names)); err != nil {
		t.Fatal(err)
	}
	names.Inbox = "no_such_inbox"
	d := open(names)
	if err := d.OutboxInsert(ctx, []dialects.NewRow{testkit.Row("t")}); err != nil {
		t.Fatal(err)
	}
	_, hs := inboxServer(t, d)
	v := counted(t, hs, func(v StatsView) bool { return v.Rows["pending"] == 1 })
	if v.Inbox != nil || v.Error != "" {
		t.Errorf("without an inbox table: inbox %+v, error %q", v.Inbox, v.Error)
	}
	if a := call(t, hs, "GET", "/api/stats", ""); strings.Contains(a.body, `"inbox"`) {
		t.Errorf("the stats name the inbox:\n%s", a.body)
	}
}
