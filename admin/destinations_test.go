package admin

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/testdb"
)

var configured = []DestinationInfo{
	{Name: "audit", Type: "null"},
	{Name: "orders-webhook", Type: "http", Policy: actors.DestinationPolicy{RatePerSecond: 50, Burst: 50, MaxConcurrency: 8,
		CircuitBreaker: actors.CircuitBreaker{Window: 5 * time.Second, MinAttempts: 5, ProbeInterval: 10 * time.Second}}},
}

func destinationServer(t *testing.T, d dialects.Dialect) *httptest.Server {
	t.Helper()
	s := NewServer(Options{Dialect: d, Destinations: configured})
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return hs
}

func listed(t *testing.T, hs *httptest.Server) map[string]DestinationView {
	t.Helper()
	var v DestinationsView
	a := call(t, hs, "GET", "/api/destinations", "")
	expect(t, a, 200)
	a.json(t, &v)
	out := map[string]DestinationView{}
	for _, d := range v.Destinations {
		out[d.Name] = d
	}
	return out
}

// GET /api/destinations lists the configured destinations with their
// limits, pauses and open circuits; POST .../pause and .../resume change
// the pause for every replica and say whether they changed it.
func TestDestinationRoutes(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 0)
	hs := destinationServer(t, d)

	got := listed(t, hs)
	if len(got) != 2 {
		t.Fatalf("listed %v", got)
	}
	o := got["orders-webhook"]
	if !o.Configured || o.Paused || o.Since != nil || o.RateLimit == nil || o.RateLimit.PerSecond != 50 || o.MaxConcurrency != 8 ||
		o.CircuitBreaker == nil || o.CircuitBreaker.ProbeIntervalSeconds != 10 || len(o.OpenCircuits) != 0 || o.Replica != nil {
		t.Fatalf("orders-webhook: %+v", o)
	}
	if a := got["audit"]; a.RateLimit != nil || a.CircuitBreaker != nil {
		t.Fatalf("audit: %+v", a)
	}

	expect(t, call(t, hs, "POST", "/api/destinations/orders-webhook/pause", ""), 415, "Content-Type: application/json")
	expect(t, call(t, hs, "POST", "/api/destinations/ordres-webhook/pause", "{}"), 404,
		`destination "ordres-webhook": is not a configured destination; the configured ones are audit, orders-webhook`)
	expect(t, call(t, hs, "POST", "/api/destinations/orders-webhook/pause", `{"why": "x"}`), 400, `unknown field "why"`, `{"reason": "why it is paused"}`)
	expect(t, call(t, hs, "POST", "/api/destinations/orders-webhook/pause", `{"reason": "`+strings.Repeat("x", 1001)+`"}`), 400, "reason: is 1001 characters long; the most is 1000")

	var p PauseView
	a := call(t, hs, "POST", "/api/destinations/orders-webhook/pause", `{"reason": "the CRM is being upgraded"}`)
	expect(t, a, 200)
	a.json(t, &p)
	if !p.Paused || !p.Changed || p.PauseReason != "the CRM is being upgraded" || p.Since == nil {
		t.Fatalf("pause: %+v", p)
	}
	a = call(t, hs, "POST", "/api/destinations/orders-webhook/pause", `{}`)
	p = PauseView{}
	a.json(t, &p)
	if !p.Paused || p.Changed || p.PauseReason != "" {
		t.Fatalf("pausing again: %+v", p)
	}
	o = listed(t, hs)["orders-webhook"]
	if !o.Paused || o.Since == nil {
		t.Fatalf("listed after the pause: %+v", o)
	}

	// A replica reports an open circuit: the listing shows it.
	if err := d.DestinationCircuitOpen(context.Background(), dialects.OpenCircuit{Destination: "orders-webhook", Replica: "host-a/7/abc", LastError: "HTTP 503"}); err != nil {
		t.Fatal(err)
	}
	o = listed(t, hs)["orders-webhook"]
	if len(o.OpenCircuits) != 1 || o.OpenCircuits[0].Replica != "host-a/7/abc" || o.OpenCircuits[0].LastError != "HTTP 503" {
		t.Fatalf("open circuits: %+v", o.OpenCircuits)
	}

	a = call(t, hs, "POST", "/api/destinations/orders-webhook/resume", "{}")
	p = PauseView{}
	a.json(t, &p)
	if p.Paused || !p.Changed {
		t.Fatalf("resume: %+v", p)
	}
	a = call(t, hs, "POST", "/api/destinations/orders-webhook/resume", "{}")
	p = PauseView{}
	a.json(t, &p)
	if p.Paused || p.Changed {
		t.Fatalf("resuming again: %+v", p)
	}
	expect(t, call(t, hs, "POST", "/api/destinations/orders-webhook/resume?now=1", "{}"), 400, "now: is not a parameter")
	expect(t, call(t, hs, "POST", "/api/destinations/nothing/resume", "{}"), 404, "is not a configured destination")
}

// A destination removed from the configuration while paused is still
// listed, and can be resumed.
func TestAPausedDestinationNoLongerConfigured(t *testing.T) {
	t.Parallel()
	d := testdb.Migrated(t, 0)
	ctx := context.Background()
	if _, _, err := d.DestinationPause(ctx, "old-hook", "retired"); err != nil {
		t.Fatal(err)
	}
	views, err := Destinations(ctx, d, configured)
	if err != nil {
		t.Fatal(err)
	}
	if len(views) != 3 || views[1].Name != "old-hook" || views[1].Configured || !views[1].Paused {
		t.Fatalf("views: %+v", views)
	}
	if _, _, err := PauseDestination(ctx, d, configured, "old-hook", "", "NAME", "--reason"); err == nil || !strings.Contains(err.Error(), "NAME \"old-hook\": is not a configured destination") {
		t.Fatalf("pausing a destination not configured: %v", err)
	}
	if _, changed, err := ResumeDestination(ctx, d, configured, "old-hook", "NAME"); err != nil || !changed {
		t.Fatalf("resume: %v, %v", changed, err)
	}
	if views, _ := Destinations(ctx, d, configured); len(views) != 2 {
		t.Fatalf("a resumed destination the configuration does not have is still listed: %+v", views)
	}
}

func TestWriteDestinations(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	since := now.Add(-90 * time.Second)
	views := []DestinationView{
		{Name: "audit", Type: "null", Configured: true},
		{Name: "orders-webhook", Type: "http", Configured: true, Paused: true, PauseReason: "the CRM is being upgraded", Since: &since,
			RateLimit: &RateLimitView{PerSecond: 50, Burst: 50}, MaxConcurrency: 8,
			CircuitBreaker: &BreakerView{WindowSeconds: 5, MinAttempts: 5, ProbeIntervalSeconds: 10},
			OpenCircuits:   []CircuitView{{Replica: "host-a/7/abc", OpenedAt: now.Add(-time.Minute), LastError: "HTTP 503"}}},
	}
	var b bytes.Buffer
	if err := WriteDestinations(&b, views, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"NAME            TYPE  STATE",
		"audit           null  delivering",
		"orders-webhook  http  paused 1m30s ago; circuit open on 1 replica  50/s (burst 50)  8",
		"5 attempts over 5s; a probe every 10s",
		"orders-webhook is paused: the CRM is being upgraded",
		"orders-webhook: the circuit of replica host-a/7/abc is open since 2026-05-01T11:59:00Z (1m0s ago); last error: HTTP 503",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the listing lacks %q:\n%s", want, out)
		}
	}
}
