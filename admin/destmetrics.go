package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/queuebox/queuebox/actors"
)

// destinationCollector reads the destinations at each scrape (from an
// engine that runs; a replica's outboxes share them): is
// each paused (as this replica last read it), is its circuit open here,
// how often it opened and probed, the rows deferred by reason, and what
// waits for its flow control. Before the engine runs it has no series.
type destinationCollector struct {
	f                                      *families
	paused, open, opened, probes, deferred *prometheus.Desc
	waiting, throttled                     *prometheus.Desc
}

func newDestinationCollector(f *families) *destinationCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append([]string{"destination"}, labels...), nil)
	}
	return &destinationCollector{f: f,
		paused: d("queuebox_destination_paused", "1 while the destination is paused (as this replica last read it, about twice a second), else 0."),
		open:   d("queuebox_destination_circuit_open", "1 while this replica holds the destination's circuit open (every delivery failed for the breaker's window), else 0."),
		opened: d("queuebox_destination_circuit_opened_total", "How often this replica opened the destination's circuit."),
		probes: d("queuebox_destination_probes_total", "Probes this replica sent the destination while its circuit was open."),
		deferred: d("queuebox_destination_deferred_rows_total",
			"Rows this replica put back to pending without an attempt, by reason: paused, circuit (open), throttled (its rate limit or concurrency had as many rows waiting as it lets wait).", "reason"),
		waiting:   d("queuebox_destination_waiting_rows", "Rows waiting for the destination's rate limit or concurrency on this replica now."),
		throttled: d("queuebox_destination_throttled_seconds_total", "Time deliveries to the destination spent waiting for its rate limit or concurrency on this replica, summed over the deliveries."),
	}
}

func (c *destinationCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.paused, c.open, c.opened, c.probes, c.deferred, c.waiting, c.throttled} {
		ch <- d
	}
}

func (c *destinationCollector) Collect(ch chan<- prometheus.Metric) {
	// The outboxes' engines share the destinations: any of them shows
	// them.
	_, engines := c.f.engines()
	if len(engines) == 0 {
		return
	}
	e := engines[0]
	flag := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for _, s := range e.Destinations() {
		ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, flag(s.Paused), s.Name)
		ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, flag(s.CircuitOpen), s.Name)
		ch <- prometheus.MustNewConstMetric(c.opened, prometheus.CounterValue, float64(s.CircuitOpened), s.Name)
		ch <- prometheus.MustNewConstMetric(c.probes, prometheus.CounterValue, float64(s.Probes), s.Name)
		for _, r := range actors.DeferReasons {
			ch <- prometheus.MustNewConstMetric(c.deferred, prometheus.CounterValue, float64(s.Deferred[r]), s.Name, r)
		}
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(s.Waiting), s.Name)
		ch <- prometheus.MustNewConstMetric(c.throttled, prometheus.CounterValue, s.Throttled.Seconds(), s.Name)
	}
}
