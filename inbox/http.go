package inbox

import (
	"crypto/hmac"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	httpsink "github.com/queuebox/queuebox/sinks/http"
)

// Defaults of an HTTP source.
const (
	// DefaultMaxBodyBytes is the largest body an HTTP source accepts
	// unless inbox.sources.NAME.maxBodyBytes says otherwise: 1 MiB, the
	// default message size limit of Kafka brokers and more than webhook
	// senders send.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultTolerance is how far a Standard Webhooks timestamp may be from
	// this replica's clock, either way: the 5 minutes the specification
	// recommends, against replayed requests.
	DefaultTolerance = 5 * time.Minute
)

// HTTPSource is one HTTP source.
type HTTPSource struct {
	*Mapping
	// Token, when set, must come as "Authorization: Bearer <token>".
	Token string
	// SigningSecrets, when set, are the decoded Standard Webhooks keys
	// accepted: every request must carry webhook-id, webhook-timestamp and
	// a webhook-signature that one of them made. Several keys let a sender
	// rotate its secret: messages signed with the old or the new one pass.
	SigningSecrets [][]byte
	// SigningSecret is one more accepted key: the form of one key alone
	// that callers used before rotations.
	SigningSecret []byte
	// Tolerance bounds the signature's timestamp (DefaultTolerance when 0).
	Tolerance time.Duration
	// MaxBodyBytes bounds the body (DefaultMaxBodyBytes when 0).
	MaxBodyBytes int64
}

// keys are the source's signing keys: SigningSecret and SigningSecrets.
func (s *HTTPSource) keys() [][]byte {
	if s.SigningSecret == nil {
		return s.SigningSecrets
	}
	return append([][]byte{s.SigningSecret}, s.SigningSecrets...)
}

// HTTPOptions configure the HTTP handler.
type HTTPOptions struct {
	// Sources are the HTTP sources by name.
	Sources map[string]*HTTPSource
	Store   dialects.Inbox
	// Observer counts outcomes; nil counts nothing.
	Observer Observer
	Log      *slog.Logger
	// Now is the clock for signature timestamps (tests set it).
	Now func() time.Time
}

// HTTP serves POST /inbox/{source}: it authenticates the request as the
// source says, checks the body, stores the message once and answers with
// the inbox id. It needs no admin token: each source has its own
// credentials. Every error is JSON: {"error": "..."}.
//
//	202 {"id": ..., "duplicate": false}  stored now
//	200 {"id": ..., "duplicate": true}   a repeat of a stored message; nothing stored
//	400  not JSON, a template's header missing, or a value the database
//	     refuses (the reason says which)
//	401  a wrong or missing token, or a bad signature
//	404  no HTTP source of that name
//	405  a method other than POST
//	413  a body over the source's limit
//	503  the database did not store it; send it again
type HTTP struct {
	o     HTTPOptions
	batch *batcher
	// lastFailure throttles the log line of storage failures.
	lastFailure atomic.Int64
	// afterStore, when set (tests), runs after the message committed and
	// before the answer; an error drops the request unanswered, as a crash
	// of the replica would.
	afterStore func() error
}

// Prefix is where the handler is mounted.
const Prefix = "/inbox/"

// NewHTTP builds the handler.
func NewHTTP(o HTTPOptions) *HTTP {
	if o.Observer == nil {
		o.Observer = NopObserver{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &HTTP{o: o, batch: &batcher{store: o.Store}}
}

// httpAnswer is the JSON body of every answer.
type httpAnswer struct {
	ID        string `json:"id,omitempty"`
	Duplicate *bool  `json:"duplicate,omitempty"`
	Error     string `json:"error,omitempty"`
}

func answer(w http.ResponseWriter, status int, a httpAnswer) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(a)
}

// ServeHTTP handles one request.
func (h *HTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutPrefix(r.URL.Path, Prefix)
	src := h.o.Sources[name]
	if !ok || name == "" || src == nil {
		answer(w, http.StatusNotFound, httpAnswer{Error: fmt.Sprintf("%s is not an inbox source: POST to /inbox/NAME, where NAME is an http source under inbox.sources", r.URL.Path)})
		return
	}
	refuse := func(status int, format string, args ...any) {
		h.o.Observer.InboxReceived(name, Rejected)
		answer(w, status, httpAnswer{Error: fmt.Sprintf(format, args...)})
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		refuse(http.StatusMethodNotAllowed, "%s is not allowed: send the message with POST", r.Method)
		return
	}
	if src.Token != "" {
		if problem := checkBearer(r.Header.Get("Authorization"), src.Token); problem != "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="queuebox inbox"`)
			refuse(http.StatusUnauthorized, "%s", problem)
			return
		}
	}
	limit := src.MaxBodyBytes
	if limit <= 0 {
		limit = DefaultMaxBodyBytes
	}
	if r.ContentLength > limit {
		refuse(http.StatusRequestEntityTooLarge, "the body is %d bytes; this source accepts at most %d (inbox.sources.%s.maxBodyBytes)", r.ContentLength, limit, name)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			refuse(http.StatusRequestEntityTooLarge, "the body is over %d bytes, the most this source accepts (inbox.sources.%s.maxBodyBytes)", limit, name)
			return
		}
		answer(w, http.StatusBadRequest, httpAnswer{Error: fmt.Sprintf("reading the body failed: %v", err)})
		return
	}
	if keys := src.keys(); len(keys) > 0 {
		tol := src.Tolerance
		if tol <= 0 {
			tol = DefaultTolerance
		}
		if problem := VerifySignature(keys, r.Header, body, h.o.Now(), tol); problem != "" {
			refuse(http.StatusUnauthorized, "%s", problem)
			return
		}
	}
	rec, err := httpReceived(r.Header, body)
	if err != nil {
		refuse(http.StatusBadRequest, "%v", err)
		return
	}
	msg, receipt, err := src.Receive(r.Context(), rec)
	if err != nil {
		refuse(http.StatusBadRequest, "%v", err)
		return
	}
	rc, err := h.batch.receive(r.Context(), msg)
	receipt.End(err)
	if errors.Is(err, dialects.ErrInvalidValue) {
		refuse(http.StatusBadRequest, "%v", err)
		return
	}
	if err != nil {
		if r.Context().Err() == nil {
			h.logFailure(name, err)
		}
		w.Header().Set("Retry-After", "1")
		answer(w, http.StatusServiceUnavailable, httpAnswer{Error: "the inbox could not store the message just now; send it again"})
		return
	}
	if h.afterStore != nil && h.afterStore() != nil {
		panic(http.ErrAbortHandler)
	}
	dup := !rc.Stored
	if dup {
		h.o.Observer.InboxReceived(name, Duplicate)
		answer(w, http.StatusOK, httpAnswer{ID: rc.ID.String(), Duplicate: &dup})
		return
	}
	h.o.Observer.InboxReceived(name, Stored)
	answer(w, http.StatusAccepted, httpAnswer{ID: rc.ID.String(), Duplicate: &dup})
}

// Statements reports how many insert statements the handler ran and how
// many messages they carried (concurrent requests share statements).
func (h *HTTP) Statements() (statements, messages int64) {
	return h.batch.statements.Load(), h.batch.messages.Load()
}

// logFailure logs a storage failure at most once a second.
func (h *HTTP) logFailure(source string, err error) {
	now := time.Now().UnixNano()
	last := h.lastFailure.Load()
	if now-last < int64(time.Second) || !h.lastFailure.CompareAndSwap(last, now) {
		return
	}
	h.o.Log.Warn("inbox: an HTTP source could not store a message; the sender was answered 503", "source", source, "error", err)
}

// checkBearer compares an Authorization header with the source's token, in
// constant time, and says what is wrong ("" when it matches).
func checkBearer(header, token string) string {
	if header == "" {
		return "this source needs its token: send Authorization: Bearer <token>"
	}
	scheme, tok, _ := strings.Cut(header, " ")
	tok = strings.TrimSpace(tok)
	if !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "the Authorization header is not \"Bearer <token>\""
	}
	if subtle.ConstantTimeCompare([]byte(tok), []byte(token)) != 1 {
		return "the token does not match this source's token"
	}
	return ""
}

// messageID is the sender's id for the message: X-Message-Id, else
// Idempotency-Key, else webhook-id, else a new UUID (then a repeat cannot
// be told from a new message).
func messageID(h http.Header) string {
	for _, name := range []string{"X-Message-Id", "Idempotency-Key", "Webhook-Id"} {
		if v := strings.TrimSpace(h.Get(name)); v != "" {
			return v
		}
	}
	return uuid.NewString()
}

// headerValue reads a request header for a template: HTTP header names
// ignore case; several values are joined as one.
func headerValue(h http.Header, name string) (string, bool) {
	vs := h.Values(name)
	if len(vs) == 0 {
		return "", false
	}
	return strings.Join(vs, ", "), true
}

// notStored are the request headers the inbox leaves out of a row's
// headers: credentials, and what belongs to this one HTTP exchange (the
// connection, the body's encoding and length). A row's headers become the
// headers of its deliveries, where these would be wrong or leak.
var notStored = map[string]bool{
	"Authorization": true, "Proxy-Authorization": true, "Cookie": true,
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Host": true, "Content-Length": true,
	"Content-Encoding": true, "Accept-Encoding": true, "Expect": true,
	// The signature signs the body as it was sent; the stored payload is
	// the same JSON, but not byte for byte.
	"Webhook-Signature": true,
}

// StoredHeaders are the request's headers as the inbox row keeps them: by
// canonical name, several values joined, without those in notStored.
func StoredHeaders(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for name, vs := range h {
		c := http.CanonicalHeaderKey(name)
		if notStored[c] || len(vs) == 0 {
			continue
		}
		out[c] = strings.Join(vs, ", ")
	}
	return out
}

// VerifySignature checks a Standard Webhooks signature: webhook-id,
// webhook-timestamp (Unix seconds, within tol of now) and webhook-signature
// (space-separated "v1,<base64>" entries, one of which must be the base64
// HMAC-SHA256 of "id.timestamp.body" under one of keys). It returns what is
// wrong, or "".
func VerifySignature(keys [][]byte, h http.Header, body []byte, now time.Time, tol time.Duration) string {
	id, ts, sigs := h.Get("Webhook-Id"), h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature")
	if id == "" || ts == "" || sigs == "" {
		return "this source verifies Standard Webhooks signatures: send webhook-id, webhook-timestamp and webhook-signature"
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Sprintf("webhook-timestamp %q is not a Unix time in seconds", ts)
	}
	if d := now.Sub(time.Unix(secs, 0)); d > tol || d < -tol {
		return fmt.Sprintf("webhook-timestamp %s is %s away from this server's clock; at most %s is accepted (a replayed request, or a clock that is off)",
			ts, d.Abs().Round(time.Second), tol)
	}
	// What QueueBox's HTTP destination would sign with each key: the
	// base64 is canonical, so comparing the text (in constant time) is
	// comparing the MACs.
	wants := make([][]byte, len(keys))
	for i, key := range keys {
		wants[i] = []byte(httpsink.Sign(key, id, ts, body))
	}
	for _, entry := range strings.Fields(sigs) {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		for _, want := range wants {
			if hmac.Equal([]byte(sig), want) {
				return ""
			}
		}
	}
	if len(keys) > 1 {
		return "webhook-signature does not match: no v1 signature is the HMAC-SHA256 of webhook-id, webhook-timestamp and the body under any of this source's signing secrets"
	}
	return "webhook-signature does not match: no v1 signature is the HMAC-SHA256 of webhook-id, webhook-timestamp and the body under this source's signing secret"
}
