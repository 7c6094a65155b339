package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
)

// MaxRowAttempts is how many attempts a row's view shows, the newest: a row
// replayed many times has more, and the view says so (MoreAttempts).
const MaxRowAttempts = 100

// AttemptView is one delivery attempt of a row, or a replay of it, as GET
// /api/rows/{id} and `queuebox rows show` show it. A delivery the row tells
// and the history does not record (FromRow: a first try that succeeded,
// which the relay records only with outbox.history.allDeliveries) has its
// try and time from the row, and its duration, destination, status and
// response unknown.
type AttemptView struct {
	// Try is the try it was (1 for the first; a replay starts again at 1);
	// Attempt the same number as the destination saw it (X-Attempt, the
	// span's queuebox.attempt): the tries counted before it, Try - 1. Both
	// are absent on a replay.
	Try     int  `json:"try,omitempty"`
	Attempt *int `json:"attempt,omitempty"`
	// At is when it started, DurationMs how long the destination took (the
	// relay's clock); null on a replay, and when unknown (FromRow), where
	// At is when the delivery was written (the row's updated_at, the
	// database's clock).
	At         time.Time `json:"at"`
	DurationMs *float64  `json:"durationMs"`
	// Outcome is delivered, retry (failed, tried again later), dead, or
	// replayed.
	Outcome     string `json:"outcome"`
	Destination string `json:"destination"`
	// Status is what the destination answered ("HTTP 503 Service
	// Unavailable", a broker's acknowledgement); "" when it did not answer
	// (a refused connection, a time-out).
	Status string `json:"status"`
	// Error is the failure, redacted and cut like last_error; Response an
	// excerpt of the answer's body, redacted and cut the same way.
	Error    string `json:"error"`
	Response string `json:"response"`
	// Probe: the attempt was its destination's circuit probe. Uncounted:
	// it failed and the circuit breaker did not count it, so the row's next
	// try has the same number. Both absent when false.
	Probe     bool `json:"probe,omitempty"`
	Uncounted bool `json:"uncounted,omitempty"`
	// FromRow: no recorded attempt, but the delivery the row tells (see
	// above). Absent when false.
	FromRow bool `json:"fromRow,omitempty"`
	// ReplayedBy, on a replay (outcome replayed), is who or what replayed
	// the row: the count of its tries starts again after it.
	ReplayedBy string `json:"replayedBy,omitempty"`
}

// tryText is the try of an attempt with its marks: "3", "3 (probe)",
// "3 (probe, not counted)", "1 (from the row)"; "-" for a replay.
func (a AttemptView) tryText() string {
	if a.Outcome == dialects.OutcomeReplayed {
		return "-"
	}
	var marks []string
	if a.Probe {
		marks = append(marks, "probe")
	}
	if a.Uncounted {
		marks = append(marks, "not counted")
	}
	if a.FromRow {
		marks = append(marks, "from the row")
	}
	if len(marks) == 0 {
		return fmt.Sprint(a.Try)
	}
	return fmt.Sprintf("%d (%s)", a.Try, strings.Join(marks, ", "))
}

// RowDetailView is the body of GET /api/rows/{id}: the row as GET
// /api/rows shows it, its payload and headers as stored (JSON; a string
// when the column holds text that is not JSON), when it is due, and its
// attempts, oldest first.
type RowDetailView struct {
	RowView
	ScheduledAt time.Time       `json:"scheduledAt"`
	Payload     json.RawMessage `json:"payload"`
	Headers     json.RawMessage `json:"headers"`
	Attempts    []AttemptView   `json:"attempts"`
	// MoreAttempts: the row has more attempts than the MaxRowAttempts
	// newest shown.
	MoreAttempts bool `json:"moreAttempts"`
	// MatchedNoRouteAt is when the row went dead because no route matched
	// its topic, so that nothing was sent; absent otherwise.
	MatchedNoRouteAt *time.Time `json:"matchedNoRouteAt,omitempty"`
	// Destinations are each destination's state, for a row of a fan-out
	// route or a row with copies; absent otherwise (the row's state is its
	// destination's). The attempts carry their destination.
	Destinations []RowDestinationView `json:"destinations,omitempty"`
}

// noRouteError is the last_error the relay writes on a row that no route
// matches (actors, prepare): such a row goes dead without an attempt.
func noRouteError(topic string) string { return fmt.Sprintf("no route matches topic %q", topic) }

// ParseRowID reads a row's id as an operator gives it; input names where
// it came from ("ID", "id").
func ParseRowID(input, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(strings.TrimSpace(s))
	if err != nil {
		return uuid.Nil, &InputError{Input: input, Value: s, Reason: "is not a row id",
			Fix: "give the id column of the row, a UUID such as 0b7e3f4e-5c1d-4a8e-9f3b-2d6c7e8f9a0b, as `queuebox dead list` or GET /api/rows prints it"}
	}
	return id, nil
}

// RowDetail reads one row with its newest attempts and its copies; found
// is false when no row has the id (a row that retention deleted is gone,
// with its attempts). routes (nil: routeOf's one destination) names the
// destinations of the row's route.
func RowDetail(ctx context.Context, d dialects.Dialect, id uuid.UUID, routeOf RouteOf, routes Routes) (RowDetailView, bool, error) {
	r, found, err := d.OutboxRow(ctx, id, MaxRowAttempts)
	if err != nil || !found {
		return RowDetailView{}, found, err
	}
	copies, err := d.CopiesOfRow(ctx, id)
	if err != nil {
		return RowDetailView{}, true, fmt.Errorf("reading the copies of row %s: %w", id, err)
	}
	if routes == nil {
		routes = TargetsFromRouteOf(routeOf)
	}
	v := RowDetailView{RowView: rowView(r.ListedRow, routeOf), ScheduledAt: r.ScheduledAt.UTC(),
		Payload: rawJSON(r.Payload), Headers: rawJSON(r.Headers), Attempts: make([]AttemptView, 0, len(r.Attempts)), MoreAttempts: r.MoreAttempts}
	v.Destinations = rowDestinations(r.ListedRow, routes.RowTargets(r.Row()), copies)
	if r.State == dialects.Dead && r.LastError != nil && *r.LastError == noRouteError(r.Topic) {
		at := r.UpdatedAt.UTC()
		v.MatchedNoRouteAt = &at
	}
	for _, a := range r.Attempts {
		av := AttemptView{Try: a.Try, At: a.At.UTC(), Outcome: a.Outcome, Destination: a.Destination, Status: a.Status,
			Error: a.Error, Response: a.Response, Probe: a.Probe, Uncounted: a.Uncounted, FromRow: a.FromRow, ReplayedBy: a.ReplayedBy}
		if a.Outcome == dialects.OutcomeReplayed {
			av.Try = 0
		} else {
			n := a.Try - 1
			av.Attempt = &n
		}
		if a.Outcome != dialects.OutcomeReplayed && !a.FromRow {
			ms := float64(a.Duration.Microseconds()) / 1000
			av.DurationMs = &ms
		}
		v.Attempts = append(v.Attempts, av)
	}
	return v, true, nil
}

// writeRowDestinations writes each destination's state of a fan-out row:
// its copy's, or the row's for a destination without a copy.
func writeRowDestinations(b *bytes.Buffer, ds []RowDestinationView) {
	if len(ds) == 0 {
		return
	}
	fmt.Fprintln(b, "\ndestinations (each on its own: a copy keeps the state of a destination that did not deliver in the row's pass):")
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  DESTINATION\tSTATE\tTRIES\tDUE\tLAST ERROR")
	for _, d := range ds {
		state, tries, due, le := d.State, "-", "-", "-"
		switch {
		case d.WithRow && d.State == string(dialects.Delivered):
			state = "delivered (with the row)"
		case d.WithRow:
			state += " (with the row: not tried yet)"
		default:
			state += " (copy)"
			tries = Tries(d.Attempt, d.MaxAttempts)
		}
		if d.NotRouted {
			state += ", no longer a destination of the route"
		}
		if d.DueAt != nil {
			due = d.DueAt.Format(time.RFC3339)
		}
		if d.LastError != nil {
			le = strings.ReplaceAll(*d.LastError, "\n", " ")
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", d.Destination, state, tries, due, le)
	}
	tw.Flush()
}

// rawJSON is a column as JSON: itself when it is JSON, else a string.
func rawJSON(s string) json.RawMessage {
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

func (s *Server) row(w http.ResponseWriter, r *http.Request) {
	if !s.noParams(w, r) {
		return
	}
	id, err := ParseRowID("id", r.PathValue("id"))
	if err != nil {
		s.failInput(w, err)
		return
	}
	v, found, err := RowDetail(r.Context(), s.o.Dialect, id, s.o.RouteOf, s.o.Routes)
	if err != nil {
		s.dbFailed(w, err)
		return
	}
	if !found {
		s.fail(w, http.StatusNotFound, fmt.Sprintf("no row has the id %s: it was never inserted, or retention deleted it", id))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// WriteText writes the row as `queuebox rows show` prints it: its columns,
// each destination's state for a fan-out row, its headers and payload
// (indented), then its attempts, one line each, with the error and the
// answer's excerpt under it.
func (v RowDetailView) WriteText(w io.Writer) error {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	opt := func(p *string) string {
		if p == nil {
			return "-"
		}
		return *p
	}
	dest := v.Destination
	if len(v.Destinations) > 0 {
		names := make([]string, 0, len(v.Destinations))
		for _, d := range v.Destinations {
			if !d.NotRouted {
				names = append(names, d.Destination)
			}
		}
		dest = strings.Join(names, ", ")
	}
	if dest == "" {
		dest = "(no route)"
	} else if v.Route != "" {
		dest += " (route " + v.Route + ")"
	}
	fmt.Fprintf(tw, "id\t%s\n", v.ID)
	fmt.Fprintf(tw, "topic\t%s\n", v.Topic)
	fmt.Fprintf(tw, "key\t%s\n", opt(v.Key))
	fmt.Fprintf(tw, "aggregate type\t%s\n", opt(v.AggregateType))
	if v.MatchedNoRouteAt != nil {
		// No try was made: "dead, try 1 of 6" would say one was.
		fmt.Fprintf(tw, "state\tdead: no route matched its topic at %s; nothing was sent\n", v.MatchedNoRouteAt.Format(time.RFC3339))
	} else if len(v.Destinations) > 0 {
		// A fan-out row's tries are its destinations' own.
		fmt.Fprintf(tw, "state\t%s (the row's pass; each destination's state is under destinations)\n", v.State)
	} else {
		fmt.Fprintf(tw, "state\t%s, %s\n", v.State, Tries(v.Attempt, v.MaxAttempts))
	}
	fmt.Fprintf(tw, "destination\t%s\n", dest)
	fmt.Fprintf(tw, "sequence\t%d\n", v.Sequence)
	fmt.Fprintf(tw, "created at\t%s\n", v.CreatedAt.Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "updated at\t%s\n", v.UpdatedAt.Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "scheduled at\t%s\n", v.ScheduledAt.Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "last error\t%s\n", strings.ReplaceAll(opt(v.LastError), "\n", " "))
	tw.Flush()
	writeRowDestinations(&b, v.Destinations)
	for _, part := range []struct {
		name string
		raw  json.RawMessage
	}{{"headers", v.Headers}, {"payload", v.Payload}} {
		fmt.Fprintf(&b, "\n%s:\n", part.name)
		var ind bytes.Buffer
		if json.Indent(&ind, part.raw, "  ", "  ") != nil {
			ind.Reset()
			ind.Write(part.raw)
		}
		fmt.Fprintf(&b, "  %s\n", ind.String())
	}
	switch {
	case len(v.Attempts) == 0 && v.MatchedNoRouteAt != nil:
		fmt.Fprintf(&b, "\nattempts: none: no route matched the topic %q when the relay took the row (%s), so it went dead without one; add a route and replay it\n",
			v.Topic, v.MatchedNoRouteAt.Format(time.RFC3339))
	case len(v.Attempts) == 0:
		fmt.Fprintln(&b, "\nattempts: none recorded (none made yet, the attempt history is off, or its retention deleted them)")
	case v.MoreAttempts:
		fmt.Fprintf(&b, "\nattempts (the newest %d; older ones are not shown):\n", len(v.Attempts))
	default:
		fmt.Fprintf(&b, "\nattempts (%d):\n", len(v.Attempts))
	}
	if len(v.Attempts) > 0 {
		// The table alone through the tabwriter (lines without all the
		// columns would end its column blocks), then each attempt's line
		// followed by its error and answer.
		var tb bytes.Buffer
		tw = tabwriter.NewWriter(&tb, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  TRY\tATTEMPT\tAT\tDURATION\tOUTCOME\tDESTINATION\tSTATUS")
		for _, a := range v.Attempts {
			status := a.Status
			if status == "" {
				status = "-"
			}
			attempt, took, dest := "-", "-", "-"
			if a.Attempt != nil {
				attempt = fmt.Sprint(*a.Attempt)
				dest = a.Destination
			}
			if a.DurationMs != nil {
				took = time.Duration(*a.DurationMs * float64(time.Millisecond)).Round(time.Microsecond).String()
			}
			if a.FromRow {
				took, dest, status = "unknown", "unknown", "unknown"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.tryText(), attempt, a.At.Format(time.RFC3339Nano), took, a.Outcome, dest, status)
		}
		tw.Flush()
		lines := strings.Split(strings.TrimSuffix(tb.String(), "\n"), "\n")
		b.WriteString(lines[0] + "\n")
		for i, a := range v.Attempts {
			b.WriteString(lines[i+1] + "\n")
			if a.Outcome == dialects.OutcomeReplayed {
				fmt.Fprintf(&b, "       replayed by %s; the tries count from 1 again\n", a.ReplayedBy)
			}
			if a.FromRow {
				fmt.Fprintln(&b, "       told by the row, not recorded: AT is when the delivery was written")
			}
			if a.Error != "" {
				fmt.Fprintf(&b, "       error: %s\n", strings.ReplaceAll(a.Error, "\n", " "))
			}
			if a.Response != "" {
				fmt.Fprintf(&b, "       response: %s\n", strings.ReplaceAll(a.Response, "\n", " "))
			}
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}
