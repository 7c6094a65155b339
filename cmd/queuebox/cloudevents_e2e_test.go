package main

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/internal/testkit"
)

// A consumer built on the official CloudEvents Go SDK, its HTTP receiver as
// the SDK's documentation writes one, reads the same subject and
// partitionkey from the relay in binary and in structured mode, a key with
// a non-ASCII letter, spaces and a percent sign included.
func TestCloudEventsSDKConsumerReadsTheKeyInBothModes(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, err := cehttp.New(cehttp.WithListener(ln))
	if err != nil {
		t.Fatal(err)
	}
	client, err := cloudevents.NewClient(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	got := make(chan cloudevents.Event, 10)
	go func() { _ = client.StartReceiver(ctx, func(e cloudevents.Event) { got <- e }) }()

	dbURL := testdb.Database(t)
	url := "http://" + ln.Addr().String() + "/"
	cfg := writeConfig(t, fmt.Sprintf(`database: { url: %q }
outbox: { pollIntervalMs: 100 }
destinations:
  binary: { type: http, url: %q, cloudEvents: { mode: binary, source: /shop } }
  structured: { type: http, url: %q, cloudEvents: { mode: structured, source: /shop } }
routes:
  - { topicPattern: "order.binary", destination: binary }
  - { topicPattern: "order.structured", destination: structured }
`, dbURL, url, url))
	if _, stderr, code := run(t, "migrate", "--config", cfg); code != 0 {
		t.Fatal(stderr)
	}
	const key = "Zoë 42, 100% sure"
	d := openPostgres(t, dbURL)
	if err := d.OutboxInsert(context.Background(), testkit.Rows(1, "order.binary", func(int) []testkit.RowOption { return []testkit.RowOption{testkit.Key(key)} })); err != nil {
		t.Fatal(err)
	}
	if err := d.OutboxInsert(context.Background(), testkit.Rows(1, "order.structured", func(int) []testkit.RowOption { return []testkit.RowOption{testkit.Key(key)} })); err != nil {
		t.Fatal(err)
	}
	startRun(t, cfg)
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case e := <-got:
			seen[e.Type()] = true
			if e.Subject() != key {
				t.Errorf("%s: the SDK reads subject %q, want %q", e.Type(), e.Subject(), key)
			}
			if pk := e.Extensions()["partitionkey"]; pk != key {
				t.Errorf("%s: the SDK reads partitionkey %q, want %q", e.Type(), pk, key)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("the SDK received %v of the two events", seen)
		}
	}
}
