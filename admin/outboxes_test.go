package admin

import (
	"testing"
	"time"

	"github.com/queuebox/queuebox/actors"
)

// Every family about rows or claims carries the outbox label, and two
// outboxes' series stay apart in the one registry.
func TestMetricsCarryTheOutboxLabel(t *testing.T) {
	a := NewMetricsFor([]string{"web"}, "orders")
	b := a.ForOutbox("billing")
	if a.ForOutbox("orders") != a {
		t.Error("ForOutbox of the same outbox made a second Metrics")
	}
	a.Claimed(3, time.Millisecond)
	b.Claimed(5, time.Millisecond)
	a.Route("r", "hook").Finished(actors.Delivered, time.Millisecond, time.Millisecond)
	a.setRows(map[string]int64{"pending": 2}, time.Millisecond)
	b.setRows(map[string]int64{"dead": 1}, time.Millisecond)
	fams, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	labelled := map[string]bool{
		"queuebox_deliveries_total": true, "queuebox_delivery_duration_seconds": true, "queuebox_end_to_end_latency_seconds": true,
		"queuebox_rows": true, "queuebox_oldest_pending_age_seconds": true, "queuebox_claimed_rows_total": true,
		"queuebox_lost_claims_total": true, "queuebox_retention_deleted_total": true, "queuebox_inbox_rows": true,
		"queuebox_inbox_oldest_received_age_seconds": true, "queuebox_rows_count_seconds": true, "queuebox_horizon_held_seconds": true,
		"queuebox_outbox_dead_row_versions": true, "queuebox_outbox_up": true,
	}
	seen := map[string]bool{}
	values := map[string]float64{}
	for _, f := range fams {
		if !labelled[f.GetName()] {
			continue
		}
		seen[f.GetName()] = true
		for _, m := range f.Metric {
			outbox := ""
			for _, lp := range m.Label {
				if lp.GetName() == "outbox" {
					outbox = lp.GetValue()
				}
			}
			if outbox != "orders" && outbox != "billing" {
				t.Errorf("%s has a series without the outbox label: %v", f.GetName(), m.Label)
			}
			if f.GetName() == "queuebox_claimed_rows_total" {
				values[outbox] = m.Counter.GetValue()
			}
		}
	}
	for name := range labelled {
		if !seen[name] {
			t.Errorf("no series of %s", name)
		}
	}
	if values["orders"] != 3 || values["billing"] != 5 {
		t.Errorf("claimed rows by outbox: %v", values)
	}
	// A count of one outbox leaves the other's series alone.
	a.setRows(map[string]int64{"pending": 0}, time.Millisecond)
	fams, _ = a.Registry().Gather()
	for _, f := range fams {
		if f.GetName() != "queuebox_rows" {
			continue
		}
		found := false
		for _, m := range f.Metric {
			labels := map[string]string{}
			for _, lp := range m.Label {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["outbox"] == "billing" && labels["state"] == "dead" && m.Gauge.GetValue() == 1 {
				found = true
			}
		}
		if !found {
			t.Error("a count of one outbox removed another's queuebox_rows")
		}
	}
}
