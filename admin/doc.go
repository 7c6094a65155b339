// Package admin is the operator's view of the outbox, shared by the command
// line and the admin listener.
//
// # What both share
//
// Which rows to look at (Filter), how many rows are in each state (Status),
// the dead rows and their errors (DeadRows, GroupDead), and putting rows
// back to pending (Replay). Each group of dead rows has an id (GroupID)
// that the page, the API and `queuebox replay --group` share, and a
// ReplayWarning when a replay would meet the same failure at once (no
// route; a status its destination takes as final). A row's tries read
// "try n of m" wherever it is shown (Tries). A filter selects the same
// rows, and fails with the same message, whether it came from command-line
// flags, a URL query or a JSON body; each message names the input as it
// was written in its source (--state, state=, "states"). text.go formats
// what the commands print for people (Stats.WriteText, DeadList.WriteText,
// DeadGroups.WriteText), so that cmd/queuebox only declares flags and
// wires. The destinations, their pauses and the
// circuits replicas hold open are shared the same way (destinations.go:
// Destinations, PauseDestination, ResumeDestination, WriteDestinations);
// the metrics of each destination are read from the engine at each scrape
// (destmetrics.go). The copies of fan-out rows, one destination's part of a
// row each, show wherever rows do (copies.go): a row's detail lists each
// destination's state, dead list and the groups list dead copies, Status
// counts them per destination, and ReplayDestination replays one
// destination's part (its copies, and a backfill of delivered rows).
//
// # The admin listener's routes
//
// Server is the listener's handler (package bootstrap listens and mounts
// it): GET /healthz (the process runs), GET /readyz (the database answers,
// the schema is current, the relay is not stopping), GET /metrics
// (Prometheus), the JSON API (GET /api/stats, GET /api/rows, POST
// /api/replay, GET /api/dead-groups, GET /api/blocked-keys, GET
// /api/destinations, POST /api/destinations/{name}/pause and /resume),
// POST /login,
// and the web page, embedded from page/. Any other /api/ path answers 404
// with the list of routes. The inbox's HTTP sources share the listener at
// /inbox/, outside this handler and its token: each source checks
// credentials of its own.
//
// A relay of several outboxes has one Server per outbox, each with its own
// sampler, behind one Relay (relay.go): /readyz lists every outbox,
// /metrics is one registry whose series carry an outbox label
// (Metrics.ForOutbox), and every other route is the outbox that ?outbox=
// names (the first without it). A relay of one outbox goes through a Relay
// too, and answers as its Server.
//
// # The token and loopback
//
// The API shows rows' errors and replays rows, so who may reach it matters:
//
//   - With admin.token set, every route but /healthz needs it, as
//     "Authorization: Bearer <token>" or as the page's session cookie, which
//     POST /login sets from a form (HttpOnly, SameSite=Strict, holding a
//     hash of the token, not the token). Any bound address is then allowed.
//   - Without a token, the listener must be bound to a loopback address
//     (ListenAllowed; validation refuses a written-out address already, and
//     bootstrap checks the address a host name resolved to): anyone on
//     another machine could otherwise replay rows. On loopback only
//     processes of the same machine reach it.
//   - Without a token, a request must also name its host as an IP address
//     or localhost (403 otherwise). A page of another site that points its
//     own name at 127.0.0.1 (DNS rebinding) still sends its own name, and
//     is refused. POST /api/replay takes only application/json, which a
//     page of another site cannot send without the listener's consent.
//
// # The sampler
//
// Metrics hears the engine as its Observer (deliveries, retries, dead rows,
// latencies, mailbox lengths). The table itself is read by one Sampler, so
// that any number of viewers costs the database nothing more: it counts
// rows per state and topic only while someone reads the counts (the page,
// the API, a /metrics scrape), on an interval that follows the count's own
// cost (CountCostFactor times the last count's duration, between the
// minimum interval and MaxCountInterval), and reads the cheap figures (the
// oldest due row, the open transactions) every FastInterval. Server.Start
// starts it and the throughput recorder; Server.Stop ends both and waits
// for them.
package admin
