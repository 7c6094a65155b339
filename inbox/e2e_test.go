package inbox_test

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/routing"
	"github.com/queuebox/queuebox/sinks"
	httpsink "github.com/queuebox/queuebox/sinks/http"
)

// Only HTTP: QueueBox's own HTTP destination, with a signing secret,
// delivers to an inbox source that verifies Standard Webhooks signatures: the signature of
// one implementation is accepted by the other, and a redelivery of the row
// is a duplicate (X-Message-Id is the row id).
func TestHTTPAcceptsQueueBoxSignatures(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 20)
	s := server(t, d, nil, nil)
	key, _ := base64.StdEncoding.DecodeString(webhookKey)
	addr, _ := routing.ParseTemplate(s.URL + "/inbox/hooks")
	sink, err := httpsink.New(httpsink.Config{URL: addr, Method: "POST", Timeout: 5 * time.Second, MaxConnections: 4, MaxErrorBody: 1024, SigningSecret: key})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	msg := sinks.Message{ID: "0b7d9c1e-59a3-4c4b-9d55-6f7b1d9a2c11", Topic: "order.created", Key: "o-1", Sequence: 7,
		CreatedAt: time.Now(), Body: []byte(`{"order":"o-1"}`)}
	for i := range 2 {
		msg.Attempt = i
		if errs := sink.Publish(context.Background(), []sinks.Message{msg}); errs[0] != nil {
			t.Fatalf("delivery %d: %v", i, errs[0])
		}
	}
	rows := inboxRows(t, d)
	if len(rows) != 1 || rows[0].MessageID != msg.ID || rows[0].Headers["X-Key"] != "o-1" {
		t.Fatalf("rows %+v; want the row once, with the sender's headers", rows)
	}
	// A tampered body is refused.
	req, _ := http.NewRequest("POST", s.URL+"/inbox/hooks", strings.NewReader(`{"order":"o-2"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("an unsigned request: %d", resp.StatusCode)
	}
}
