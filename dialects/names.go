package dialects

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// OutboxColumns are the logical column names of the outbox table, in the
// order of the seed page.
var OutboxColumns = []string{
	"id", "topic", "key", "payload", "headers", "aggregate_type", "state",
	"attempt", "max_attempts", "scheduled_at", "created_at", "updated_at",
	"claimed_at", "claim_token", "lease_expires_at", "last_error", "sequence",
}

// InboxColumns are the logical column names of the inbox table.
var InboxColumns = []string{
	"id", "source", "message_id", "topic", "aggregate_type", "aggregate_id",
	"payload", "headers", "state", "received_at", "relayed_at", "sequence",
}

// MaxIdentifierLength is the longest identifier both databases accept
// (PostgreSQL cuts names at 63 bytes).
const MaxIdentifierLength = 63

// longestDerivedSuffix is the longest suffix added to a table name to name
// one of its objects ("idx_" prefix included).
var longestDerivedSuffix = len("idx_") + len("_processing_claimed")

var identifierRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Names are the physical names of QueueBox's tables and columns.
type Names struct {
	// Schema qualifies every object; "" means the connection's default.
	Schema string
	Outbox string
	Inbox  string
	// OutboxColumns and InboxColumns map logical to physical names; a
	// logical name that is absent maps to itself.
	OutboxColumns map[string]string
	InboxColumns  map[string]string
}

// DefaultNames are the names of the seed page.
func DefaultNames() Names { return Names{Outbox: "outbox", Inbox: "inbox"} }

// Col returns the physical name of a logical outbox column.
func (n Names) Col(logical string) string { return mapped(n.OutboxColumns, logical) }

// InboxCol returns the physical name of a logical inbox column.
func (n Names) InboxCol(logical string) string { return mapped(n.InboxColumns, logical) }

func mapped(m map[string]string, logical string) string {
	if p, ok := m[logical]; ok && p != "" {
		return p
	}
	return logical
}

// Sequence is the name of the outbox sequence (outbox_sequence_seq).
func (n Names) Sequence() string { return n.Outbox + "_sequence_seq" }

// InboxSequence is the name of the inbox sequence.
func (n Names) InboxSequence() string { return n.Inbox + "_sequence_seq" }

// Index names an index of the outbox table the way the seed page does:
// Index("pending_scheduled") is idx_outbox_pending_scheduled.
func (n Names) Index(what string) string { return "idx_" + n.Outbox + "_" + what }

// InboxIndex names an index of the inbox table.
func (n Names) InboxIndex(what string) string { return "idx_" + n.Inbox + "_" + what }

// Object names a helper object of the outbox table (trigger, function, lock
// table, history table): Object("xid_first") is outbox_xid_first.
func (n Names) Object(what string) string { return n.Outbox + "_" + what }

// Problem is one thing wrong with a set of names: the configuration key it
// comes from and the reason.
type Problem struct {
	Key    string
	Reason string
}

// Validate checks every name and returns one problem per fault.
func (n Names) Validate() []Problem {
	var ps []Problem
	check := func(key, name string, maxLen int) {
		switch {
		case name == "":
			ps = append(ps, Problem{key, "must not be empty"})
		case !identifierRE.MatchString(name):
			ps = append(ps, Problem{key, fmt.Sprintf("%q is not a valid identifier: use letters, digits and underscores, starting with a letter or underscore", name)})
		case len(name) > maxLen:
			ps = append(ps, Problem{key, fmt.Sprintf("%q is %d characters long; the limit is %d", name, len(name), maxLen)})
		}
	}
	if n.Schema != "" {
		check("database.schema", n.Schema, MaxIdentifierLength)
	}
	// The table name is part of its index and sequence names, which must fit too.
	tableMax := MaxIdentifierLength - longestDerivedSuffix
	check("database.outboxTableName", n.Outbox, tableMax)
	check("database.inboxTableName", n.Inbox, tableMax)
	if n.Outbox != "" && strings.EqualFold(n.Outbox, n.Inbox) {
		ps = append(ps, Problem{"database.inboxTableName", fmt.Sprintf("%q is also the outbox table's name; the two tables need different names", n.Inbox)})
	}
	ps = append(ps, validateMapping("database.columnMapping.outbox", n.OutboxColumns, OutboxColumns)...)
	ps = append(ps, validateMapping("database.columnMapping.inbox", n.InboxColumns, InboxColumns)...)
	return ps
}

func validateMapping(key string, m map[string]string, logical []string) []Problem {
	var ps []Problem
	known := map[string]bool{}
	for _, l := range logical {
		known[l] = true
	}
	logicals := make([]string, 0, len(m))
	for l := range m {
		logicals = append(logicals, l)
	}
	sort.Strings(logicals)
	for _, l := range logicals {
		p := m[l]
		k := key + "." + l
		if !known[l] {
			ps = append(ps, Problem{k, fmt.Sprintf("%q is not a column of the table; the columns are %s", l, strings.Join(logical, ", "))})
			continue
		}
		switch {
		case p == "":
			ps = append(ps, Problem{k, "must not be empty; leave the column out to keep its name"})
		case !identifierRE.MatchString(p):
			ps = append(ps, Problem{k, fmt.Sprintf("%q is not a valid identifier: use letters, digits and underscores, starting with a letter or underscore", p)})
		case len(p) > MaxIdentifierLength:
			ps = append(ps, Problem{k, fmt.Sprintf("%q is longer than %d characters", p, MaxIdentifierLength)})
		}
	}
	// Two logical columns must not land on one physical name.
	byPhysical := map[string][]string{}
	for _, l := range logical {
		p := strings.ToLower(mapped(m, l))
		byPhysical[p] = append(byPhysical[p], l)
	}
	for _, l := range logical {
		p := strings.ToLower(mapped(m, l))
		if ls := byPhysical[p]; len(ls) > 1 && ls[0] == l {
			ps = append(ps, Problem{key, fmt.Sprintf("columns %s all map to %q; every column needs its own name", strings.Join(ls, " and "), p)})
		}
	}
	return ps
}
