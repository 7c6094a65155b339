package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/migrations"
)

//go:embed page
var pageFS embed.FS

// Options configure the admin listener's handler.
type Options struct {
	Dialect dialects.Dialect
	// Token, when set, is required on every route but /healthz.
	Token   string
	RouteOf RouteOf
	// Routes names every destination of a row's route, for fan-out routes
	// and filters (nil: each route sends to the one RouteOf names).
	Routes Routes
	// FinalStatus names the HTTP statuses each destination takes as final,
	// for the dead groups' replay warnings.
	FinalStatus FinalStatus
	Metrics     *Metrics
	Log         *slog.Logger
	// CountInterval is the shortest time between two counts of the table
	// (DefaultCountInterval when zero); ThroughputStep the chart's step
	// (5 s when zero). Tests shorten both.
	CountInterval  time.Duration
	ThroughputStep time.Duration
	// Version is shown on the page.
	Version string

	// Destinations are the configured destinations, for GET
	// /api/destinations and their pause and resume.
	Destinations []DestinationInfo
	// History: the attempt history is on, and records the replays made
	// through POST /api/replay.
	History bool
	// Outbox names the outbox this handler serves (in /api/stats); State,
	// when set, says whether its engine runs (a relay of several outboxes
	// runs each on its own: bootstrap).
	Outbox string
	State  func() OutboxState
}

// OutboxState is where an outbox's engine stands: Running, or why not.
type OutboxState struct {
	Running bool   `json:"running"`
	State   string `json:"state"`
	Error   string `json:"error,omitempty"`
}

// Server is the admin listener's handler: health, readiness, metrics, the
// JSON API and the web page.
type Server struct {
	o        Options
	sampler  *Sampler
	mux      *http.ServeMux
	draining atomic.Bool
	cookie   string
	// relay is the Relay that serves this handler with others (nil alone).
	relay *Relay

	// What Start began, for Stop to end and wait for.
	startOnce sync.Once
	cancel    context.CancelFunc
	running   sync.WaitGroup
}

// NewServer builds the handler. Nothing is read from the database until
// Start.
func NewServer(o Options) *Server {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.ThroughputStep <= 0 {
		o.ThroughputStep = 5 * time.Second
	}
	if o.Routes == nil {
		o.Routes = TargetsFromRouteOf(o.RouteOf)
	}
	s := &Server{o: o, sampler: newSampler(o.Dialect, o.Metrics, o.RouteOf, o.Log, o.CountInterval)}
	s.sampler.final = o.FinalStatus
	if o.Token != "" {
		sum := sha256.Sum256([]byte("queuebox admin session\x00" + o.Token))
		s.cookie = hex.EncodeToString(sum[:])
	}
	s.routes()
	return s
}

// Start begins sampling the table and recording throughput, until ctx ends
// or Stop. bootstrap.Run calls it once the schema is known to be current; a
// second call does nothing.
func (s *Server) Start(ctx context.Context) {
	s.startOnce.Do(func() {
		ctx, s.cancel = context.WithCancel(ctx)
		s.running.Add(2)
		go func() { defer s.running.Done(); s.sampler.Run(ctx) }()
		go func() { defer s.running.Done(); s.o.Metrics.throughput.run(ctx, s.o.ThroughputStep) }()
	})
}

// Stop ends what Start began and returns once it has ended, so that nothing
// of the server runs after its owner returns. The handler still answers,
// from the last samples. Stop before Start (or twice) does nothing more.
func (s *Server) Stop() {
	s.startOnce.Do(func() {}) // a Start after Stop begins nothing
	if s.cancel != nil {
		s.cancel()
	}
	s.running.Wait()
}

// Draining makes /readyz answer 503: the replica is stopping.
func (s *Server) Draining() { s.draining.Store(true) }

// Sampler is the server's sampler (tests read its snapshot).
func (s *Server) Sampler() *Sampler { return s.sampler }

// ServeHTTP serves every route.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	m.Handle("GET /readyz", s.auth(http.HandlerFunc(s.readyz)))
	metrics := promhttp.HandlerFor(s.o.Metrics.Registry(), promhttp.HandlerOpts{ErrorLog: slogPrinter{s.o.Log}})
	m.Handle("GET /metrics", s.auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.sampler.Demand(r.Context())
		metrics.ServeHTTP(w, r)
	})))
	m.Handle("GET /api/stats", s.auth(http.HandlerFunc(s.stats)))
	m.Handle("GET /api/rows", s.auth(http.HandlerFunc(s.rows)))
	m.Handle("GET /api/rows/{id}", s.auth(http.HandlerFunc(s.row)))
	m.Handle("POST /api/replay", s.auth(http.HandlerFunc(s.replay)))
	m.Handle("GET /api/dead-groups", s.auth(http.HandlerFunc(s.deadGroups)))
	m.Handle("GET /api/blocked-keys", s.auth(http.HandlerFunc(s.blockedKeys)))
	m.Handle("GET /api/destinations", s.auth(http.HandlerFunc(s.destinations)))
	m.Handle("POST /api/destinations/{name}/pause", s.auth(http.HandlerFunc(s.pauseDestination)))
	m.Handle("POST /api/destinations/{name}/resume", s.auth(http.HandlerFunc(s.resumeDestination)))
	m.HandleFunc("POST /login", s.login)
	page, _ := fs.Sub(pageFS, "page")
	files := http.FileServerFS(page)
	m.Handle("GET /{$}", s.auth(files))
	for _, f := range []string{"/app.js", "/style.css"} {
		m.Handle("GET "+f, s.auth(files))
	}
	m.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, http.StatusNotFound, fmt.Sprintf("%s %s is not a route of the admin API; the routes are GET /api/stats, GET /api/rows, POST /api/replay, GET /api/dead-groups, GET /api/blocked-keys, GET /api/destinations, POST /api/destinations/NAME/pause, POST /api/destinations/NAME/resume", r.Method, r.URL.Path))
	})
	s.mux = m
}

// slogPrinter hands promhttp's errors to the log.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("admin: /metrics: " + fmt.Sprint(v...)) }

// auth admits a request with the token (as "Authorization: Bearer" or the
// page's session cookie), or any request when no token is configured. A
// browser that asks for the page without it gets a form to paste the token
// into; everything else a JSON error.
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.o.Token == "" {
			// Without a token the listener is on loopback only. A page of
			// another site that renames itself to 127.0.0.1 (DNS rebinding)
			// still sends its own name: only addresses and localhost pass.
			if !loopbackHost(r.Host) {
				s.fail(w, http.StatusForbidden, fmt.Sprintf("the host %q is not an address or localhost; without admin.token the admin listener answers only requests to 127.0.0.1, [::1] or localhost (set admin.token to use a name)", r.Host))
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		problem := ""
		switch h := r.Header.Get("Authorization"); {
		case h != "":
			scheme, tok, _ := strings.Cut(h, " ")
			switch {
			case !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "":
				problem = "the Authorization header is not \"Bearer <token>\"; send Authorization: Bearer <admin.token>"
			case subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(s.o.Token)) != 1:
				problem = "the token does not match admin.token; send Authorization: Bearer <admin.token>"
			}
		default:
			if c, err := r.Cookie(sessionCookie); err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(s.cookie)) == 1 {
				break
			}
			problem = "this route needs the admin token: send Authorization: Bearer <admin.token>"
		}
		if problem == "" {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="queuebox"`)
		if r.URL.Path == "/" && strings.Contains(r.Header.Get("Accept"), "text/html") {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, loginPage)
			return
		}
		s.fail(w, http.StatusUnauthorized, problem)
	})
}

const sessionCookie = "queuebox_admin"

// loginPage is the answer to a browser without the token: a form that
// posts it to /login, which sets the page's session cookie.
const loginPage = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>QueueBox admin</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font:15px system-ui,sans-serif;margin:4rem auto;max-width:26rem;color:#1d2430}
input{width:100%;padding:.5rem;margin:.5rem 0;box-sizing:border-box}button{padding:.5rem 1rem}</style></head>
<body><h1>QueueBox admin</h1><p>This admin listener needs its token (<code>admin.token</code>).</p>
<form method="post" action="/login"><label>Token <input type="password" name="token" autofocus autocomplete="current-password"></label>
<button type="submit">Open the admin page</button></form></body></html>`

// login checks a token posted by the login form and sets the session
// cookie (HttpOnly, SameSite=Strict: another site can neither read it nor
// make the browser send it).
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.o.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	tok := r.PostFormValue("token")
	if subtle.ConstantTimeCompare([]byte(tok), []byte(s.o.Token)) != 1 {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, strings.Replace(loginPage, "<form", `<p style="color:#b42318">That token does not match admin.token.</p><form`, 1))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.cookie, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	return net.ParseIP(host) != nil
}

// ListenAllowed refuses an address beyond loopback without a token: the
// API replays rows and shows their errors.
func ListenAllowed(addr net.Addr, token string) error {
	tcp, ok := addr.(*net.TCPAddr)
	if ok && tcp.IP.IsLoopback() || token != "" {
		return nil
	}
	return fmt.Errorf("admin.listen: %s is reachable from other machines and admin.token is empty; set admin.token, or listen on 127.0.0.1", addr)
}

// jsonError is the body of every failed API request.
type jsonError struct {
	Error string `json:"error"`
}

func (s *Server) fail(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, jsonError{msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // messages read "Bearer <admin.token>", not \u003c
	_ = enc.Encode(v)
}

// failInput answers a request whose input cannot be used with 400 and the
// filter's message; any other error is the database's (500).
func (s *Server) failInput(w http.ResponseWriter, err error) {
	var ie *InputError
	if errors.As(err, &ie) {
		s.fail(w, http.StatusBadRequest, err.Error())
		return
	}
	s.dbFailed(w, err)
}

func (s *Server) dbFailed(w http.ResponseWriter, err error) {
	s.o.Log.Warn("admin: a request failed", "error", err)
	code := http.StatusInternalServerError
	if errors.Is(err, dialects.ErrUnreachable) {
		code = http.StatusServiceUnavailable
	}
	s.fail(w, code, err.Error())
}

// readyz: 200 when the database answers and the schema is current.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if s.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not ready: the relay is stopping (draining)")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	if reason := s.NotReady(ctx); reason != "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not ready: "+reason)
		return
	}
	fmt.Fprintln(w, "ready")
}

// NotReady says why the outbox is not ready ("" when it is): its database
// does not answer, its schema is not current, or its engine does not run.
func (s *Server) NotReady(ctx context.Context) string {
	if err := s.o.Dialect.Ping(ctx); err != nil {
		if errors.Is(err, dialects.ErrLoginRefused) {
			return err.Error() + "; check the user, the password and the database name in database.url"
		}
		return "the database does not answer: " + err.Error()
	}
	current, err := migrations.Current(ctx, s.o.Dialect)
	switch {
	case err != nil:
		return "the migration history cannot be read: " + err.Error()
	case !current:
		return "the database schema is not current: run `queuebox migrate up`"
	}
	if s.o.State != nil {
		if st := s.o.State(); !st.Running {
			if st.Error != "" {
				return st.State + ": " + st.Error
			}
			return st.State
		}
	}
	return ""
}

// StatsView is the body of GET /api/stats.
type StatsView struct {
	Version string `json:"version"`
	// CountedAt is when the table was last counted (null before the first
	// count); CountSeconds what it took; CountEverySeconds the interval.
	CountedAt         *time.Time                  `json:"countedAt"`
	CountSeconds      float64                     `json:"countSeconds"`
	CountEverySeconds float64                     `json:"countEverySeconds"`
	Rows              map[string]int64            `json:"rows"`
	OtherStates       map[string]int64            `json:"otherStates"`
	Topics            map[string]map[string]int64 `json:"topics"`
	TopicsOmitted     int                         `json:"topicsOmitted"`
	// OldestDuePendingSeconds: how long the oldest row the relay could
	// claim now has waited since it became due. ScheduledLater: pending
	// rows not due yet.
	OldestDuePendingSeconds float64            `json:"oldestDuePendingSeconds"`
	ScheduledLater          int64              `json:"scheduledLater"`
	DeliveriesPerSecond     map[string]float64 `json:"deliveriesPerSecond"`
	Throughput              ThroughputView     `json:"throughput"`
	HeldBackBy              []Writer           `json:"heldBackBy"`
	HeldBackByError         string             `json:"heldBackByError,omitempty"`
	// Inbox is absent before the first count and when the schema has no
	// inbox table.
	Inbox *InboxView `json:"inbox,omitempty"`
	// Wakeups says what wakes this relay when rows arrive, and why.
	Wakeups *WakeupsView `json:"wakeups,omitempty"`
	// Outbox is the outbox these figures are of; Outboxes every outbox of
	// the relay, each as its last count saw it (pick one with ?outbox=).
	Outbox   string            `json:"outbox,omitempty"`
	Outboxes []OutboxBriefView `json:"outboxes,omitempty"`
	// Horizon is what holds the database's horizon back (null before the
	// first read).
	Horizon *HorizonView `json:"horizon,omitempty"`
	// WakeupSlot is where the wake-up slot stands (absent while no relay
	// holds one).
	WakeupSlot *WakeupSlotView `json:"wakeupSlot,omitempty"`
	// Copies counts the copies of fan-out rows per destination and state,
	// from the last count (see Stats.Copies).
	Copies []CopyCountsView `json:"copies"`
	Error  string           `json:"error,omitempty"`
}

// WakeupsView is the wake-up part of GET /api/stats: the kind in use now
// (logical or probe), and the source's status.
type WakeupsView struct {
	Kind string `json:"kind"`
	dialects.WakeupStatus
}

// InboxView is the inbox part of GET /api/stats.
type InboxView struct {
	// Rows counts inbox rows per state, from the last count: received
	// (waiting for the inbox relay), relayed, and any other value found.
	Rows map[string]int64 `json:"rows"`
	// OldestReceivedSeconds is how long the oldest received row had waited
	// at the last count; 0 when none waited.
	OldestReceivedSeconds float64 `json:"oldestReceivedSeconds"`
	// Sources counts the messages each inbox source of this replica
	// handled since it started, per outcome (stored, duplicate, rejected):
	// queuebox_inbox_received_total.
	Sources map[string]map[string]int64 `json:"sources"`
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	if !s.noParams(w, r) {
		return
	}
	s.sampler.Demand(r.Context())
	snap := s.sampler.Snapshot()
	v := StatsView{Version: s.o.Version, Rows: map[string]int64{}, OtherStates: map[string]int64{},
		CountSeconds: snap.CountTook.Seconds(), CountEverySeconds: snap.CountInterval.Seconds(),
		OldestDuePendingSeconds: snap.Pending.OldestDue.Seconds(), ScheduledLater: snap.Pending.ScheduledLater,
		HeldBackBy: snap.Writers, HeldBackByError: snap.WritersErr, Horizon: snap.Horizon, WakeupSlot: snap.WakeupSlot, Error: snap.Err}
	if !snap.CountedAt.IsZero() {
		at := snap.CountedAt.UTC()
		v.CountedAt = &at
	}
	for st, n := range snap.Rows {
		if dialects.State(st).Valid() {
			v.Rows[st] = n
		} else {
			v.OtherStates[st] = n
		}
	}
	v.Topics, v.TopicsOmitted = topTopics(snap.Topics)
	v.Copies = snap.Copies
	if snap.Inbox != nil {
		in := &InboxView{Rows: map[string]int64{}, OldestReceivedSeconds: snap.Inbox.OldestReceived.Seconds(),
			Sources: s.o.Metrics.inboxTotals()}
		for _, st := range inboxStates {
			in.Rows[string(st)] = 0
		}
		for st, n := range snap.Inbox.Rows {
			in.Rows[string(st)] = n
		}
		v.Inbox = in
	}
	v.Throughput = s.o.Metrics.throughput.View()
	v.DeliveriesPerSecond = v.Throughput.DeliveriesPerSecond
	if st, ok := s.o.Metrics.Wakeups(); ok {
		v.Wakeups = &WakeupsView{Kind: st.Kind(), WakeupStatus: st}
	}
	v.Outbox = s.o.Outbox
	if s.relay != nil {
		v.Outboxes = s.relay.briefs()
	}
	writeJSON(w, http.StatusOK, v)
}

// RowView is one row of GET /api/rows.
type RowView struct {
	ID            uuid.UUID `json:"id"`
	Topic         string    `json:"topic"`
	Key           *string   `json:"key"`
	AggregateType *string   `json:"aggregateType"`
	State         string    `json:"state"`
	// Attempt and MaxAttempts are the row's columns: the failed tries so
	// far, and how many failures it may have before it goes dead. Try and
	// MaxTries say the same for people (see Tries): the try running, next
	// or last (attempt + 1), of at most max_attempts + 1.
	Attempt     int       `json:"attempt"`
	MaxAttempts int       `json:"maxAttempts"`
	Try         int       `json:"try"`
	MaxTries    int       `json:"maxTries"`
	Sequence    int64     `json:"sequence"`
	CreatedAt   time.Time `json:"createdAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
	LastError   *string   `json:"lastError"`
	// Route and Destination are where the topic routes to today (a
	// fan-out route's first destination); on a copy, Destination is the
	// copy's.
	Route       string `json:"route"`
	Destination string `json:"destination"`
	// CopyID is set on a copy: one destination's part of a fan-out row,
	// with its own state, tries and last error. ID is then its row's (the
	// id rows show and replay take) and Destination the copy's.
	CopyID *uuid.UUID `json:"copyId,omitempty"`
}

// rowView is a listed row as the API (and `queuebox dead list --json`)
// shows it; routeOf may be nil.
func rowView(l dialects.ListedRow, routeOf RouteOf) RowView {
	v := RowView{ID: l.ID, Topic: l.Topic, Key: l.Key, AggregateType: l.AggregateType, State: string(l.State), Attempt: l.Attempt,
		MaxAttempts: l.MaxAttempts, Try: l.Attempt + 1, MaxTries: l.MaxAttempts + 1, Sequence: l.Sequence,
		CreatedAt: l.CreatedAt.UTC(), UpdatedAt: l.UpdatedAt.UTC(), LastError: l.LastError}
	if routeOf != nil {
		v.Route, v.Destination = routeOf(l.Topic)
	}
	return v
}

// RowsView is the body of GET /api/rows. Next, when not null, is the
// after= of the next page.
type RowsView struct {
	Rows []RowView `json:"rows"`
	Next *string   `json:"next"`
}

// DefaultRowsLimit is the page size of GET /api/rows without limit=.
const DefaultRowsLimit = 100

func (s *Server) rows(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, err := FilterFromQuery(q, ForRows, time.Now(), s.destinationsOf(), "limit", "after")
	if err != nil {
		s.failInput(w, err)
		return
	}
	limit, err := ParseLimit(Query, q.Get("limit"), DefaultRowsLimit)
	if err == nil && len(q["limit"]) > 1 {
		err = &InputError{Input: "limit", Reason: "is given more than once", Fix: "give it once"}
	}
	if err != nil {
		s.failInput(w, err)
		return
	}
	var after *dialects.Cursor
	if len(q["after"]) > 1 {
		s.failInput(w, &InputError{Input: "after", Reason: "is given more than once", Fix: "give it once"})
		return
	}
	if a := q.Get("after"); a != "" {
		c, err := DecodeCursor(a)
		if err != nil {
			s.failInput(w, err)
			return
		}
		after = &c
	}
	out, err := s.listRows(r.Context(), f, q.Get("destination"), after, limit)
	if err != nil {
		s.dbFailed(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// listRows is one page of GET /api/rows: the rows f selects (with a
// destination, those whose topic the routes send to it) and the copies of
// fan-out rows it selects (with a destination, that destination's), merged
// newest update first.
func (s *Server) listRows(ctx context.Context, f dialects.Filter, destination string, after *dialects.Cursor, limit int) (RowsView, error) {
	rowFilter, copyFilter := f, dialects.CopyFilter{Filter: f, Destination: destination}
	if destination != "" {
		rowFilter = RoutedTo(f, destination, s.o.Routes)
	}
	// One more of each says whether more follow.
	rows, _, err := dialects.List(ctx, s.o.Dialect, rowFilter, after, limit+1)
	if err != nil {
		return RowsView{}, err
	}
	copies, err := listCopies(ctx, s.o.Dialect, copyFilter, after, limit+1)
	if err != nil {
		return RowsView{}, err
	}
	rv := make([]RowView, 0, len(rows))
	for _, l := range rows {
		rv = append(rv, rowView(l, s.o.RouteOf))
	}
	cv := make([]RowView, 0, len(copies))
	for _, c := range copies {
		cv = append(cv, copyView(c, s.o.RouteOf))
	}
	page, more := mergeNewest(rv, cv, limit)
	out := RowsView{Rows: page}
	if more && len(page) > 0 {
		last := page[len(page)-1]
		c := EncodeCursor(dialects.Cursor{UpdatedAt: last.UpdatedAt, Sequence: last.Sequence})
		out.Next = &c
	}
	return out, nil
}

// destinationsOf is what the filters of GET /api/rows and POST /api/replay
// check their destination against: the configured destinations.
func (s *Server) destinationsOf() *RoutedDestinations {
	ds := &RoutedDestinations{}
	for _, d := range s.o.Destinations {
		ds.Names = append(ds.Names, d.Name)
	}
	return ds
}

// cursorText is the cursor's encoded form: opaque to clients.
type cursorText struct {
	U time.Time `json:"u"`
	S int64     `json:"s"`
}

// EncodeCursor makes the opaque after= of a listing.
func EncodeCursor(c dialects.Cursor) string {
	b, _ := json.Marshal(cursorText{U: c.UpdatedAt.UTC(), S: c.Sequence})
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeCursor reads an after= that EncodeCursor made.
func DecodeCursor(s string) (dialects.Cursor, error) {
	bad := &InputError{Input: "after", Value: s, Reason: "is not a position this listing returned",
		Fix: `pass the "next" of the previous page as it is, or leave after out to start from the newest row`}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return dialects.Cursor{}, bad
	}
	var c cursorText
	if err := json.Unmarshal(b, &c); err != nil || c.U.IsZero() {
		return dialects.Cursor{}, bad
	}
	return dialects.Cursor{UpdatedAt: c.U, Sequence: c.S}, nil
}

// ReplayView is the body of a POST /api/replay answer: how many rows (and,
// with a destination, copies of it) were put back to pending, and copies
// created by a backfill; with DryRun, how many would be (ReplayResult).
type ReplayView struct {
	ReplayResult
	Destination string `json:"destination,omitempty"`
	DryRun      bool   `json:"dryRun"`
}

func (s *Server) replay(w http.ResponseWriter, r *http.Request) {
	if !s.jsonBody(w, r) {
		return
	}
	if len(r.URL.Query()) > 0 {
		for k := range r.URL.Query() {
			s.fail(w, http.StatusBadRequest, fmt.Sprintf("%s: is not a parameter of this request; POST /api/replay reads its filter from the JSON body", k))
			return
		}
	}
	req, err := ReplayFromJSON(r.Body, time.Now(), s.destinationsOf())
	if err != nil {
		s.failInput(w, err)
		return
	}
	var res ReplayResult
	if req.Destination == "" {
		res.Rows, err = Replay(r.Context(), s.o.Dialect, req.Filter, req.DryRun, s.replayedBy(r))
	} else {
		res, err = ReplayDestination(r.Context(), s.o.Dialect, req.Filter, req.Destination, s.o.Routes, req.DryRun, s.replayedBy(r))
	}
	if err != nil {
		s.dbFailed(w, err)
		return
	}
	if !req.DryRun {
		s.o.Log.Info("admin: rows replayed", "rows", res.Rows, "destination", req.Destination, "copies", res.Copies, "backfilled", res.Backfilled, "from", r.RemoteAddr)
		if res.Rows+res.Copies+res.Backfilled > 0 {
			s.sampler.Kick()
		}
	}
	writeJSON(w, http.StatusOK, ReplayView{ReplayResult: res, Destination: req.Destination, DryRun: req.DryRun})
}

// replayedBy is who replays through r, as the attempt history records it:
// the admin page (a request from the page this listener serves, as its
// Referer says) or the API, and the address the request came from (a
// reverse proxy's, behind one). "" when the history is off.
func (s *Server) replayedBy(r *http.Request) string {
	if !s.o.History {
		return ""
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if ref, err := url.Parse(r.Referer()); err == nil && ref.Host == r.Host && ref.Path == "/" {
		return "the admin page, from " + host
	}
	return "POST /api/replay, from " + host
}

// jsonBody refuses a POST whose body is not sent as JSON. A JSON content
// type keeps other sites out: a browser sends one across sites only after
// asking (CORS), and this listener never agrees.
func (s *Server) jsonBody(w http.ResponseWriter, r *http.Request) bool {
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
		s.fail(w, http.StatusUnsupportedMediaType, fmt.Sprintf("the body must be JSON sent with Content-Type: application/json (got %q)", r.Header.Get("Content-Type")))
		return false
	}
	return true
}

// DeadGroupsView is the body of GET /api/dead-groups.
type DeadGroupsView struct {
	DeadGroups
	CountedAt *time.Time `json:"countedAt"`
}

func (s *Server) deadGroups(w http.ResponseWriter, r *http.Request) {
	if !s.noParams(w, r) {
		return
	}
	s.sampler.Demand(r.Context())
	snap := s.sampler.Snapshot()
	v := DeadGroupsView{DeadGroups: snap.Dead}
	if !snap.CountedAt.IsZero() {
		at := snap.CountedAt.UTC()
		v.CountedAt = &at
	}
	writeJSON(w, http.StatusOK, v)
}

// BlockedKeyView is one key of GET /api/blocked-keys.
type BlockedKeyView struct {
	Key         string    `json:"key"`
	HeadID      uuid.UUID `json:"headId"`
	Topic       string    `json:"topic"`
	Destination string    `json:"destination"`
	Attempt     int       `json:"attempt"`
	MaxAttempts int       `json:"maxAttempts"`
	// NextTry of MaxTries: the try the head waits for (attempt + 1), of at
	// most max_attempts + 1 (see Tries).
	NextTry              int     `json:"nextTry"`
	MaxTries             int     `json:"maxTries"`
	LastError            *string `json:"lastError"`
	WaitingSeconds       float64 `json:"waitingSeconds"`
	NextAttemptInSeconds float64 `json:"nextAttemptInSeconds"`
	// Behind counts the rows waiting behind the head (at most BehindCap).
	Behind int64 `json:"behind"`
}

// BlockedKeysView is the body of GET /api/blocked-keys.
type BlockedKeysView struct {
	// Scanned is the most rows scheduled later that were examined.
	Scanned   int              `json:"scanned"`
	BehindCap int              `json:"behindCap"`
	Keys      []BlockedKeyView `json:"keys"`
	CountedAt *time.Time       `json:"countedAt"`
}

func (s *Server) blockedKeys(w http.ResponseWriter, r *http.Request) {
	if !s.noParams(w, r) {
		return
	}
	s.sampler.Demand(r.Context())
	snap := s.sampler.Snapshot()
	v := BlockedKeysView{Scanned: BlockedKeysScan, BehindCap: dialects.BehindCap, Keys: []BlockedKeyView{}}
	if !snap.CountedAt.IsZero() {
		at := snap.CountedAt.UTC()
		v.CountedAt = &at
	}
	for _, k := range snap.Blocked {
		bv := BlockedKeyView{Key: k.Key, HeadID: k.ID, Topic: k.Topic, Attempt: k.Attempt, MaxAttempts: k.MaxAttempts,
			NextTry: k.Attempt + 1, MaxTries: k.MaxAttempts + 1, LastError: k.LastError,
			WaitingSeconds: k.Waiting.Seconds(), NextAttemptInSeconds: k.NextAttemptIn.Seconds(), Behind: k.Behind}
		if s.o.RouteOf != nil {
			_, bv.Destination = s.o.RouteOf(k.Topic)
		}
		v.Keys = append(v.Keys, bv)
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) noParams(w http.ResponseWriter, r *http.Request) bool {
	for k := range r.URL.Query() {
		s.fail(w, http.StatusBadRequest, fmt.Sprintf("%s: is not a parameter of this request; %s takes none", k, r.URL.Path))
		return false
	}
	return true
}
