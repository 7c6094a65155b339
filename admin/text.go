package admin

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/queuebox/queuebox/dialects"
)

// The text that the command line prints for people (scripts read --json,
// or the API). It lives here, next to what it formats, so that the
// commands in cmd/queuebox only declare flags and wire.

// WriteText writes the status as `queuebox status` prints it: rows per
// state (and any state QueueBox did not write), the oldest due pending
// row's wait, rows scheduled later, the inbox, the copies of fan-out rows
// per destination, the open transactions that hold keyed rows back, and
// dead rows per topic.
func (s Stats) WriteText(w io.Writer) error {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tROWS")
	for _, st := range dialects.States {
		fmt.Fprintf(tw, "%s\t%d\n", st, s.Rows[st])
	}
	for _, st := range s.OtherStateNames() {
		fmt.Fprintf(tw, "%s\t%d\t(not a QueueBox state: written by hand; never claimed, replayed or deleted)\n", st, s.OtherStates[st])
	}
	tw.Flush()
	if s.OldestDue > 0 {
		fmt.Fprintf(&b, "\noldest due pending: %s (the oldest row the relay could take now, waiting since it became due)\n", s.OldestDue.Round(time.Millisecond))
	} else {
		fmt.Fprintf(&b, "\noldest due pending: none is due\n")
	}
	fmt.Fprintf(&b, "scheduled later: %d (pending rows not due yet: retries, rows of a paused destination or an open circuit, rows scheduled ahead)\n", s.ScheduledLater)
	fmt.Fprintf(&b, "inbox: %d received, %d relayed", s.Inbox.Received, s.Inbox.Relayed)
	if s.Inbox.Received > 0 {
		fmt.Fprintf(&b, " (the oldest received row has waited %s for the inbox relay)", s.Inbox.OldestReceived.Round(time.Millisecond))
	}
	fmt.Fprintln(&b)
	writeCopyCounts(&b, s.Copies)
	if len(s.HeldBackBy) > 0 {
		fmt.Fprintln(&b, "\nkeyed rows inserted after these transactions began wait until they commit or roll back:")
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  PID\tOPEN\tSINCE\tSTATE\tAPPLICATION\tQUERY")
		for _, x := range s.HeldBackBy {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", x.PID, time.Duration(x.OpenSeconds*float64(time.Second)).Round(time.Second),
				x.Since.UTC().Format(time.RFC3339), x.State, x.Application, strings.Join(strings.Fields(x.Query), " "))
		}
		tw.Flush()
	}
	if h := s.Horizon; h != nil {
		if x := h.Holder; x != nil && x.OpenSeconds >= 1 {
			fmt.Fprintf(&b, "\nthe database's horizon is held back by a %s", x.Kind)
			if x.PID != 0 {
				fmt.Fprintf(&b, " (pid %d)", x.PID)
			}
			fmt.Fprintf(&b, ", open %s, %s, application %q: vacuum can remove no row version until it ends",
				time.Duration(x.OpenSeconds*float64(time.Second)).Round(time.Second), x.State, x.Application)
			if q := strings.Join(strings.Fields(x.Query), " "); q != "" {
				fmt.Fprintf(&b, "\n  query: %s", q)
			}
			fmt.Fprintln(&b)
		}
		if h.DeadRowVersions >= 0 {
			fmt.Fprintf(&b, "dead row versions in the outbox: %d\n", h.DeadRowVersions)
		}
	}
	if w := s.WakeupSlot; w != nil {
		fmt.Fprintf(&b, "wake-up slot %s: the server keeps %s of WAL for it; its confirmed position is %s behind the server's\n",
			w.Slot, Bytes(w.RetainedBytes), Bytes(w.BehindBytes))
	}
	if topics := s.DeadTopics(); len(topics) > 0 {
		fmt.Fprintln(&b, "\ndead rows per topic:")
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		for _, t := range topics {
			fmt.Fprintf(tw, "  %s\t%d\n", t, s.DeadByTopic[t])
		}
		tw.Flush()
	}
	_, err := w.Write(b.Bytes())
	return err
}

// writeCopyCounts writes the copies of fan-out rows per destination and
// state, when there are any.
func writeCopyCounts(b *bytes.Buffer, copies []CopyCountsView) {
	if len(copies) == 0 {
		return
	}
	fmt.Fprintln(b, "\ncopies of fan-out rows per destination (a destination that did not deliver in its row's pass):")
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  DESTINATION\tPENDING\tPROCESSING\tDELIVERED\tDEAD\tOLDEST DUE PENDING")
	for _, c := range copies {
		oldest := "none due"
		if c.OldestDue > 0 {
			oldest = c.OldestDue.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%s\n", c.Destination, c.Copies[string(dialects.Pending)], c.Copies[string(dialects.Processing)],
			c.Copies[string(dialects.Delivered)], c.Copies[string(dialects.Dead)], oldest)
	}
	tw.Flush()
}

// WriteText writes the list as `queuebox dead list` prints it: one line a
// row or copy, its last error on the same line, and a last line when the
// limit cut the list. DEAD says what is dead: the row (every destination
// of it), or one destination's copy (that destination's part only).
func (l DeadList) WriteText(w io.Writer) error {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tDEAD\tTOPIC\tKEY\tDESTINATION\tTRIES\tUPDATED_AT\tLAST_ERROR")
	copies := 0
	for _, r := range l.Rows {
		key, le, dest := "", "", r.Destination
		if r.Key != nil {
			key = *r.Key
		}
		if r.LastError != nil {
			le = strings.ReplaceAll(*r.LastError, "\n", " ")
		}
		if dest == "" {
			dest = "(no route)"
		}
		what := "row"
		if r.CopyID != nil {
			what = "copy"
			copies++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, what, r.Topic, key, dest, Tries(r.Attempt, r.MaxAttempts), r.UpdatedAt.UTC().Format(time.RFC3339), le)
	}
	tw.Flush()
	if copies > 0 {
		fmt.Fprintln(&b, "copy: the destination's part of a fan-out row is dead, not the row nor its other destinations; replay it with `queuebox replay --destination DESTINATION --id ID`")
	}
	if l.More {
		fmt.Fprintf(&b, "showing %d of more than %d; raise --limit (up to %d) or narrow the filter\n", len(l.Rows), l.Limit, MaxLimit)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// WriteText writes the groups as `queuebox dead groups` prints them: a
// block a group, the largest first, with its id for `queuebox replay
// --group`, and its replay warning when it has one.
func (gs DeadGroups) WriteText(w io.Writer, now time.Time) error {
	var b bytes.Buffer
	of := plural(int(gs.Grouped), "dead row", "dead rows")
	if gs.Grouped >= int64(gs.Window) {
		of = fmt.Sprintf("the newest %d dead rows", gs.Window)
	}
	if gs.CopiesGrouped > 0 {
		copies := plural(int(gs.CopiesGrouped), "dead copy", "dead copies")
		if gs.CopiesGrouped >= int64(gs.Window) {
			copies = fmt.Sprintf("the newest %d dead copies", gs.Window)
		}
		of += " and " + copies + " of fan-out rows"
	}
	switch {
	case len(gs.Groups) == 0:
		fmt.Fprintln(&b, "No dead rows.")
	case gs.Grouped >= int64(gs.Window) || gs.CopiesGrouped >= int64(gs.Window):
		fmt.Fprintf(&b, "%s of %s (older ones show once these are replayed or deleted).\n", plural(len(gs.Groups), "group", "groups"), of)
	default:
		fmt.Fprintf(&b, "%s of %s.\n", plural(len(gs.Groups), "group", "groups"), of)
	}
	for _, g := range gs.Groups {
		dest := g.Destination
		switch {
		case dest == "":
			dest = "(no route)"
		case g.Route != "":
			dest += " (route " + g.Route + ")"
		}
		rows := "rows"
		if g.Rows == 1 {
			rows = "row"
		}
		if g.Copies {
			rows = "dead copies (this destination's part of fan-out rows)"
			if g.Rows == 1 {
				rows = "dead copy (this destination's part of a fan-out row)"
			}
		}
		fmt.Fprintf(&b, "\n%s  %s  %d %s, the newest %s ago\n", g.ID, dest, g.Rows, rows, now.Sub(g.Newest).Round(time.Second))
		errText := g.Error
		if errText == "" {
			errText = "(no error text)"
		}
		fmt.Fprintf(&b, "  error:    %s\n", errText)
		fmt.Fprintf(&b, "  topics:   %s\n", strings.Join(g.Topics, ", "))
		fmt.Fprintf(&b, "  example:  %s (%s)\n", g.Example.ID, g.Example.Topic)
		if g.ReplayWarning != nil {
			fmt.Fprintf(&b, "  warning:  %s.\n", g.ReplayWarning)
		}
		fmt.Fprintf(&b, "  replay:   queuebox replay --group %s\n", g.ID)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// Bytes writes a size as PostgreSQL's pg_size_pretty does: bytes, kB, MB,
// GB or TB, in steps of 1024.
func Bytes(n int64) string {
	if n < 10*1024 {
		return fmt.Sprintf("%d bytes", n)
	}
	f := float64(n)
	for _, unit := range []string{"kB", "MB", "GB"} {
		f /= 1024
		if f < 10*1024 {
			return fmt.Sprintf("%.0f %s", f, unit)
		}
	}
	return fmt.Sprintf("%.0f TB", f/1024)
}

// plural is n with the singular or the plural noun.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
