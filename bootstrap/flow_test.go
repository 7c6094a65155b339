package bootstrap

import (
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/actors"
)

// Every destination has a circuit breaker unless it says otherwise, a rate
// limit's bucket holds a second's worth unless given, and the engine gets
// both.
func TestDestinationFlowDefaultsAndWiring(t *testing.T) {
	l, err := Parse("q.yaml", []byte(badCase{yaml: `@  slow:
    type: "null"
    rateLimit: { perSecond: 2.5 }
    maxConcurrency: 4
    circuitBreaker: { window: 30s, probeInterval: 1m }
  steady: { type: "null", rateLimit: { perSecond: 100, burst: 10 }, circuitBreaker: { enabled: false } }
`}.file()), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	got := DestinationPolicies(l)
	want := map[string]actors.DestinationPolicy{
		"hook": {CircuitBreaker: actors.CircuitBreaker{Window: 5 * time.Second, MinAttempts: 5, ProbeInterval: 5 * time.Second}},
		"slow": {RatePerSecond: 2.5, Burst: 3, MaxConcurrency: 4,
			CircuitBreaker: actors.CircuitBreaker{Window: 30 * time.Second, MinAttempts: 5, ProbeInterval: time.Minute}},
		"steady": {RatePerSecond: 100, Burst: 10},
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %+v, want %+v", name, got[name], w)
		}
	}
	// config check prints what applies, and it loads back the same.
	out, err := l.Effective()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"rateLimit:\n      perSecond: 2.5\n      burst: 3", "maxConcurrency: 4", "circuitBreaker:\n      enabled: true\n      window: 30s\n      minAttempts: 5\n      probeInterval: 1m",
		"circuitBreaker:\n      enabled: false"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("config check does not print %q:\n%s", s, out)
		}
	}
	again, err := Parse("q.yaml", out, env(nil))
	if err != nil {
		t.Fatalf("the printed configuration does not load: %v\n%s", err, out)
	}
	if g := DestinationPolicies(again); g["slow"] != want["slow"] || g["steady"] != want["steady"] {
		t.Errorf("loaded back: %+v", g)
	}
}

func TestBadFlowControl(t *testing.T) {
	long := strings.Repeat("d", 256)
	runBad(t, []badCase{
		{name: "a rate limit without its rate", yaml: "@  slow: { type: \"null\", rateLimit: { burst: 5 } }\n", key: "destinations.slow.rateLimit.perSecond", reason: "is required with rateLimit"},
		{name: "a negative rate", yaml: "@  slow: { type: \"null\", rateLimit: { perSecond: -1 } }\n", key: "destinations.slow.rateLimit.perSecond", reason: "out of range"},
		{name: "text for a rate", yaml: "@  slow: { type: \"null\", rateLimit: { perSecond: fast } }\n", key: "destinations.slow.rateLimit.perSecond", reason: `expected a number, got "fast"`, not: "is required"},
		{name: "a negative concurrency", yaml: "@  slow: { type: \"null\", maxConcurrency: -1 }\n", key: "destinations.slow.maxConcurrency", reason: "out of range"},
		{name: "a breaker window too short", yaml: "@  slow: { type: \"null\", circuitBreaker: { window: 10ms } }\n", key: "destinations.slow.circuitBreaker.window", reason: "10ms is too short; use at least 100ms"},
		{name: "a probe interval without a unit", yaml: "@  slow: { type: \"null\", circuitBreaker: { probeInterval: 5 } }\n", key: "destinations.slow.circuitBreaker.probeInterval", reason: "is not a duration", not: "too short"},
		{name: "no attempts", yaml: "@  slow: { type: \"null\", circuitBreaker: { minAttempts: 0 } }\n", key: "destinations.slow.circuitBreaker.minAttempts", reason: "out of range; use a value from 1"},
		{name: "a misspelt breaker key", yaml: "@  slow: { type: \"null\", circuitBreaker: { windowMs: 5000 } }\n", key: "destinations.slow.circuitBreaker.windowMs", reason: "did you mean window?"},
		{name: "a name too long to pause", yaml: "@  " + long + ": { type: \"null\" }\n", key: "destinations." + long, reason: "destination names are at most 255"},
	})
}
