package actors

import (
	"time"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/routing"
)

// Observer hears what the engine does, for metrics. The engine calls it from
// its actors and from the goroutines that run their I/O, concurrently: an
// implementation must be safe for concurrent use and must not block, since
// it runs on the delivery path. Embed NopObserver to implement only some of
// it.
type Observer interface {
	// Claimed: a claim statement returned rows (possibly none) after took.
	Claimed(rows int, took time.Duration)
	// Route is called once per route when the engine is built, and once
	// with empty names for the rows that match no route. Every row that
	// route finishes is reported to the result, so that an implementation
	// resolves its labels once and not per row.
	Route(route, destination string) RouteObserver
	// Released: rows handed back to pending untouched (stop, end of the
	// trust window, behind a retried row of their key).
	Released(rows int)
	// LostClaims: rows whose claim the database no longer held; nothing was
	// written for them.
	LostClaims(rows int)
	// Completed: a completion statement wrote the outcomes of rows rows
	// after took.
	Completed(rows int, took time.Duration)
}

// CopiesObserver is an optional part of an Observer: one that implements
// it hears the copies of fan-out rows as their rows' outcomes are written
// (the destinations whose delivery did not end well in the row's pass).
type CopiesObserver interface {
	// CopiesWritten: a completion wrote n copies for destination, of kind.
	CopiesWritten(destination string, kind dialects.CopyKind, n int)
}

// RouteObserver hears the rows of one route.
type RouteObserver interface {
	// Finished: one row's delivery ended with outcome. publish is how long
	// the Publish call that carried it took (0 when the row never reached
	// the sink; the rows of one batch share it). latency runs from the
	// row's created_at to the moment the destination accepted it; it is 0
	// unless the row was delivered.
	Finished(outcome DeliveryOutcome, publish, latency time.Duration)
}

// DeliveryOutcome is how one delivery of a row ended.
type DeliveryOutcome uint8

// The ways a delivery can end.
const (
	// Delivered: the destination accepted the row.
	Delivered DeliveryOutcome = iota + 1
	// Retried: the delivery failed; the row is tried again later.
	Retried
	// Dead: the row will never be delivered.
	Dead
)

func (o DeliveryOutcome) String() string {
	switch o {
	case Delivered:
		return "delivered"
	case Retried:
		return "retry"
	case Dead:
		return "dead"
	}
	return "unknown"
}

// NopObserver hears nothing.
type NopObserver struct{}

// Claimed does nothing.
func (NopObserver) Claimed(int, time.Duration) {}

// Route returns an observer that does nothing.
func (NopObserver) Route(string, string) RouteObserver { return NopObserver{} }

// Released does nothing.
func (NopObserver) Released(int) {}

// LostClaims does nothing.
func (NopObserver) LostClaims(int) {}

// Completed does nothing.
func (NopObserver) Completed(int, time.Duration) {}

// Finished does nothing.
func (NopObserver) Finished(DeliveryOutcome, time.Duration, time.Duration) {}

// routeObservers are the Observer's handles for every route and each of
// its destinations, resolved once when the engine is built; deliveries
// look them up by the route the router returned. units are the routes'
// fan-out units, one per destination, made once too.
type routeObservers struct {
	byRoute  map[*routing.Route]RouteObserver
	units    map[*routing.Route][]*unit
	unrouted RouteObserver
	obs      Observer
}

func newRouteObservers(r *routing.Router, obs Observer) routeObservers {
	ro := routeObservers{byRoute: map[*routing.Route]RouteObserver{}, unrouted: obs.Route("", ""), obs: obs}
	routes := r.Routes()
	for i := range routes {
		rt := &routes[i]
		ro.byRoute[rt] = obs.Route(rt.Name, rt.Destination)
		if !r.FanOut() {
			continue
		}
		if ro.units == nil {
			ro.units = map[*routing.Route][]*unit{}
		}
		for _, dest := range rt.Targets() {
			o := ro.byRoute[rt]
			if dest != rt.Destination {
				o = obs.Route(rt.Name, dest)
			}
			ro.units[rt] = append(ro.units[rt], &unit{route: rt, dest: dest, obs: o})
		}
	}
	return ro
}

// of returns the handle of route (nil: no route matched).
func (ro routeObservers) of(route *routing.Route) RouteObserver {
	if route == nil {
		return ro.unrouted
	}
	if o, ok := ro.byRoute[route]; ok {
		return o
	}
	// A route the router did not list: resolve it now (slower, still right).
	return ro.obs.Route(route.Name, route.Destination)
}

// unit returns the unit of route for dest.
func (ro routeObservers) unit(route *routing.Route, dest string) *unit {
	for _, u := range ro.units[route] {
		if u.dest == dest {
			return u
		}
	}
	return &unit{route: route, dest: dest, obs: ro.to(route, dest)}
}

// to returns the handle of route for dest: what a copy to dest reports to
// (route nil: no route matches the copy's topic now).
func (ro routeObservers) to(route *routing.Route, dest string) RouteObserver {
	for _, u := range ro.units[route] {
		if u.dest == dest {
			return u.obs
		}
	}
	if route != nil && route.Destination == dest {
		return ro.of(route)
	}
	name := ""
	if route != nil {
		name = route.Name
	}
	return ro.obs.Route(name, dest)
}
