package dialects_test

import (
	"strings"
	"testing"

	"github.com/queuebox/queuebox/dialects"
)

// The publication's name carries the schema, fits PostgreSQL's 63 bytes
// for the longest names that validate, and stays unique when it is cut.
func TestPublicationName(t *testing.T) {
	n := dialects.DefaultNames()
	if got := n.Publication(); got != "outbox_wakeups" {
		t.Errorf("no schema: %q", got)
	}
	n.Schema, n.Outbox = "Messaging", "events"
	if got := n.Publication(); got != "Messaging_events_wakeups" {
		t.Errorf("a schema: %q", got)
	}
	long := func(schemaEnd string) dialects.Names {
		return dialects.Names{Schema: strings.Repeat("s", 62) + schemaEnd, Outbox: strings.Repeat("o", 40), Inbox: "inbox"}
	}
	a, b := long("a"), long("b")
	if ps := a.Validate(); len(ps) > 0 {
		t.Fatalf("the longest names do not validate: %v", ps)
	}
	pa, pb := a.Publication(), b.Publication()
	if len(pa) > dialects.MaxIdentifierLength || len(pb) > dialects.MaxIdentifierLength {
		t.Errorf("%q (%d bytes) and %q (%d bytes) are longer than %d", pa, len(pa), pb, len(pb), dialects.MaxIdentifierLength)
	}
	if pa == pb {
		t.Errorf("two schemas that differ in their last letter share the publication %q", pa)
	}
}

// A source that never nudges says why, and its channels never fire.
func TestNoWakeups(t *testing.T) {
	w := dialects.NoWakeups(dialects.WakeupsAuto, "SQL Server has no logical replication")
	st := w.Status()
	if st.State != dialects.WakeupsOff || st.Listening() || st.Kind() != "probe" || st.Reason == "" || st.Mode != dialects.WakeupsAuto {
		t.Errorf("status: %+v", st)
	}
	select {
	case <-w.Outbox():
		t.Error("an outbox nudge")
	case <-w.Inbox():
		t.Error("an inbox nudge")
	default:
	}
}
