package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/admin"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/inbox"
	"github.com/queuebox/queuebox/routing"
)

// adminListener is the admin listener of a running replica.
type adminListener struct {
	server *admin.Relay
	http   *http.Server
	addr   net.Addr
	done   chan struct{}
}

// URL is where the page is.
func (a *adminListener) URL() string { return "http://" + a.addr.String() + "/" }

// startAdmin listens on admin.listen and serves the admin routes. A port
// taken by another process, or an address beyond loopback without a token,
// fails the start. The listener answers /healthz from the start, while the
// relay still waits for the database; /readyz says what it waits for.
// inboxHTTP serves the inbox's HTTP sources at /inbox/, outside the admin
// token: each source checks credentials of its own.
func startAdmin(l *Loaded, relay *admin.Relay, log *slog.Logger, inboxHTTP http.Handler) (*adminListener, error) {
	ln, err := net.Listen("tcp", l.Admin.Listen)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, &ExitError{Code: 1, Err: fmt.Errorf("admin.listen %s: the address is already in use by another process; stop it, or choose another admin.listen (a port of 0 picks a free one)", l.Admin.Listen)}
		}
		return nil, &ExitError{Code: 1, Err: fmt.Errorf("admin.listen %s: cannot listen: %w", l.Admin.Listen, err)}
	}
	// Validation refused this already when the address is written out; a
	// host name that resolves beyond loopback is caught here.
	if err := admin.ListenAllowed(ln.Addr(), l.Admin.Token); err != nil {
		ln.Close()
		return nil, &ExitError{Code: 2, Err: err}
	}
	mux := http.NewServeMux()
	mux.Handle(inbox.Prefix, inboxHTTP)
	mux.Handle("/", relay)
	a := &adminListener{server: relay, addr: ln.Addr(), done: make(chan struct{}),
		http: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}}
	go func() {
		defer close(a.done)
		if err := a.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin listener stopped", "error", err)
		}
	}()
	log.Info("admin listening", "address", a.addr.String(), "page", a.URL(), "token", l.Admin.Token != "")
	return a, nil
}

// adminServer builds the admin handler of one outbox (v is its view).
func adminServer(v *Loaded, d dialects.Dialect, m *admin.Metrics, log *slog.Logger, ro RunOptions, state func() admin.OutboxState) *admin.Server {
	return admin.NewServer(admin.Options{
		Dialect: d, Token: v.Admin.Token, Metrics: m, Log: log, Version: Version, Destinations: DestinationInfos(v),
		CountInterval: ro.AdminCountInterval, ThroughputStep: ro.AdminThroughputStep,
		RouteOf: RouteOf(v), Routes: TargetsOf(v), FinalStatus: FinalStatus(v), History: v.Outbox.History.Enabled,
		Outbox: v.OutboxName, State: state,
	})
}

// RouteOf names the route and the destination of a topic by the
// configured routes ("", "" when none matches); for a fan-out route, its
// destinations, comma-separated. It reads the topic alone: a route's
// filter, which needs the payload, is not run.
func RouteOf(l *Loaded) admin.RouteOf {
	router := l.Compiled.Router
	return func(topic string) (string, string) {
		if r := router.Match(topic); r != nil {
			return r.Name, strings.Join(r.Targets(), ", ")
		}
		return "", ""
	}
}

// TargetsOf tells where the configured routes send rows: by topic, and
// by each row (its filters run) where route filters decide.
func TargetsOf(l *Loaded) admin.Routes { return routes{l.Compiled.Router} }

// routes is admin.Routes over the configured router.
type routes struct{ router *routing.Router }

func (r routes) Targets(topic string) ([][]string, bool) {
	cs := r.router.Candidates(topic)
	sets := make([][]string, len(cs))
	byRow := false
	for i, c := range cs {
		sets[i] = c.Targets()
		// A filter decides, even between routes to the same destinations:
		// a row it fails on goes nowhere.
		byRow = byRow || c.Filter != nil
	}
	return sets, byRow
}

func (r routes) RowTargets(row dialects.Row) []string {
	rt, err := actors.RowRoute(r.router, &row)
	if err != nil || rt == nil {
		return nil // the row cannot be routed: it goes nowhere
	}
	return rt.Targets()
}

// FinalStatus reports the HTTP statuses that an HTTP destination takes as
// final (its nonRetryableStatus), for the dead groups' replay warnings.
func FinalStatus(l *Loaded) admin.FinalStatus {
	return func(destination string, status int) bool {
		d := l.Destinations[destination]
		return d != nil && d.Type == "http" && slices.Contains(d.NonRetryableStatus, status)
	}
}

// close stops the sampler and the listener, giving requests in progress a
// moment, and returns once both have stopped.
func (a *adminListener) close() {
	a.server.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := a.http.Shutdown(ctx); err != nil {
		_ = a.http.Close()
	}
	<-a.done
}

// DestinationInfos lists the configured destinations for the operators'
// views (queuebox destinations, the admin API and page), in name order.
func DestinationInfos(l *Loaded) []admin.DestinationInfo {
	policies := DestinationPolicies(l)
	out := make([]admin.DestinationInfo, 0, len(l.Destinations))
	for name, d := range l.Destinations {
		out = append(out, admin.DestinationInfo{Name: name, Type: d.Type, Policy: policies[name]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// inboxSources lists the configured inbox sources, for their metrics.
func inboxSources(l *Loaded) []string {
	out := make([]string, 0, len(l.Inbox.Sources))
	for name := range l.Inbox.Sources {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
