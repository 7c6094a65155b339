package bootstrap

import (
	"testing"
	"time"

	"github.com/queuebox/queuebox/actors"
)

// The attempt history is on by default, records a first try that succeeds
// only when asked, and is kept a week; a file may switch it off, record
// every delivery or keep it longer, and the engine gets what the file says.
func TestHistoryDefaultsAndWiring(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       actors.History
	}{
		{"default", "", actors.History{Enabled: true, Retention: 168 * time.Hour}},
		{"off", "outbox:\n  history: { enabled: false }\n", actors.History{Retention: 168 * time.Hour}},
		{"kept a month", "outbox:\n  history: { retention: 720h }\n", actors.History{Enabled: true, Retention: 720 * time.Hour}},
		{"kept for ever", "outbox:\n  history: { retention: 0s }\n", actors.History{Enabled: true}},
		{"every delivery", "outbox:\n  history: { allDeliveries: true }\n", actors.History{Enabled: true, AllDeliveries: true, Retention: 168 * time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Parse("q.yaml", []byte(badBase+tc.yaml), env(nil))
			if err != nil {
				t.Fatal(err)
			}
			o, err := EngineOptions(l, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if o.History != tc.want {
				t.Errorf("history %+v, want %+v", o.History, tc.want)
			}
		})
	}
}

func TestBadHistory(t *testing.T) {
	runBad(t, []badCase{
		{name: "a negative retention", yaml: "+outbox:\n  history: { retention: -1h }\n", key: "outbox.history.retention", reason: "negative"},
		{name: "an unknown key", yaml: "+outbox:\n  history: { enable: false }\n", key: "outbox.history.enable"},
		{name: "every delivery with the history off", yaml: "+outbox:\n  history: { enabled: false, allDeliveries: true }\n",
			key: "outbox.history.allDeliveries", reason: "while outbox.history.enabled is false, which records nothing at all; set enabled: true"},
		{name: "every delivery, not a boolean", yaml: "+outbox:\n  history: { allDeliveries: every }\n", key: "outbox.history.allDeliveries"},
	})
}
