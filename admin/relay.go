package admin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Relay serves the admin routes of a replica that relays one outbox or
// several: one Server per outbox, each with its own sampler, and one
// metrics registry (Metrics.ForOutbox).
//
//   - /healthz and /metrics are the replica's: /metrics carries every
//     outbox's series, told apart by their outbox label.
//   - /readyz reports every outbox, one line each; it answers 200 while at
//     least one outbox is ready (ReadyAll: only while all are), so that an
//     outbox whose database is away does not take the others' inbox and
//     admin traffic with it. With one outbox it answers as that outbox's
//     Server does.
//   - Every other route is one outbox's: the one ?outbox=NAME names, or the
//     first by name without it. GET /api/stats lists every outbox too, and
//     the page offers them to pick from. A destination's pause or resume
//     without ?outbox= is written to every outbox's database, as the
//     command line's.
type Relay struct {
	names    []string
	servers  map[string]*Server
	readyAll bool
}

// NewRelay serves servers (in the order given: the first is the one a
// request without ?outbox= sees). readyAll makes /readyz need every
// outbox ready.
func NewRelay(servers []*Server, readyAll bool) *Relay {
	r := &Relay{servers: map[string]*Server{}, readyAll: readyAll}
	for _, s := range servers {
		r.names = append(r.names, s.o.Outbox)
		r.servers[s.o.Outbox] = s
		s.relay = r
	}
	return r
}

// Start starts every outbox's sampling (Server.Start); Stop ends it.
func (r *Relay) Start(ctx context.Context) {
	for _, n := range r.names {
		r.servers[n].Start(ctx)
	}
}

// Server is the handler of one outbox (nil when there is none of that name).
func (r *Relay) Server(outbox string) *Server { return r.servers[outbox] }

// Stop stops what Start started, and returns once it has stopped.
func (r *Relay) Stop() {
	for _, n := range r.names {
		r.servers[n].Stop()
	}
}

// Draining makes /readyz answer 503: the replica is stopping.
func (r *Relay) Draining() {
	for _, n := range r.names {
		r.servers[n].Draining()
	}
}

func (r *Relay) first() *Server { return r.servers[r.names[0]] }

func (r *Relay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	switch req.URL.Path {
	case "/healthz", "/login":
		r.first().ServeHTTP(w, req)
		return
	case "/readyz":
		if len(r.names) == 1 {
			r.first().ServeHTTP(w, req)
			return
		}
		r.first().auth(http.HandlerFunc(r.readyz)).ServeHTTP(w, req)
		return
	case "/metrics":
		// Every outbox's counts are fresh enough for a scrape; the
		// registry is one.
		for _, n := range r.names[1:] {
			r.servers[n].sampler.Demand(req.Context())
		}
		r.first().ServeHTTP(w, req)
		return
	}
	q := req.URL.Query()
	vals, given := q["outbox"]
	if !given && len(r.names) > 1 && req.Method == http.MethodPost && destinationAction.MatchString(req.URL.Path) {
		r.everyOutbox(w, req)
		return
	}
	if !given && len(r.names) > 1 && req.Method == http.MethodPost && req.URL.Path == "/api/replay" {
		// A replay acts on one outbox's rows: the first by name is not a
		// default a script written for one outbox should fall into.
		r.first().auth(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			r.first().fail(w, http.StatusBadRequest, fmt.Sprintf("outbox: this relay has several outboxes (%s) and a replay acts on the rows of one; name it with ?outbox=NAME", strings.Join(r.names, ", ")))
		})).ServeHTTP(w, req)
		return
	}
	s := r.first()
	if given {
		if len(vals) > 1 {
			s.fail(w, http.StatusBadRequest, "outbox: is given more than once; give it once")
			return
		}
		if s = r.servers[vals[0]]; s == nil {
			r.first().fail(w, http.StatusBadRequest, fmt.Sprintf("outbox: %q is not an outbox of this relay; its outboxes are %s", vals[0], strings.Join(r.names, ", ")))
			return
		}
		q.Del("outbox")
		u := *req.URL
		u.RawQuery = q.Encode()
		req = req.Clone(req.Context())
		req.URL = &u
	}
	s.ServeHTTP(w, req)
}

// destinationAction is the path of a destination's pause or resume.
var destinationAction = regexp.MustCompile(`^/api/destinations/[^/]+/(pause|resume)$`)

// everyOutbox pauses or resumes a destination in every outbox's database,
// as `queuebox destinations pause` does without --outbox: a relay holds a
// destination while any of its outboxes' databases says it is paused, so
// a pause in one database alone would hold it, and a resume in one alone
// would not release it. It answers with the first outbox's answer, or with
// the first that failed.
func (r *Relay) everyOutbox(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, 1<<20))
	if err != nil {
		r.first().fail(w, http.StatusBadRequest, "the body could not be read: "+err.Error())
		return
	}
	var answer *bufferedAnswer
	for _, n := range r.names {
		one := req.Clone(req.Context())
		one.Body = io.NopCloser(bytes.NewReader(body))
		a := &bufferedAnswer{header: http.Header{}, code: http.StatusOK}
		r.servers[n].ServeHTTP(a, one)
		if answer == nil || (answer.code < 300 && a.code >= 300) {
			answer = a
		}
	}
	for k, v := range answer.header {
		w.Header()[k] = v
	}
	w.WriteHeader(answer.code)
	_, _ = w.Write(answer.body.Bytes())
}

// bufferedAnswer keeps an answer for everyOutbox to choose from.
type bufferedAnswer struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (a *bufferedAnswer) Header() http.Header         { return a.header }
func (a *bufferedAnswer) Write(b []byte) (int, error) { return a.body.Write(b) }
func (a *bufferedAnswer) WriteHeader(code int)        { a.code = code }

// readyz reports each outbox's readiness, read at once.
func (r *Relay) readyz(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if r.first().draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not ready: the relay is stopping (draining)")
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), 3*time.Second)
	defer cancel()
	reasons := make([]string, len(r.names))
	var wg sync.WaitGroup
	for i, n := range r.names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reasons[i] = r.servers[n].NotReady(ctx)
		}()
	}
	wg.Wait()
	ready := 0
	var b strings.Builder
	for i, n := range r.names {
		if reasons[i] == "" {
			ready++
			fmt.Fprintf(&b, "outbox %s: ready\n", n)
		} else {
			fmt.Fprintf(&b, "outbox %s: not ready: %s\n", n, reasons[i])
		}
	}
	ok := ready > 0 && (!r.readyAll || ready == len(r.names))
	head := fmt.Sprintf("ready: %d of %d outboxes", ready, len(r.names))
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		head = "not " + head
		if r.readyAll {
			head += " (admin.ready: all needs every one)"
		}
	}
	fmt.Fprintln(w, head)
	fmt.Fprint(w, b.String())
}

// OutboxBriefView is one outbox in GET /api/stats's outboxes: its engine's
// state and its last count.
type OutboxBriefView struct {
	Name  string `json:"name"`
	Query string `json:"query"`
	OutboxState
	CountedAt               *time.Time       `json:"countedAt"`
	Rows                    map[string]int64 `json:"rows"`
	OldestDuePendingSeconds float64          `json:"oldestDuePendingSeconds"`
	CountError              string           `json:"countError,omitempty"`
}

// briefs describes every outbox from its last count (no database read),
// and asks each outbox's sampler to go on counting: the picker shows
// every outbox's counts, not only those of the outbox the reader shows.
func (r *Relay) briefs() []OutboxBriefView {
	out := make([]OutboxBriefView, 0, len(r.names))
	for _, n := range r.names {
		s := r.servers[n]
		s.sampler.Want()
		snap := s.sampler.Snapshot()
		b := OutboxBriefView{Name: n, Query: "outbox=" + url.QueryEscape(n), Rows: map[string]int64{},
			OldestDuePendingSeconds: snap.Pending.OldestDue.Seconds(), CountError: snap.Err}
		b.Running, b.State = true, "running"
		if s.o.State != nil {
			b.OutboxState = s.o.State()
		}
		if !snap.CountedAt.IsZero() {
			at := snap.CountedAt.UTC()
			b.CountedAt = &at
		}
		for st, c := range snap.Rows {
			b.Rows[st] = c
		}
		out = append(out, b)
	}
	return out
}
