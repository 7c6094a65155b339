package postgres

import (
	"encoding/json"
	"slices"
	"testing"
)

// A stream's set names every publication once, quoted (capitals and
// quotes survive), and knows which outbox and channel each table is.
func TestStreamSetOfTwoOutboxes(t *testing.T) {
	a := outboxWake{Pub: "a_outbox_wakeups", Pauses: "a_outbox_pauses", Outbox: [2]string{"a", "outbox"}, Inbox: [2]string{"a", "inbox"}, Table: [2]string{"a", "destinations"}}
	b := outboxWake{Pub: `B'q_outbox_wakeups`, Outbox: [2]string{"B'q", "outbox"}}
	s := newStreamSet(map[string]outboxWake{a.Pub: a, b.Pub: b})
	if want := []string{"B'q_outbox_wakeups", "a_outbox_pauses", "a_outbox_wakeups"}; !slices.Equal(s.pubs, want) {
		t.Fatalf("publications %q, want %q", s.pubs, want)
	}
	if got, want := s.publicationNames(), `publication_names '"B''q_outbox_wakeups","a_outbox_pauses","a_outbox_wakeups"'`; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
	for r, want := range map[relation]target{
		{"a", "outbox"}:       {a.Pub, fwdOutbox},
		{"a", "inbox"}:        {a.Pub, fwdInbox},
		{"a", "destinations"}: {a.Pub, fwdPauses},
		{"B'q", "outbox"}:     {b.Pub, fwdOutbox},
	} {
		if got := s.targets[r]; len(got) != 1 || got[0] != want {
			t.Errorf("%v goes to %v, want %v", r, got, want)
		}
	}
	if got := s.targets[relation{"B'q", ""}]; got != nil {
		t.Errorf("an outbox without an inbox has an inbox target: %v", got)
	}
}

// An announcement survives its trip as JSON; one without an outbox table,
// or with a pauses publication but no table, is refused.
func TestWakeAnnouncements(t *testing.T) {
	w := outboxWake{Pub: "s_outbox_wakeups", Pauses: "s_outbox_pauses", Outbox: [2]string{"s", "outbox"}, Table: [2]string{"s", "destinations"}}
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := parseWake(string(b)); !ok || got != w {
		t.Fatalf("parsed %+v (%v), want %+v", got, ok, w)
	}
	for _, bad := range []string{`h`, `{"p":"x"}`, `{"p":"x","q":"y","o":["s","t"]}`, `{"o":["s","t"]}`} {
		if _, ok := parseWake(bad); ok {
			t.Errorf("%s was taken for an announcement", bad)
		}
	}
}

// The stream grows for an outbox that is new or announced differently, not
// for one that went away.
func TestStreamGrows(t *testing.T) {
	a := outboxWake{Pub: "a", Outbox: [2]string{"s", "a"}}
	b := outboxWake{Pub: "b", Outbox: [2]string{"s", "b"}}
	b2 := b
	b2.Pauses, b2.Table = "p", [2]string{"s", "d"}
	asked := map[string]outboxWake{"a": a, "b": b}
	for _, c := range []struct {
		desired map[string]outboxWake
		grows   bool
	}{
		{map[string]outboxWake{"a": a}, false},
		{map[string]outboxWake{"a": a, "b": b}, false},
		{map[string]outboxWake{"a": a, "b": b2}, true},
		{map[string]outboxWake{"a": a, "b": b, "c": {Pub: "c"}}, true},
	} {
		if got := grows(asked, c.desired); got != c.grows {
			t.Errorf("grows(%v, %v) = %v", asked, c.desired, got)
		}
	}
}
