package cloudevents

import "testing"

// BenchmarkMessage is the per-message cost of turning a row into what each
// binding sends.
func BenchmarkMessage(b *testing.B) {
	m := rows()[0]
	for _, typ := range []string{"http", "kafka"} {
		for _, mode := range []string{"binary", "structured"} {
			c, err := Compile(typ, Settings{Mode: mode, Source: source})
			if err != nil {
				b.Fatal(err)
			}
			b.Run(typ+"/"+mode, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := c.Message(&m); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
