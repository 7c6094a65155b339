package sinks

import (
	"testing"
	"time"
)

// BenchmarkStandardHeaders measures the headers every delivery carries.
func BenchmarkStandardHeaders(b *testing.B) {
	agg := "order"
	m := &Message{ID: "11111111-1111-1111-1111-111111111111", Topic: "order.created", Key: "cust-42", AggregateType: &agg,
		Sequence: 1234567, Attempt: 2, CreatedAt: time.Now(), Headers: map[string]string{"X-Tenant": "acme"}}
	h := make(map[string]string, 8)
	b.ReportAllocs()
	for b.Loop() {
		m.StandardHeaders(func(name, value string) { h[name] = value })
	}
}
