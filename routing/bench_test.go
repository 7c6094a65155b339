package routing

import (
	"testing"
	"time"
)

// Micro-benchmarks of the per-row work of routing (make microbench):
// matching a topic against routes, routing a row through filters,
// rendering an address, running a jq transform.

func BenchmarkRouterMatch(b *testing.B) {
	var routes []Route
	for _, p := range []string{"user.*", "billing.#", "order.line.*", "order.#"} {
		pat, err := CompilePattern(p)
		if err != nil {
			b.Fatal(err)
		}
		routes = append(routes, Route{Name: p, Pattern: pat, Destination: "d"})
	}
	r := NewRouter(routes)
	b.ReportAllocs()
	for b.Loop() {
		if r.Match("order.created") == nil {
			b.Fatal("no match")
		}
	}
}

// BenchmarkRouterMatchRowFilters routes a row past a filter that refuses
// it to one that accepts it: the payload is decoded once for both.
func BenchmarkRouterMatchRowFilters(b *testing.B) {
	r := router(b,
		[3]string{"order.#", `.amount >= 1000`, "review"},
		[3]string{"order.#", `$headers["X-Tenant"] == "acme"`, "hook,queue"},
		[3]string{"#", "", "rest"},
	)
	payload := []byte(`{"orderId":"11111111-1111-1111-1111-111111111111","amount":99.99,"currency":"EUR"}`)
	v := Vars{ID: "x", Topic: "order.created", Headers: map[string]string{"X-Tenant": "acme"}}
	b.ReportAllocs()
	for b.Loop() {
		if rt, err := r.MatchRow(payload, v); err != nil || rt == nil || rt.Name != "r1" {
			b.Fatal(rt, err)
		}
	}
}

func BenchmarkTemplateRender(b *testing.B) {
	t, err := ParseTemplate("https://hooks.example.com/{{ aggregateType }}/{{ key }}/{{ topic }}")
	if err != nil {
		b.Fatal(err)
	}
	agg := "order"
	f := &Fields{ID: "11111111-1111-1111-1111-111111111111", Topic: "order.created", Key: "cust-42", AggregateType: &agg}
	plain := func(_ int, v string) (string, error) { return v, nil }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := t.Render(f, plain); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTransformRun(b *testing.B) {
	tr, err := CompileTransform(`{order: .orderId, amount, attempt: $attempt}`)
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"orderId":"11111111-1111-1111-1111-111111111111","amount":99.99,"currency":"EUR"}`)
	key := "cust-42"
	v := Vars{ID: "x", Topic: "order.created", Key: &key, Sequence: 42, CreatedAt: time.Now().UTC().Format(time.RFC3339Nano)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tr.Run(payload, v); err != nil {
			b.Fatal(err)
		}
	}
}
