package bootstrap

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
	"github.com/queuebox/queuebox/internal/testlog"
	"github.com/queuebox/queuebox/internal/testrecv"
	"github.com/queuebox/queuebox/migrations"
)

// With several outboxes, one whose schema is not current does not stop the
// relay: the others deliver, it is started again after a back-off, and it
// delivers once its schema is migrated. Its state says why meanwhile.
func TestAnOutboxThatCannotStartLeavesTheOthersRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schemaA, urlA := testdb.Schema(t)
	schemaB, urlB := testdb.Schema(t)
	recv := testrecv.New(t, nil)
	l, err := Parse("q.yaml", []byte(fmt.Sprintf(`
outboxes:
  a: { database: { url: %q, schema: %s, wakeups: probe } }
  b: { database: { url: %q, schema: %s, wakeups: probe } }
outbox: { pollIntervalMs: 50 }
destinations: { hook: { type: http, url: %q } }
routes: [ { topicPattern: "#", destination: hook } ]
admin: { listen: "127.0.0.1:0" }
shutdown: { drainTimeoutMs: 5000 }
`, urlA, schemaA, urlB, schemaB, recv.URL+"/{{ topic }}")), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	open := func(url, schema string) *postgres.Dialect {
		names := dialects.DefaultNames()
		names.Schema = schema
		d, err := postgres.Open(ctx, postgres.Options{URL: url, Names: names})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		return d
	}
	a, b := open(urlA, schemaA), open(urlB, schemaB)
	if _, err := migrations.Up(ctx, a); err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	var adminURL string
	listening := make(chan struct{})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- RunOutboxes(runCtx, l, logs.Logger(), RunOptions{AdminListening: func(u string) { adminURL = u; close(listening) }})
	}()
	<-listening

	logs.WaitFor(t, "outbox could not start")
	if !strings.Contains(logs.String(), "outbox=b") || !strings.Contains(logs.String(), "no QueueBox migration has been applied") {
		t.Errorf("the log does not say which outbox failed and why:\n%s", logs.String())
	}
	if err := a.OutboxInsert(ctx, testkit.Rows(10, "a.thing", nil)); err != nil {
		t.Fatal(err)
	}
	recv.WaitDelivered(t, 10, 30*time.Second)
	code, body := get(t, adminURL+"readyz")
	if code != 200 || !strings.Contains(body, "outbox a: ready") || !strings.Contains(body, "outbox b: not ready") {
		t.Errorf("/readyz with b failing: %d %s", code, body)
	}

	if _, err := migrations.Up(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := b.OutboxInsert(ctx, testkit.Rows(5, "b.thing", nil)); err != nil {
		t.Fatal(err)
	}
	recv.WaitDelivered(t, 15, time.Minute)
	testkit.Eventually(t, "both outboxes ready", 30*time.Second, func() error {
		if code, body := get(t, adminURL+"readyz"); code != 200 || !strings.Contains(body, "ready: 2 of 2 outboxes") {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	_, body = get(t, adminURL+"api/stats?outbox=b")
	if !strings.Contains(body, `"outbox": "b"`) || strings.Count(body, `"running": true`) != 2 {
		t.Errorf("/api/stats?outbox=b:\n%s", body)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("RunOutboxes: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("RunOutboxes did not return after its context ended")
	}
}

// get asks the admin listener for url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}
