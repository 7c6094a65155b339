package inbox_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/routing"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func tpl(t testing.TB, s string) *routing.Template {
	t.Helper()
	if s == "" {
		return nil
	}
	x, err := inbox.ParseTemplate(s)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func mapping(t testing.TB, source, topic, aggType, aggID string) *inbox.Mapping {
	t.Helper()
	m, err := inbox.NewMapping(source, tpl(t, topic), tpl(t, aggType), tpl(t, aggID))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// counts is an Observer that counts outcomes per source.
type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) InboxReceived(source string, o inbox.Outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[source+"/"+o.String()]++
}

func (c *counts) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

const webhookKey = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// server serves the handler with a token source "payments", a signed
// source "hooks" (Standard Webhooks) and an open source "open".
func server(t testing.TB, d dialects.Inbox, obs inbox.Observer, now func() time.Time) *httptest.Server {
	t.Helper()
	key, _ := base64.StdEncoding.DecodeString(webhookKey)
	h := inbox.NewHTTP(inbox.HTTPOptions{
		Store: d, Observer: obs, Now: now,
		Sources: map[string]*inbox.HTTPSource{
			"payments": {Mapping: mapping(t, "payments", "payment.{{ headers.X-Event-Type }}", "payment", "{{ headers.X-Aggregate-Id }}"),
				Token: "s3cret-token", MaxBodyBytes: 1000},
			"hooks": {Mapping: mapping(t, "hooks", "hook.received", "", ""), SigningSecret: key},
			"open":  {Mapping: mapping(t, "open", "open.in", "", "{{ headers.x-order }}")},
		},
	})
	mux := http.NewServeMux()
	mux.Handle(inbox.Prefix, h)
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

type reply struct {
	Status    int
	ID        string `json:"id"`
	Duplicate *bool  `json:"duplicate"`
	Error     string `json:"error"`
	Header    http.Header
}

func post(t testing.TB, url, body string, header map[string]string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return do(t, req)
}

func do(t testing.TB, req *http.Request) reply {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r reply
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%d: the answer is not JSON: %s", resp.StatusCode, b)
	}
	r.Status, r.Header = resp.StatusCode, resp.Header
	return r
}

type inboxRow struct {
	ID, Source, MessageID, Topic string
	AggregateType, AggregateID   *string
	Payload                      map[string]any
	Headers                      map[string]string
}

func inboxRows(t testing.TB, d *postgres.Dialect) []inboxRow {
	t.Helper()
	tbl := pgx.Identifier{d.Names().Schema, "inbox"}.Sanitize()
	rows, err := d.Pool().Query(context.Background(), `SELECT id::text, source, message_id, topic, aggregate_type, aggregate_id, payload, headers FROM `+tbl+` ORDER BY sequence`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (inboxRow, error) {
		var x inboxRow
		err := r.Scan(&x.ID, &x.Source, &x.MessageID, &x.Topic, &x.AggregateType, &x.AggregateID, &x.Payload, &x.Headers)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func auth() map[string]string {
	return map[string]string{"Authorization": "Bearer s3cret-token", "X-Event-Type": "captured", "X-Aggregate-Id": "pay-1"}
}

func with(h map[string]string, k, v string) map[string]string {
	out := map[string]string{}
	for a, b := range h {
		out[a] = b
	}
	out[k] = v
	return out
}

// Only HTTP answers its sender: 202 with the inbox id on the first receipt,
// 200 with the same id and nothing stored on a repeat with the same message
// id. The row keeps the request's headers but the credentials and those of
// the one HTTP exchange. (What every source stores is the conformance
// suite's: TestConformance.)
func TestHTTPStoresOnce(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 20)
	s := server(t, d, nil, nil)
	url := s.URL + "/inbox/payments"
	first := post(t, url, `{"amount": 12.5, "currency": "EUR"}`, with(auth(), "X-Message-Id", "msg-1"))
	if first.Status != http.StatusAccepted || first.ID == "" || first.Duplicate == nil || *first.Duplicate {
		t.Fatalf("first receipt: %+v", first)
	}
	again := post(t, url, `{"amount": 99}`, with(auth(), "X-Message-Id", "msg-1"))
	if again.Status != http.StatusOK || again.ID != first.ID || again.Duplicate == nil || !*again.Duplicate {
		t.Fatalf("repeat: %+v, want 200 with id %s", again, first.ID)
	}
	rows := inboxRows(t, d)
	if len(rows) != 1 || rows[0].ID != first.ID || rows[0].Source != "payments" || rows[0].AggregateType == nil || *rows[0].AggregateType != "payment" {
		t.Fatalf("rows %+v; want one, with the answered id %s", rows, first.ID)
	}
	if h := rows[0].Headers; h["X-Event-Type"] != "captured" || h["Authorization"] != "" || h["Content-Length"] != "" {
		t.Errorf("stored headers %v: want X-Event-Type, and no Authorization or Content-Length", h)
	}
}

// The message id is X-Message-Id, else Idempotency-Key, else webhook-id,
// else a new UUID (every such request is a new message).
func TestHTTPMessageID(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 20)
	s := server(t, d, nil, nil)
	url := s.URL + "/inbox/open"
	post(t, url, `{}`, map[string]string{"X-Message-Id": "a", "Idempotency-Key": "b", "Webhook-Id": "c", "X-Order": "o1"})
	post(t, url, `{}`, map[string]string{"Idempotency-Key": "b", "Webhook-Id": "c", "X-Order": "o1"})
	post(t, url, `{}`, map[string]string{"Webhook-Id": "c", "X-Order": "o1"})
	post(t, url, `{}`, map[string]string{"X-Order": "o1"})
	post(t, url, `{}`, map[string]string{"X-Order": "o1"})
	var ids []string
	for _, r := range inboxRows(t, d) {
		ids = append(ids, r.MessageID)
	}
	if len(ids) != 5 || ids[0] != "a" || ids[1] != "b" || ids[2] != "c" || len(ids[3]) != 36 || ids[3] == ids[4] {
		t.Fatalf("message ids %v; want a, b, c, then two new UUIDs", ids)
	}
}

func sign(id, ts, body string) string {
	key, _ := base64.StdEncoding.DecodeString(webhookKey)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + body))
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Bad input gets its status and a reason, and stores nothing.
func TestHTTPBadInput(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 20)
	obs := &counts{}
	now := time.Unix(1_800_000_000, 0)
	s := server(t, d, obs, func() time.Time { return now })
	ts := strconv.FormatInt(now.Unix(), 10)
	old := strconv.FormatInt(now.Add(-6*time.Minute).Unix(), 10)
	body := `{"event":"x"}`
	big := `{"pad":"` + strings.Repeat("x", 1000) + `"}`
	cases := []struct {
		name, method, path, body string
		header                   map[string]string
		chunked                  bool
		status                   int
		reason                   string
	}{
		{"not JSON", "POST", "/inbox/payments", `{"event": x}`, auth(), false, 400, "not JSON: invalid character 'x'"},
		{"two documents", "POST", "/inbox/payments", `{} {}`, auth(), false, 400, "not JSON"},
		{"a JSON number", "POST", "/inbox/payments", `42`, auth(), false, 400, "JSON number; send a JSON object or array"},
		{"a JSON string", "POST", "/inbox/payments", `"{\"a\":1}"`, auth(), false, 400, "JSON string"},
		{"JSON null", "POST", "/inbox/payments", `null`, auth(), false, 400, "JSON null"},
		{"empty body", "POST", "/inbox/payments", ``, auth(), false, 400, "the body is empty"},
		{"not UTF-8", "POST", "/inbox/payments", "{\"a\":\"\xff\"}", auth(), false, 400, "not valid UTF-8"},
		{"NUL", "POST", "/inbox/payments", `{"a":"x\u0000y"}`, auth(), false, 400, `\u0000`},
		{"refused by the database", "POST", "/inbox/payments", `{"a":"\ud800"}`, auth(), false, 400, "surrogate"},
		{"missing template header", "POST", "/inbox/payments", body, map[string]string{"Authorization": "Bearer s3cret-token", "X-Aggregate-Id": "p"}, false, 400,
			"the topic template \"payment.{{ headers.X-Event-Type }}\" needs the header X-Event-Type"},
		{"message id too long", "POST", "/inbox/payments", body, with(auth(), "X-Message-Id", strings.Repeat("m", 256)), false, 400, "256 characters long"},
		{"too large", "POST", "/inbox/payments", big, auth(), false, 413, "at most 1000"},
		{"too large, chunked", "POST", "/inbox/payments", big, auth(), true, 413, "over 1000 bytes"},
		{"no token", "POST", "/inbox/payments", body, map[string]string{"X-Event-Type": "a", "X-Aggregate-Id": "p"}, false, 401, "needs its token"},
		{"wrong token", "POST", "/inbox/payments", body, with(auth(), "Authorization", "Bearer nope"), false, 401, "does not match"},
		{"admin-style header", "POST", "/inbox/payments", body, with(auth(), "Authorization", "Basic abc"), false, 401, "not \"Bearer <token>\""},
		{"no signature", "POST", "/inbox/hooks", body, nil, false, 401, "send webhook-id, webhook-timestamp and webhook-signature"},
		{"bad signature", "POST", "/inbox/hooks", body, map[string]string{"Webhook-Id": "w1", "Webhook-Timestamp": ts, "Webhook-Signature": sign("w1", ts, `{"other":1}`)}, false, 401, "does not match"},
		{"old timestamp", "POST", "/inbox/hooks", body, map[string]string{"Webhook-Id": "w1", "Webhook-Timestamp": old, "Webhook-Signature": sign("w1", old, body)}, false, 401, "6m0s away"},
		{"unknown source", "POST", "/inbox/nope", body, auth(), false, 404, "/inbox/nope is not an inbox source"},
		{"no source", "POST", "/inbox/", body, auth(), false, 404, "not an inbox source"},
		{"wrong method", "GET", "/inbox/payments", "", auth(), false, 405, "GET is not allowed"},
		{"PUT", "PUT", "/inbox/payments", body, auth(), false, 405, "PUT is not allowed"},
	}
	for _, tc := range cases {
		var rd io.Reader = strings.NewReader(tc.body)
		if tc.chunked {
			rd = io.MultiReader(strings.NewReader(tc.body)) // no length: sent chunked
		}
		req, err := http.NewRequest(tc.method, s.URL+tc.path, rd)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		r := do(t, req)
		if r.Status != tc.status || !strings.Contains(r.Error, tc.reason) || r.ID != "" {
			t.Errorf("%s: %d %q, want %d with %q", tc.name, r.Status, r.Error, tc.status, tc.reason)
		}
		if tc.status == 405 && r.Header.Get("Allow") != "POST" {
			t.Errorf("%s: Allow %q", tc.name, r.Header.Get("Allow"))
		}
		if tc.status == 401 && tc.path == "/inbox/payments" && r.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: no WWW-Authenticate", tc.name)
		}
	}
	if rows := inboxRows(t, d); len(rows) != 0 {
		t.Fatalf("bad input stored %d rows: %+v", len(rows), rows)
	}
	if got := obs.get("payments/rejected") + obs.get("hooks/rejected"); got != len(cases)-2 {
		t.Errorf("%d rejections counted, want %d (unknown sources are not counted)", got, len(cases)-2)
	}
	// The same signed request within the window is accepted.
	good := post(t, s.URL+"/inbox/hooks", body, map[string]string{"Webhook-Id": "w1", "Webhook-Timestamp": ts,
		"Webhook-Signature": "v1,bm90IGl0 " + sign("w1", ts, body)})
	if good.Status != 202 {
		t.Fatalf("a correctly signed request (second of two signatures): %+v", good)
	}
	if rows := inboxRows(t, d); len(rows) != 1 || rows[0].MessageID != "w1" || rows[0].Headers["Webhook-Signature"] != "" || rows[0].Headers["Webhook-Id"] != "w1" {
		t.Fatalf("rows %+v; want one, with message id w1 and no stored signature", rows)
	}
}

// Eight clients send the same messages at once: each is stored once, and
// every answer for it names the same row.
func TestHTTPConcurrentRepeats(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 20)
	s := server(t, d, nil, nil)
	const clients, messages = 8, 40
	ids := make([]map[string]string, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[c] = map[string]string{}
			for i := range messages {
				id := fmt.Sprintf("m%d", (i+c*5)%messages)
				r := post(t, s.URL+"/inbox/open", `{"i":1}`, map[string]string{"X-Message-Id": id, "X-Order": "o"})
				if r.Status != 202 && r.Status != 200 {
					t.Errorf("%s: %+v", id, r)
					return
				}
				ids[c][id] = r.ID
			}
		}()
	}
	wg.Wait()
	for c := 1; c < clients; c++ {
		for id, row := range ids[0] {
			if ids[c][id] != row {
				t.Fatalf("message %s: client 0 got row %s, client %d row %s", id, row, c, ids[c][id])
			}
		}
	}
	if rows := inboxRows(t, d); len(rows) != messages {
		t.Fatalf("%d rows for %d messages", len(rows), messages)
	}
}

// A source with two signing secrets (a sender's rotation) accepts a
// message signed with either, signed here by the Standard Webhooks
// project's own Go library; a message signed with a third secret, or whose
// body was changed after signing, is refused and not stored.
func TestHTTPSigningSecretsOfARotation(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 20)
	const oldSecret, newSecret, otherSecret = "whsec_" + webhookKey, "whsec_QkVTdC1rZXktb2YtdGhlLXJvdGF0aW9uIQ==", "whsec_YW5vdGhlci1zZWNyZXQtZW50aXJlbHk="
	keys := [][]byte{}
	for _, s := range []string{newSecret, oldSecret} {
		k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	h := inbox.NewHTTP(inbox.HTTPOptions{Store: d, Sources: map[string]*inbox.HTTPSource{
		"rotating": {Mapping: mapping(t, "rotating", "hook.received", "", ""), SigningSecrets: keys},
	}})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	send := func(secret, id, signedBody, sentBody string) reply {
		t.Helper()
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		sig, err := wh.Sign(id, now, []byte(signedBody))
		if err != nil {
			t.Fatal(err)
		}
		return post(t, srv.URL+"/inbox/rotating", sentBody, map[string]string{"Content-Type": "application/json",
			"Webhook-Id": id, "Webhook-Timestamp": strconv.FormatInt(now.Unix(), 10), "Webhook-Signature": sig})
	}
	for _, c := range []struct {
		name, secret, id string
		tampered         bool
		status           int
	}{
		{"signed with the new secret", newSecret, "m-new", false, 202},
		{"signed with the old secret", oldSecret, "m-old", false, 202},
		{"signed with another secret", otherSecret, "m-other", false, 401},
		{"signed with the new secret, body changed", newSecret, "m-tampered", true, 401},
	} {
		sent := `{"n": 1}`
		if c.tampered {
			sent = `{"n": 2}`
		}
		r := send(c.secret, c.id, `{"n": 1}`, sent)
		if r.Status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, r.Status, r.Error, c.status)
		}
		if c.status == 401 && !strings.Contains(r.Error, "under any of this source's signing secrets") {
			t.Errorf("%s: %q", c.name, r.Error)
		}
	}
	var ids []string
	for _, r := range inboxRows(t, d) {
		ids = append(ids, r.MessageID)
	}
	if strings.Join(ids, ",") != "m-new,m-old" && strings.Join(ids, ",") != "m-old,m-new" {
		t.Fatalf("stored %v; want the two messages signed with a secret of the source", ids)
	}
}
