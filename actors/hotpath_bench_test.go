package actors

import (
	"github.com/queuebox/queuebox/actors/internal/destctl"
	"testing"

	"github.com/google/uuid"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/clock"
	"github.com/queuebox/queuebox/routing"
)

// Micro-benchmarks of the engine's per-row work (make microbench): checking
// a row, and deciding and batching outcomes for the completer.

var benchPayload = []byte(`{"orderId":"11111111-1111-1111-1111-111111111111","amount":99.99,"currency":"EUR","note":"a two hundred byte payload for the benchmark"}`)

func BenchmarkCheckPayload(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if err := checkPayload(benchPayload, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseHeaders(b *testing.B) {
	h := []byte(`{"X-Tenant":"acme","X-Trace":"00-abc-01"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseHeaders(h); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOutcomes decides a batch of 500 delivered rows and turns them
// into the columns the completion writes, as the completer's flush does.
func BenchmarkOutcomes(b *testing.B) {
	rows := make([]dialects.Row, 500)
	for i := range rows {
		rows[i] = dialects.Row{Claim: dialects.Claim{ID: uuid.New(), Token: uuid.New()}, MaxAttempts: 5}
	}
	var p outcomePolicy
	out := make([]dialects.Outcome, 0, len(rows))
	b.ReportAllocs()
	for b.Loop() {
		out = out[:0]
		for i := range rows {
			out = append(out, p.decide(rows[i], nil, destctl.BreakerView{}))
		}
		for i := range out {
			_ = dialects.WriteOf(out[i])
		}
	}
}

// BenchmarkPrepare routes and checks a row to one destination, as a key
// actor does before each delivery.
func BenchmarkPrepare(b *testing.B) {
	pat, err := routing.CompilePattern("order.#")
	if err != nil {
		b.Fatal(err)
	}
	router := routing.NewRouter([]routing.Route{{Name: "orders", Pattern: pat, Destination: "hook"}})
	h := destctl.NewHandle("hook", destctl.Policy{}, 100, clock.Wall{})
	d := &deliverer{router: router, sinks: map[string]*destctl.Handle{"hook": h}, routes: newRouteObservers(router, NopObserver{}), clock: clock.Wall{}}
	r := dialects.Row{Claim: dialects.Claim{ID: uuid.New(), Token: uuid.New()}, Topic: "order.created", Key: "k", Payload: benchPayload,
		Headers: []byte(`{"X-Tenant":"acme"}`), TypedJSON: true, MaxAttempts: 5}
	b.ReportAllocs()
	for b.Loop() {
		if p := d.prepare(r); p.dead != nil {
			b.Fatal(p.dead)
		}
	}
}
