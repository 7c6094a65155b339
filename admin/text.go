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
// row's wait, rows scheduled later, the inbox, the open transactions that
// hold keyed rows back, and dead rows per topic.
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
		fmt.Fprintf(&b, "\noldest due pending: %s (waiting since it became due)\n", s.OldestDue.Round(time.Millisecond))
	} else {
		fmt.Fprintf(&b, "\noldest due pending: none is due\n")
	}
	fmt.Fprintf(&b, "scheduled later: %d (pending rows not due yet: retries and rows scheduled ahead)\n", s.ScheduledLater)
	fmt.Fprintf(&b, "inbox: %d received, %d relayed", s.Inbox.Received, s.Inbox.Relayed)
	if s.Inbox.Received > 0 {
		fmt.Fprintf(&b, " (the oldest received row has waited %s for the inbox relay)", s.Inbox.OldestReceived.Round(time.Millisecond))
	}
	fmt.Fprintln(&b)
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

// WriteDeadRows writes dead rows as `queuebox dead list` prints them: one
// line each, its last error on the same line.
func WriteDeadRows(w io.Writer, rows []dialects.ListedRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTOPIC\tKEY\tATTEMPT\tUPDATED_AT\tLAST_ERROR")
	for _, r := range rows {
		key, le := "", ""
		if r.Key != nil {
			key = *r.Key
		}
		if r.LastError != nil {
			le = strings.ReplaceAll(*r.LastError, "\n", " ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Topic, key, r.Attempt, r.UpdatedAt.UTC().Format(time.RFC3339), le)
	}
	return tw.Flush()
}
