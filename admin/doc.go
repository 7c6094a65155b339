// Package admin is the operator's view of the outbox: which rows to look
// at (Filter), how many rows are in each state (Status), the dead rows
// and their errors (DeadRows), and putting rows back to pending (Replay).
//
// The command line uses it today; the admin HTTP API (GET /api/stats,
// GET /api/rows, POST /api/replay) will use the same functions, so that a
// filter selects the same rows, and fails with the same message, whether it
// came from command-line flags, a URL query or a JSON body. Each message
// names the input as it was written in its source (--state, state=,
// "states"). The admin listener, the metrics and the web page will live
// here too.
package admin
