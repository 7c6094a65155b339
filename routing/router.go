package routing

// Route sends rows whose topic matches Pattern (and, with a Filter, whose
// payload it accepts) to Destination, or with Destinations to each of
// several.
type Route struct {
	Name    string
	Pattern *Pattern
	// Destination is the route's destination; with Destinations (a
	// fan-out), their first.
	Destination string
	// Destinations are a fan-out route's destinations, two or more, in
	// configuration order; nil for a route to one destination.
	Destinations []string
	// Filter, when set, must accept the row for the route to match.
	Filter *Filter
	// Transform is nil when the payload is sent as it is.
	Transform *Transform
}

// FanOut reports whether the route sends each row to several destinations.
func (r *Route) FanOut() bool { return len(r.Destinations) > 1 }

// Targets are the destinations the route sends each row to.
func (r *Route) Targets() []string {
	if len(r.Destinations) > 0 {
		return r.Destinations
	}
	return []string{r.Destination}
}

// Sends reports whether the route sends rows to destination.
func (r *Route) Sends(destination string) bool {
	for _, d := range r.Targets() {
		if d == destination {
			return true
		}
	}
	return false
}

// Router holds the routes in configuration order; the first match wins.
type Router struct {
	routes  []Route
	filters bool
	fanOut  bool
}

// NewRouter returns a router over routes, in order.
func NewRouter(routes []Route) *Router {
	r := &Router{routes: routes}
	for i := range routes {
		r.filters = r.filters || routes[i].Filter != nil
		r.fanOut = r.fanOut || routes[i].FanOut()
	}
	return r
}

// Match returns the first route whose pattern matches topic, or nil,
// without looking at filters: what a topic is routed to when no payload is
// at hand (the admin page's topic counts).
func (r *Router) Match(topic string) *Route {
	for i := range r.routes {
		if r.routes[i].Pattern.Match(topic) {
			return &r.routes[i]
		}
	}
	return nil
}

// MatchRow returns the first route whose pattern matches the row's topic
// and whose filter, if it has one, accepts the row; nil when none does. A
// filter that fails on the row stops the search with its error: the row
// cannot be routed.
func (r *Router) MatchRow(payload []byte, v Vars) (*Route, error) {
	return r.match(payload, v, func(*Route) bool { return true })
}

// match walks the routes whose pattern matches the row's topic, in order,
// and returns the first that take accepts and whose filter, if it has one,
// accepts the row. A route without a filter that take refuses ends the
// walk: it takes every row that reaches it. The payload is decoded once, by
// the first filter that reads it, and only then.
func (r *Router) match(payload []byte, v Vars, take func(*Route) bool) (*Route, error) {
	var in any
	var vars []any
	for i := range r.routes {
		rt := &r.routes[i]
		if !rt.Pattern.Match(v.Topic) {
			continue
		}
		if !take(rt) {
			if rt.Filter == nil {
				return nil, nil
			}
			continue
		}
		if rt.Filter == nil {
			return rt, nil
		}
		if vars == nil {
			var err error
			if in, err = decodePayload(payload); err != nil {
				return nil, &FilterError{Route: rt.Name, Err: err}
			}
			vars = v.bind()
		}
		ok, err := rt.Filter.accepts(in, vars)
		if err != nil {
			return nil, &FilterError{Route: rt.Name, Err: err}
		}
		if ok {
			return rt, nil
		}
	}
	return nil, nil
}

// Candidates returns the routes a row of topic may take, in order: the
// routes whose pattern matches it, up to and including the first without a
// filter (it takes every row the filters before it turn down). A single
// candidate without a filter is the topic's route whatever the payload;
// with filters, only a row's payload and variables tell (MatchRow).
func (r *Router) Candidates(topic string) []*Route {
	var out []*Route
	for i := range r.routes {
		rt := &r.routes[i]
		if !rt.Pattern.Match(topic) {
			continue
		}
		out = append(out, rt)
		if rt.Filter == nil {
			break
		}
	}
	return out
}

// MatchRowTo returns the route that sent the row to destination: among the
// routes a row of its topic may take (Candidates), the first that sends to
// destination and whose filter, if it has one, accepts the row. It is how
// a copy, which keeps its destination but not its route, finds the route
// (and the transform) that made it: under the configuration that routed
// the row, no earlier route accepted it, so the route that did is the
// first one here. nil when no route sends the row to destination today.
func (r *Router) MatchRowTo(payload []byte, v Vars, destination string) (*Route, error) {
	return r.match(payload, v, func(rt *Route) bool { return rt.Sends(destination) })
}

// Filters reports whether some route has a filter: routing a row then
// needs its payload and variables.
func (r *Router) Filters() bool { return r.filters }

// FanOut reports whether some route sends rows to several destinations.
func (r *Router) FanOut() bool { return r.fanOut }

// Routes returns the routes in order; Match returns pointers into it.
func (r *Router) Routes() []Route { return r.routes }
