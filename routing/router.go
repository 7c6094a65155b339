package routing

// Route sends rows whose topic matches Pattern to Destination.
type Route struct {
	Name        string
	Pattern     *Pattern
	Destination string
	// Transform is nil when the payload is sent as it is.
	Transform *Transform
}

// Router holds the routes in configuration order; the first match wins.
type Router struct {
	routes []Route
}

// NewRouter returns a router over routes, in order.
func NewRouter(routes []Route) *Router { return &Router{routes: routes} }

// Match returns the first route whose pattern matches topic, or nil.
func (r *Router) Match(topic string) *Route {
	for i := range r.routes {
		if r.routes[i].Pattern.Match(topic) {
			return &r.routes[i]
		}
	}
	return nil
}

// Routes returns the routes in order; Match returns pointers into it.
func (r *Router) Routes() []Route { return r.routes }
