package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/dialects"
)

// The destinations as operators see them, shared by `queuebox destinations`
// and the admin API: which are paused (the database says, for every
// replica), which replicas hold a circuit open (each replica reports its
// own), and each one's flow control. Pausing and resuming check the name
// against the configuration, so that a typo pauses nothing.

// DestinationInfo is a configured destination: its name, type and policy.
type DestinationInfo struct {
	Name, Type string
	Policy     actors.DestinationPolicy
}

// DestinationView is one destination in `queuebox destinations list` and
// GET /api/destinations.
type DestinationView struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Configured is false for a destination the configuration no longer
	// has, which is still paused: resume it to remove the pause.
	Configured bool `json:"configured"`
	Paused     bool `json:"paused"`
	// PauseReason is the text given with the pause; Since is when it was
	// paused or last resumed (null when it never was).
	PauseReason string     `json:"pauseReason,omitempty"`
	Since       *time.Time `json:"since"`
	// RateLimit is null without one; MaxConcurrency 0 means none.
	RateLimit      *RateLimitView `json:"rateLimit"`
	MaxConcurrency int            `json:"maxConcurrency"`
	// CircuitBreaker is null when the breaker is off.
	CircuitBreaker *BreakerView `json:"circuitBreaker"`
	// OpenCircuits are the replicas that hold its circuit open now.
	OpenCircuits []CircuitView `json:"openCircuits"`
	// Replica is what the replica that answers sees (the API only): its
	// circuit, the rows it deferred, what waits for its flow control.
	Replica *ReplicaView `json:"replica,omitempty"`
}

// RateLimitView is a rate limit: rows per second per replica, and the
// bucket's size.
type RateLimitView struct {
	PerSecond float64 `json:"perSecond"`
	Burst     int     `json:"burst"`
}

// BreakerView is a circuit breaker's settings.
type BreakerView struct {
	WindowSeconds        float64 `json:"windowSeconds"`
	MinAttempts          int     `json:"minAttempts"`
	ProbeIntervalSeconds float64 `json:"probeIntervalSeconds"`
}

// CircuitView is one replica's open circuit.
type CircuitView struct {
	Replica   string    `json:"replica"`
	OpenedAt  time.Time `json:"openedAt"`
	SeenAt    time.Time `json:"seenAt"`
	LastError string    `json:"lastError"`
}

// ReplicaView is a destination as one replica sees it.
type ReplicaView struct {
	Paused          bool       `json:"paused"`
	CircuitOpen     bool       `json:"circuitOpen"`
	CircuitOpenedAt *time.Time `json:"circuitOpenedAt"`
	CircuitError    string     `json:"circuitError,omitempty"`
	// CircuitOpened and Probes count since the replica started; Deferred
	// the rows it deferred, by reason (paused, circuit, throttled).
	CircuitOpened int64            `json:"circuitOpened"`
	Probes        int64            `json:"probes"`
	Deferred      map[string]int64 `json:"deferred"`
	// Waiting is the rows waiting for the flow control now, Publishing
	// the Publish calls in flight under it, ThrottledSeconds the time
	// deliveries waited for it, in total.
	Waiting          int64   `json:"waiting"`
	Publishing       int64   `json:"publishing"`
	ThrottledSeconds float64 `json:"throttledSeconds"`
}

// Destinations lists the configured destinations (and any paused one the
// configuration no longer has) with their pause and open circuits, in
// name order.
func Destinations(ctx context.Context, d dialects.Destinations, configured []DestinationInfo) ([]DestinationView, error) {
	states, err := d.DestinationStates(ctx)
	if err != nil {
		return nil, err
	}
	circuits, err := d.DestinationCircuits(ctx, actors.CircuitFresh)
	if err != nil {
		return nil, err
	}
	byName := map[string]*DestinationView{}
	var out []*DestinationView
	for _, c := range configured {
		v := &DestinationView{Name: c.Name, Type: c.Type, Configured: true, MaxConcurrency: c.Policy.MaxConcurrency, OpenCircuits: []CircuitView{}}
		if p := c.Policy; p.RatePerSecond > 0 {
			v.RateLimit = &RateLimitView{PerSecond: p.RatePerSecond, Burst: p.Burst}
		}
		if cb := c.Policy.CircuitBreaker; cb.Window > 0 {
			v.CircuitBreaker = &BreakerView{WindowSeconds: cb.Window.Seconds(), MinAttempts: cb.MinAttempts, ProbeIntervalSeconds: cb.ProbeInterval.Seconds()}
		}
		byName[c.Name] = v
		out = append(out, v)
	}
	for _, st := range states {
		v := byName[st.Name]
		if v == nil {
			if !st.Paused {
				continue // resumed, and gone from the configuration
			}
			v = &DestinationView{Name: st.Name, OpenCircuits: []CircuitView{}}
			byName[st.Name] = v
			out = append(out, v)
		}
		since := st.Since.UTC()
		v.Paused, v.PauseReason, v.Since = st.Paused, st.Reason, &since
	}
	for _, c := range circuits {
		if v := byName[c.Destination]; v != nil {
			v.OpenCircuits = append(v.OpenCircuits, CircuitView{Replica: c.Replica, OpenedAt: c.OpenedAt.UTC(), SeenAt: c.SeenAt.UTC(), LastError: c.LastError})
		}
	}
	slices.SortFunc(out, func(a, b *DestinationView) int { return strings.Compare(a.Name, b.Name) })
	views := make([]DestinationView, len(out))
	for i, v := range out {
		views[i] = *v
	}
	return views, nil
}

// replicaView is what an engine's status says of one destination.
func replicaView(s actors.DestinationStatus) *ReplicaView {
	r := &ReplicaView{Paused: s.Paused, CircuitOpen: s.CircuitOpen, CircuitError: s.CircuitError,
		CircuitOpened: s.CircuitOpened, Probes: s.Probes, Deferred: s.Deferred,
		Waiting: s.Waiting, Publishing: s.Publishing, ThrottledSeconds: s.Throttled.Seconds()}
	if s.CircuitOpen {
		at := s.CircuitOpenedAt.UTC()
		r.CircuitOpenedAt = &at
	}
	return r
}

// MaxPauseReason bounds the text given with a pause.
const MaxPauseReason = 1000

// PauseRequest is the body of POST /api/destinations/{name}/pause.
type PauseRequest struct {
	Reason string `json:"reason"`
}

// PauseFromJSON reads a pause request body; an empty body gives no reason.
func PauseFromJSON(r io.Reader) (PauseRequest, error) {
	var req PauseRequest
	dec := json.NewDecoder(io.LimitReader(r, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		return req, &InputError{Reason: "the body is not a JSON object of the pause: " + err.Error(), Fix: `send {"reason": "why it is paused"}, or {} for no reason`}
	}
	return req, nil
}

// PauseDestination pauses a configured destination for every replica: its
// rows wait (no attempt made or counted) until ResumeDestination. The
// input names are the command line's or the API's (input, reasonInput).
// changed is false when it was paused already (its reason is replaced).
func PauseDestination(ctx context.Context, d dialects.Destinations, configured []DestinationInfo, name, reason, input, reasonInput string) (dialects.DestinationState, bool, error) {
	if !slices.ContainsFunc(configured, func(c DestinationInfo) bool { return c.Name == name }) {
		return dialects.DestinationState{}, false, unknownDestination(configured, name, input)
	}
	reason = strings.TrimSpace(reason)
	if n := utf8.RuneCountInString(reason); n > MaxPauseReason {
		return dialects.DestinationState{}, false, &InputError{Input: reasonInput, Reason: fmt.Sprintf("is %d characters long; the most is %d", n, MaxPauseReason), Fix: "say it shorter"}
	}
	return d.DestinationPause(ctx, name, reason)
}

// ResumeDestination resumes a paused destination: a configured one, or one
// the configuration no longer has. changed is false when it was not paused.
func ResumeDestination(ctx context.Context, d dialects.Destinations, configured []DestinationInfo, name, input string) (dialects.DestinationState, bool, error) {
	if !slices.ContainsFunc(configured, func(c DestinationInfo) bool { return c.Name == name }) {
		states, err := d.DestinationStates(ctx)
		if err != nil {
			return dialects.DestinationState{}, false, err
		}
		if !slices.ContainsFunc(states, func(s dialects.DestinationState) bool { return s.Name == name && s.Paused }) {
			return dialects.DestinationState{}, false, unknownDestination(configured, name, input)
		}
	}
	return d.DestinationResume(ctx, name)
}

func unknownDestination(configured []DestinationInfo, name, input string) error {
	names := make([]string, len(configured))
	for i, c := range configured {
		names[i] = c.Name
	}
	slices.Sort(names)
	list := "the configuration defines none"
	if len(names) > 0 {
		list = "the configured ones are " + strings.Join(names, ", ")
	}
	return &unknownDestinationError{&InputError{Input: input, Value: name, Reason: "is not a configured destination", Fix: list + " (`queuebox destinations list` shows them)"}}
}

// unknownDestinationError is an input error that names no destination: the
// API answers it 404.
type unknownDestinationError struct{ *InputError }

func (e *unknownDestinationError) Unwrap() error { return e.InputError }

// failDestination answers a pause or a resume that failed.
func (s *Server) failDestination(w http.ResponseWriter, err error) {
	var unknown *unknownDestinationError
	if errors.As(err, &unknown) {
		s.fail(w, http.StatusNotFound, err.Error())
		return
	}
	s.failInput(w, err)
}

// WriteDestinations writes the destinations as `queuebox destinations list`
// prints them: one line each (state, limits, breaker), then the pauses'
// reasons and the open circuits.
func WriteDestinations(w io.Writer, views []DestinationView, now time.Time) error {
	var b bytes.Buffer
	if len(views) == 0 {
		fmt.Fprintln(&b, "No destination is configured.")
		_, err := w.Write(b.Bytes())
		return err
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTYPE\tSTATE\tRATE LIMIT\tMAX CONCURRENCY\tCIRCUIT BREAKER")
	for _, v := range views {
		typ := v.Type
		if !v.Configured {
			typ = "(not configured)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, typ, stateText(v, now), rateText(v.RateLimit), countText(v.MaxConcurrency), breakerText(v.CircuitBreaker))
	}
	tw.Flush()
	for _, v := range views {
		if v.Paused && v.PauseReason != "" {
			fmt.Fprintf(&b, "\n%s is paused: %s\n", v.Name, v.PauseReason)
		}
		for _, c := range v.OpenCircuits {
			fmt.Fprintf(&b, "\n%s: the circuit of replica %s is open since %s (%s ago); last error: %s\n", v.Name, c.Replica,
				c.OpenedAt.Format(time.RFC3339), ago(now, c.OpenedAt), c.LastError)
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

func stateText(v DestinationView, now time.Time) string {
	var parts []string
	if v.Paused {
		s := "paused"
		if v.Since != nil {
			s += " " + ago(now, *v.Since) + " ago"
		}
		parts = append(parts, s)
	}
	if n := len(v.OpenCircuits); n > 0 {
		s := fmt.Sprintf("circuit open on %d replicas", n)
		if n == 1 {
			s = "circuit open on 1 replica"
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "delivering"
	}
	return strings.Join(parts, "; ")
}

func ago(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "0s"
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

func rateText(r *RateLimitView) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%g/s (burst %d)", r.PerSecond, r.Burst)
}

func countText(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func breakerText(b *BreakerView) string {
	if b == nil {
		return "off"
	}
	secs := func(s float64) string { return time.Duration(s * float64(time.Second)).String() }
	return fmt.Sprintf("%d attempts over %s; a probe every %s", b.MinAttempts, secs(b.WindowSeconds), secs(b.ProbeIntervalSeconds))
}

// DestinationsView is the body of GET /api/destinations.
type DestinationsView struct {
	Destinations []DestinationView `json:"destinations"`
}

// destinations answers GET /api/destinations: the destinations with their
// pauses and open circuits, and what this replica sees of each.
func (s *Server) destinations(w http.ResponseWriter, r *http.Request) {
	if !s.noParams(w, r) {
		return
	}
	views, err := Destinations(r.Context(), s.o.Dialect, s.o.Destinations)
	if err != nil {
		s.dbFailed(w, err)
		return
	}
	if e := s.o.Metrics.engine.Load(); e != nil {
		live := map[string]actors.DestinationStatus{}
		for _, st := range e.Destinations() {
			live[st.Name] = st
		}
		for i := range views {
			if st, ok := live[views[i].Name]; ok {
				views[i].Replica = replicaView(st)
			}
		}
	}
	writeJSON(w, http.StatusOK, DestinationsView{Destinations: views})
}

// PauseView is the answer to a pause or a resume: the destination's state
// after it, and whether the request changed it.
type PauseView struct {
	Name        string     `json:"name"`
	Paused      bool       `json:"paused"`
	PauseReason string     `json:"pauseReason,omitempty"`
	Since       *time.Time `json:"since"`
	Changed     bool       `json:"changed"`
}

func pauseView(st dialects.DestinationState, changed bool) PauseView {
	v := PauseView{Name: st.Name, Paused: st.Paused, PauseReason: st.Reason, Changed: changed}
	if !st.Since.IsZero() {
		since := st.Since.UTC()
		v.Since = &since
	}
	return v
}

func (s *Server) pauseDestination(w http.ResponseWriter, r *http.Request) {
	if !s.jsonBody(w, r) || !s.noParams(w, r) {
		return
	}
	req, err := PauseFromJSON(r.Body)
	if err != nil {
		s.failInput(w, err)
		return
	}
	name := r.PathValue("name")
	st, changed, err := PauseDestination(r.Context(), s.o.Dialect, s.o.Destinations, name, req.Reason, "destination", "reason")
	if err != nil {
		s.failDestination(w, err)
		return
	}
	if changed {
		s.o.Log.Info("admin: destination paused", "destination", name, "reason", st.Reason, "from", r.RemoteAddr)
	}
	writeJSON(w, http.StatusOK, pauseView(st, changed))
}

func (s *Server) resumeDestination(w http.ResponseWriter, r *http.Request) {
	if !s.jsonBody(w, r) || !s.noParams(w, r) {
		return
	}
	if _, err := PauseFromJSON(r.Body); err != nil { // {} or nothing
		s.failInput(w, err)
		return
	}
	name := r.PathValue("name")
	st, changed, err := ResumeDestination(r.Context(), s.o.Dialect, s.o.Destinations, name, "destination")
	if err != nil {
		s.failDestination(w, err)
		return
	}
	if changed {
		s.o.Log.Info("admin: destination resumed", "destination", name, "from", r.RemoteAddr)
	}
	writeJSON(w, http.StatusOK, pauseView(st, changed))
}
