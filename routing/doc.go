// Package routing decides where a row goes and what it looks like when it
// gets there: topic patterns (AMQP-style, "*" one segment, "#" zero or more),
// jq filters that let a route take only some of its topic's rows, routes to
// one destination or fanned out to several, address templates
// ("{{ topic }}"), and jq transforms. Everything is compiled once at
// start-up; matching a topic does not allocate.
package routing
