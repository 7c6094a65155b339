// Package admin is the operator's view of the outbox, shared by the command
// line and the admin listener: which rows to look at (Filter), how many
// rows are in each state (Status), the dead rows and their errors (DeadRows,
// GroupDead), and putting rows back to pending (Replay). A filter selects
// the same rows, and fails with the same message, whether it came from
// command-line flags, a URL query or a JSON body; each message names the
// input as it was written in its source (--state, state=, "states").
//
// The admin listener's handler is Server: /healthz, /readyz, /metrics, the
// JSON API (/api/stats, /api/rows, /api/replay, /api/dead-groups,
// /api/blocked-keys) and the web page, embedded from page/. Metrics hears
// the engine as its Observer; Sampler counts the table on an interval that
// follows the count's cost, so that viewers cost the database nothing.
package admin
