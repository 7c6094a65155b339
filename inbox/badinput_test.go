package inbox_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/internal/testdb"
)

// More of the catalogue of bad requests to an HTTP source (the first part
// is TestHTTPBadInput): each is refused with the status the handler's doc
// promises and a JSON error that says why, and nothing is stored.

func TestHTTPBadInputCatalogue(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 20)
	now := time.Unix(1_800_000_000, 0)
	s := server(t, d, &counts{}, func() time.Time { return now })
	body := `{"event":"x"}`
	future := strconv.FormatInt(now.Add(6*time.Minute).Unix(), 10)
	ts := strconv.FormatInt(now.Unix(), 10)
	cases := []struct {
		name, method, path, body string
		header                   map[string]string
		status                   int
		reason                   string
	}{
		{"HEAD", "HEAD", "/inbox/payments", "", auth(), 405, ""},
		{"OPTIONS", "OPTIONS", "/inbox/payments", "", auth(), 405, "OPTIONS is not allowed: send the message with POST"},
		{"DELETE", "DELETE", "/inbox/payments", "", auth(), 405, "DELETE is not allowed"},
		{"a path below a source", "POST", "/inbox/payments/extra", body, auth(), 404, "is not an inbox source"},
		{"a source name in another case", "POST", "/inbox/Payments", body, auth(), 404, "is not an inbox source"},
		{"a token in the query string", "POST", "/inbox/payments?token=s3cret-token", body, map[string]string{"X-Event-Type": "a", "X-Aggregate-Id": "p"}, 401, "needs its token"},
		{"a token with a character more", "POST", "/inbox/payments", body, with(auth(), "Authorization", "Bearer s3cret-tokenX"), 401, "does not match"},
		{"an empty bearer", "POST", "/inbox/payments", body, with(auth(), "Authorization", "Bearer"), 401, `not "Bearer <token>"`},
		{"a JSON document cut short", "POST", "/inbox/payments", `{"event": "x"`, auth(), 400, "not JSON"},
		{"trailing garbage", "POST", "/inbox/payments", `{"event": "x"} x`, auth(), 400, "not JSON"},
		{"white space only", "POST", "/inbox/payments", " \n\t ", auth(), 400, "the body is empty"},
		{"an aggregate id over 255 characters", "POST", "/inbox/payments", body, with(auth(), "X-Aggregate-Id", strings.Repeat("p", 256)), 400, "256 characters long"},
		{"an event type that is not UTF-8", "POST", "/inbox/payments", body, with(auth(), "X-Event-Type", "caf\xe9"), 400, "not valid UTF-8"},
		{"an empty template header", "POST", "/inbox/payments", body, with(auth(), "X-Event-Type", " "), 400, "lacks or leaves empty"},
		{"a signature from the future", "POST", "/inbox/hooks", body, map[string]string{"Webhook-Id": "w1", "Webhook-Timestamp": future, "Webhook-Signature": sign("w1", future, body)}, 401, "6m0s away"},
		{"a timestamp that is not a number", "POST", "/inbox/hooks", body, map[string]string{"Webhook-Id": "w1", "Webhook-Timestamp": "yesterday", "Webhook-Signature": sign("w1", ts, body)}, 401, "is not a Unix time in seconds"},
		{"a signature of another version", "POST", "/inbox/hooks", body, map[string]string{"Webhook-Id": "w1", "Webhook-Timestamp": ts, "Webhook-Signature": strings.Replace(sign("w1", ts, body), "v1,", "v2,", 1)}, 401, "does not match"},
		{"a signature that is not base64", "POST", "/inbox/hooks", body, map[string]string{"Webhook-Id": "w1", "Webhook-Timestamp": ts, "Webhook-Signature": "v1,***"}, 401, "does not match"},
		{"a signature of another message id", "POST", "/inbox/hooks", body, map[string]string{"Webhook-Id": "w2", "Webhook-Timestamp": ts, "Webhook-Signature": sign("w1", ts, body)}, 401, "does not match"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, s.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			if tc.method == "HEAD" {
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != tc.status {
					t.Fatalf("HEAD: %d, want %d", res.StatusCode, tc.status)
				}
				return
			}
			r := do(t, req)
			if r.Status != tc.status || !strings.Contains(r.Error, tc.reason) || r.ID != "" {
				t.Fatalf("%d %q, want %d with %q", r.Status, r.Error, tc.status, tc.reason)
			}
		})
	}
	if rows := inboxRows(t, d); len(rows) != 0 {
		t.Fatalf("bad input stored %d rows: %+v", len(rows), rows)
	}
}

// A body that is JSON but not an object or array would make an outbox row
// that goes dead at its first delivery ("the payload is a JSON number"),
// after its sender was told it was accepted: the inbox refuses it at the
// door, as it refuses a body that is not JSON, and says what to send.
func TestHTTPRefusesAPayloadTheOutboxCannotDeliver(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 20)
	s := server(t, d, &counts{}, nil)
	for _, c := range []struct{ name, body, reason string }{
		{"a number", `42`, "object or array"},
		{"a string", `"paid"`, "object or array"},
		{"null", `null`, "object or array"},
		{"a boolean", `true`, "object or array"},
		{"a JSON string holding JSON", `"{\"amount\": 12}"`, "encoded twice"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := post(t, s.URL+"/inbox/payments", c.body, with(auth(), "X-Message-Id", "m-"+c.name))
			if r.Status != http.StatusBadRequest || !strings.Contains(r.Error, c.reason) {
				t.Fatalf("%d %q (id %s); want 400 saying %q", r.Status, r.Error, r.ID, c.reason)
			}
		})
	}
}
