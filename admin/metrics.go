package admin

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/queuebox/queuebox/actors"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/inbox"
)

// Metrics are the Prometheus metrics of one outbox of a replica, in the
// registry of the replica (shared by its outboxes: ForOutbox). Every family
// about rows or claims carries an outbox label. They hear the outbox's
// engine as its actors.Observer (and actors.CopiesObserver); the row counts come from the outbox's
// Sampler; retention deletes are counted by wrapping the engine's dialect
// (CountPurges), because the janitor reports them to no observer.
type Metrics struct {
	*families
	outbox string

	deliveries *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	latency    *prometheus.HistogramVec
	rows       *prometheus.GaugeVec
	copies     *prometheus.GaugeVec
	copied     *prometheus.CounterVec
	oldest     prometheus.Gauge
	claimed    prometheus.Counter
	lost       prometheus.Counter
	retention  *prometheus.CounterVec
	inboxRows  *prometheus.GaugeVec
	inboxAge   prometheus.Gauge
	countTook  prometheus.Gauge

	engine atomic.Pointer[actors.Engine]
	// up says whether the outbox runs (SetUp; nil: whether its engine is
	// set).
	up atomic.Pointer[func() bool]

	// wakeups is what wakes the outbox's relay (kind and state), and
	// status its last report.
	wakeups       *prometheus.GaugeVec
	wakeupsStatus atomic.Pointer[dialects.WakeupStatus]
	// The oldest holder of the database's horizon, and the outbox's dead
	// row versions (the sampler's cheap reads).
	horizonAge   prometheus.Gauge
	deadVersions prometheus.Gauge
	// Where the wake-up slot stands, in bytes behind the server's WAL.
	slotRetained, slotBehind prometheus.Gauge

	// Per destination, for the page's throughput chart and deliveries per
	// second: Prometheus counters cannot be read back cheaply.
	mu    sync.Mutex
	dests map[string]*destinationCounts

	throughput *Throughput
}

// families are the metric families of a replica, in its registry: every
// outbox's Metrics adds its series to them.
type families struct {
	reg *prometheus.Registry

	deliveries *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	latency    *prometheus.HistogramVec
	rows       *prometheus.GaugeVec
	copies     *prometheus.GaugeVec
	copied     *prometheus.CounterVec
	oldest     *prometheus.GaugeVec
	claimed    *prometheus.CounterVec
	lost       *prometheus.CounterVec
	retention  *prometheus.CounterVec
	inbox      *prometheus.CounterVec
	inboxRows  *prometheus.GaugeVec
	inboxAge   *prometheus.GaugeVec
	countTook  *prometheus.GaugeVec
	wakeups    *prometheus.GaugeVec

	horizonAge, deadVersions, slotRetained, slotBehind *prometheus.GaugeVec

	// outboxes are the Metrics of each outbox, for the gauges that read
	// their engines.
	omu      sync.Mutex
	outboxes []*Metrics

	// Per inbox source, what queuebox_inbox_received_total counts, for
	// /api/stats and the page.
	smu     sync.Mutex
	sources map[string]*sourceCounts

	buildOnce sync.Once
}

// sourceCounts are the messages one inbox source handled, per outcome (in
// the order of inbox.Outcomes).
type sourceCounts [3]atomic.Int64

// destinationCounts are the rows one destination finished, per outcome.
type destinationCounts struct {
	delivered, retried, dead atomic.Int64
}

// InboxOutcomes are the outcomes of queuebox_inbox_received_total.
var InboxOutcomes = []string{"stored", "duplicate", "rejected"}

// DefaultOutbox labels the metrics of a replica of one outbox.
const DefaultOutbox = "default"

// NewMetrics registers every metric in a registry of its own, with the Go
// runtime's and the process's, and returns the metrics of the outbox
// DefaultOutbox (ForOutbox gives those of others). inboxSources are the
// configured inbox sources: their series start at zero, so that rate()
// works from the first scrape.
func NewMetrics(inboxSources []string) *Metrics { return NewMetricsFor(inboxSources, DefaultOutbox) }

// NewMetricsFor is NewMetrics with the outbox of the metrics it returns.
func NewMetricsFor(inboxSources []string, outbox string) *Metrics {
	f := &families{reg: prometheus.NewRegistry(), sources: map[string]*sourceCounts{}}
	f.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r := factory{f.reg}
	f.deliveries = r.counterVec("queuebox_deliveries_total",
		"Rows whose delivery ended, by outbox, route, destination and outcome (delivered, retry, dead). Rows that match no route are dead with empty route and destination.",
		"outbox", "route", "destination", "outcome")
	f.duration = r.histogramVec("queuebox_delivery_duration_seconds",
		"How long the destination took to accept or refuse a row (the publish call that carried it; rows of one batch share it).",
		prometheus.ExponentialBuckets(0.001, 2.5, 12), "outbox", "destination")
	f.latency = r.histogramVec("queuebox_end_to_end_latency_seconds",
		"From a row's created_at to the moment its destination accepted it.",
		prometheus.ExponentialBuckets(0.005, 2.5, 14), "outbox", "destination")
	f.horizonAge = r.gaugeVec("queuebox_horizon_held_seconds",
		"How long the oldest open transaction (or standby, prepared transaction, replication slot) has held the outbox database's horizon back: while it stays open, vacuum can remove no row version. 0 when none is seen.", "outbox")
	f.deadVersions = r.gaugeVec("queuebox_outbox_dead_row_versions",
		"Dead row versions in the outbox table, from the database's statistics (-1 where it does not say).", "outbox")
	f.slotRetained = r.gaugeVec("queuebox_wakeups_slot_retained_bytes",
		"WAL the server keeps for the outbox's wake-up slot: the slot's restart position behind the server's current WAL position, in bytes (the same slot on every replica: use max). 0 while no relay holds a slot.", "outbox")
	f.slotBehind = r.gaugeVec("queuebox_wakeups_slot_behind_bytes",
		"How far the outbox's wake-up slot's confirmed position is behind the server's current WAL position, in bytes: WAL written that its relay has not decoded yet (logical decoding reads all of it, whatever the table). 0 while no relay holds a slot.", "outbox")
	f.wakeups = r.gaugeVec("queuebox_wakeups",
		"What wakes the relay when rows arrive in the outbox: 1 for the kind in use (logical: nudges from logical replication; probe: the relay asks) and the wake-up source's state (listening, connecting, reconnecting, unavailable, off).",
		"outbox", "kind", "state")
	f.rows = r.gaugeVec("queuebox_rows",
		"Rows in the outbox table per state, counted by the sampler on an interval (any state found, including values written by hand).",
		"outbox", "state")
	f.copies = r.gaugeVec("queuebox_copies",
		"Copies of fan-out rows per destination and state, counted with queuebox_rows: a destination gets a copy when its delivery did not end well in its row's pass (a destination delivered in the pass has none). Every state of a destination that has copies is present.",
		"outbox", "destination", "state")
	f.copied = r.counterVec("queuebox_copies_written_total",
		"Copies this replica wrote for destinations of fan-out rows whose delivery did not end well in the row's pass, by outbox, destination and reason (retry: it failed and is tried again; defer: the destination was paused, its circuit open or its flow full; behind: earlier copies of the key wait there; dead).",
		"outbox", "destination", "reason")
	f.oldest = r.gaugeVec("queuebox_oldest_pending_age_seconds",
		"How long the oldest row the relay could claim now has waited since it became due (rows behind a held or running row of their key, as during a pause, wait for it and do not count); 0 when none is due.", "outbox")
	f.claimed = r.counterVec("queuebox_claimed_rows_total", "Rows this replica claimed.", "outbox")
	f.lost = r.counterVec("queuebox_lost_claims_total", "Claims this replica lost before writing their outcome (the lease passed); the rows are delivered again.", "outbox")
	f.retention = r.counterVec("queuebox_retention_deleted_total", "Rows the retention deleted, by outbox and state.", "outbox", "state")
	f.inbox = r.counterVec("queuebox_inbox_received_total", "Messages the inbox received, by source and outcome (stored, duplicate, rejected).", "source", "outcome")
	f.inboxRows = r.gaugeVec("queuebox_inbox_rows",
		"Rows in the inbox table per state (received: waiting for the inbox relay; relayed: turned into outbox rows), counted with queuebox_rows.",
		"outbox", "state")
	f.inboxAge = r.gaugeVec("queuebox_inbox_oldest_received_age_seconds",
		"How long the oldest received inbox row (not yet relayed) had waited at the last count; 0 when none waits.", "outbox")
	f.countTook = r.gaugeVec("queuebox_rows_count_seconds", "How long the last count of the outbox table took (it sets the sampling interval).", "outbox")
	f.reg.MustRegister(&engineCollector{f: f,
		up:       prometheus.NewDesc("queuebox_outbox_up", "1 while the outbox's engine runs and its last claim reached its database, else 0 (waiting for its database, its schema not current, starting again after a failure).", []string{"outbox"}, nil),
		inflight: prometheus.NewDesc("queuebox_inflight_rows", "Rows this replica has claimed and not yet written an outcome for.", []string{"outbox"}, nil),
		others: prometheus.NewDesc("queuebox_other_relay_sessions", "Sessions that other relays held on the outbox's database server at the last look; while there are any, this replica runs one claim and one completion at a time instead of two.",
			[]string{"outbox"}, nil),
		mailbox: prometheus.NewDesc("queuebox_actor_mailbox_length", "Messages waiting in the mailboxes of the engine's actors, per outbox and kind of actor.", []string{"outbox", "actor"}, nil),
	})
	for _, src := range inboxSources {
		for _, o := range InboxOutcomes {
			f.inbox.WithLabelValues(src, o)
		}
		f.sources[src] = &sourceCounts{}
	}
	f.reg.MustRegister(newDestinationCollector(f))
	return f.forOutbox(outbox)
}

// ForOutbox returns the metrics of another outbox of the replica, in the
// same registry (the same outbox's twice: one Metrics).
func (m *Metrics) ForOutbox(name string) *Metrics { return m.forOutbox(name) }

func (f *families) forOutbox(name string) *Metrics {
	f.omu.Lock()
	defer f.omu.Unlock()
	for _, m := range f.outboxes {
		if m.outbox == name {
			return m
		}
	}
	l := prometheus.Labels{"outbox": name}
	m := &Metrics{families: f, outbox: name, dests: map[string]*destinationCounts{},
		deliveries: f.deliveries.MustCurryWith(l), duration: f.duration.MustCurryWith(l).(*prometheus.HistogramVec),
		latency: f.latency.MustCurryWith(l).(*prometheus.HistogramVec), rows: f.rows.MustCurryWith(l), copies: f.copies.MustCurryWith(l), copied: f.copied.MustCurryWith(l),
		oldest: f.oldest.With(l), claimed: f.claimed.With(l), lost: f.lost.With(l), retention: f.retention.MustCurryWith(l),
		inboxRows: f.inboxRows.MustCurryWith(l), inboxAge: f.inboxAge.With(l), countTook: f.countTook.With(l),
		wakeups: f.wakeups.MustCurryWith(l), horizonAge: f.horizonAge.With(l), deadVersions: f.deadVersions.With(l),
		slotRetained: f.slotRetained.With(l), slotBehind: f.slotBehind.With(l),
	}
	for _, s := range []dialects.State{dialects.Delivered, dialects.Dead} {
		m.retention.WithLabelValues(string(s))
	}
	for _, s := range inboxStates {
		m.inboxRows.WithLabelValues(string(s))
	}
	for _, s := range dialects.States {
		m.rows.WithLabelValues(string(s))
	}
	m.throughput = newThroughput(m)
	f.outboxes = append(f.outboxes, m)
	return m
}

// Outbox names the outbox these metrics are of.
func (m *Metrics) Outbox() string { return m.outbox }

// SetUp gives queuebox_outbox_up what says whether the outbox runs.
func (m *Metrics) SetUp(f func() bool) { m.up.Store(&f) }

// isUp is what queuebox_outbox_up shows.
func (m *Metrics) isUp() bool {
	if f := m.up.Load(); f != nil {
		return (*f)()
	}
	return m.engine.Load() != nil
}

// all are the metrics of every outbox.
func (f *families) all() []*Metrics {
	f.omu.Lock()
	defer f.omu.Unlock()
	return append([]*Metrics(nil), f.outboxes...)
}

// engines are the engines of the outboxes that run, by outbox.
func (f *families) engines() (names []string, engines []*actors.Engine) {
	f.omu.Lock()
	defer f.omu.Unlock()
	for _, m := range f.outboxes {
		if e := m.engine.Load(); e != nil {
			names, engines = append(names, m.outbox), append(engines, e)
		}
	}
	return names, engines
}

// engineCollector reads each outbox's engine at each scrape: its rows in
// flight, the other relays' sessions and its mailboxes. An outbox whose
// engine does not run has no series.
type engineCollector struct {
	f                             *families
	inflight, others, mailbox, up *prometheus.Desc
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	ch <- c.inflight
	ch <- c.others
	ch <- c.mailbox
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.f.all() {
		v := 0.0
		if m.isUp() {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, v, m.outbox)
	}
	names, engines := c.f.engines()
	for i, e := range engines {
		ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(e.Stats.InFlight.Load()), names[i])
		ch <- prometheus.MustNewConstMetric(c.others, prometheus.GaugeValue, float64(e.Stats.OtherRelays.Load()), names[i])
		for _, k := range actors.ActorKinds() {
			ch <- prometheus.MustNewConstMetric(c.mailbox, prometheus.GaugeValue, float64(e.MailboxLength(k)), names[i], k.String())
		}
	}
}

// SetBuildInfo publishes queuebox_build_info: a gauge of value 1 whose
// labels name this binary's version, commit and Go version, the
// Prometheus convention for joining a build onto any other series
// (bootstrap stamps both at build time). A second call does nothing.
func (m *Metrics) SetBuildInfo(version, commit string) {
	m.buildOnce.Do(func() {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "queuebox_build_info",
			Help:        "The version, commit and Go version of the running binary, as labels; the value is always 1.",
			ConstLabels: prometheus.Labels{"version": version, "commit": commit, "goversion": runtime.Version()}})
		g.Set(1)
		m.reg.MustRegister(g)
	})
}

// InboxReceived counts one message an inbox source handled
// (queuebox_inbox_received_total): Metrics is the sources' inbox.Observer.
func (m *Metrics) InboxReceived(source string, outcome inbox.Outcome) {
	m.inbox.WithLabelValues(source, outcome.String()).Inc()
	i := int(outcome) - int(inbox.Stored)
	if i < 0 || i >= len(sourceCounts{}) {
		return
	}
	m.smu.Lock()
	c := m.sources[source]
	if c == nil {
		c = &sourceCounts{}
		m.sources[source] = c
	}
	m.smu.Unlock()
	c[i].Add(1)
}

// inboxTotals reads what each inbox source handled since the replica
// started, per outcome.
func (m *Metrics) inboxTotals() map[string]map[string]int64 {
	m.smu.Lock()
	defer m.smu.Unlock()
	out := make(map[string]map[string]int64, len(m.sources))
	for name, c := range m.sources {
		byOutcome := make(map[string]int64, len(c))
		for i := range c {
			byOutcome[InboxOutcomes[i]] = c[i].Load()
		}
		out[name] = byOutcome
	}
	return out
}

// inboxStates are the states of an inbox row; their series start at zero.
var inboxStates = []dialects.InboxState{dialects.InboxReceived, dialects.InboxRelayed}

// Registry is where the metrics are registered; /metrics serves it.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// SetEngine gives the gauges that read the engine (in-flight rows, mailbox
// lengths) their engine once it runs; nil once it stopped.
func (m *Metrics) SetEngine(e *actors.Engine) { m.engine.Store(e) }

// SetWakeups records what wakes the relay now: logical replication or
// probes, and the source's state. It must not block: the wake-up listener
// calls it on every change.
func (m *Metrics) SetWakeups(st dialects.WakeupStatus) {
	m.wakeupsStatus.Store(&st)
	m.families.wakeups.DeletePartialMatch(prometheus.Labels{"outbox": m.outbox})
	m.wakeups.WithLabelValues(st.Kind(), string(st.State)).Set(1)
}

// setHorizon records the sampler's reading of the horizon.
func (m *Metrics) setHorizon(h *HorizonView) {
	age := 0.0
	if h.Holder != nil {
		age = h.Holder.OpenSeconds
	}
	m.horizonAge.Set(age)
	m.deadVersions.Set(float64(h.DeadRowVersions))
}

// setWakeupSlot records where the wake-up slot stands (nil: no slot).
func (m *Metrics) setWakeupSlot(s *WakeupSlotView) {
	var retained, behind float64
	if s != nil {
		retained, behind = float64(s.RetainedBytes), float64(s.BehindBytes)
	}
	m.slotRetained.Set(retained)
	m.slotBehind.Set(behind)
}

// Wakeups is the last status SetWakeups recorded (false: none yet).
func (m *Metrics) Wakeups() (dialects.WakeupStatus, bool) {
	if st := m.wakeupsStatus.Load(); st != nil {
		return *st, true
	}
	return dialects.WakeupStatus{}, false
}

// factory registers metrics in one registry.
type factory struct{ reg prometheus.Registerer }

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(g)
	return g
}

func (f factory) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}

var (
	_ actors.Observer       = (*Metrics)(nil)
	_ actors.CopiesObserver = (*Metrics)(nil)
)

// Claimed counts claimed rows.
func (m *Metrics) Claimed(rows int, _ time.Duration) { m.claimed.Add(float64(rows)) }

// Released: rows handed back untouched are neither delivered nor failed;
// no metric counts them.
func (m *Metrics) Released(int) {}

// LostClaims counts lost claims.
func (m *Metrics) LostClaims(rows int) { m.lost.Add(float64(rows)) }

// Completed: the completion statements' timing is the engine's business.
func (m *Metrics) Completed(int, time.Duration) {}

// Route resolves the series of one route once, so that a finished row
// costs a few atomic adds.
func (m *Metrics) Route(route, destination string) actors.RouteObserver {
	m.mu.Lock()
	dc := m.dests[destination]
	if dc == nil {
		dc = &destinationCounts{}
		m.dests[destination] = dc
	}
	m.mu.Unlock()
	return &routeMetrics{
		delivered: m.deliveries.WithLabelValues(route, destination, actors.Delivered.String()),
		retried:   m.deliveries.WithLabelValues(route, destination, actors.Retried.String()),
		dead:      m.deliveries.WithLabelValues(route, destination, actors.Dead.String()),
		duration:  m.duration.WithLabelValues(destination),
		latency:   m.latency.WithLabelValues(destination),
		counts:    dc,
	}
}

type routeMetrics struct {
	delivered, retried, dead prometheus.Counter
	duration, latency        prometheus.Observer
	counts                   *destinationCounts
}

func (r *routeMetrics) Finished(o actors.DeliveryOutcome, publish, latency time.Duration) {
	switch o {
	case actors.Delivered:
		r.delivered.Inc()
		r.counts.delivered.Add(1)
		if latency > 0 {
			r.latency.Observe(latency.Seconds())
		}
	case actors.Retried:
		r.retried.Inc()
		r.counts.retried.Add(1)
	case actors.Dead:
		r.dead.Inc()
		r.counts.dead.Add(1)
	}
	if publish > 0 {
		r.duration.Observe(publish.Seconds())
	}
}

// setRows publishes a count of the table: every state found, and zero for
// the four that were not.
func (m *Metrics) setRows(rows map[string]int64, took time.Duration) {
	m.families.rows.DeletePartialMatch(prometheus.Labels{"outbox": m.outbox})
	for _, s := range dialects.States {
		m.rows.WithLabelValues(string(s)).Set(0)
	}
	for s, n := range rows {
		m.rows.WithLabelValues(s).Set(float64(n))
	}
	m.countTook.Set(took.Seconds())
}

// CopiesWritten counts the copies a completion wrote (actors.CopiesObserver).
func (m *Metrics) CopiesWritten(destination string, kind dialects.CopyKind, n int) {
	m.copied.WithLabelValues(destination, copyReason(kind)).Add(float64(n))
}

// copyReason names a kind of copy in queuebox_copies_written_total.
func copyReason(k dialects.CopyKind) string {
	switch k {
	case dialects.CopyRetry:
		return "retry"
	case dialects.CopyDefer:
		return "defer"
	case dialects.CopyBehind:
		return "behind"
	}
	return "dead"
}

// setCopies publishes a count of the copies: the four states of each
// destination that has copies.
func (m *Metrics) setCopies(counts []CopyCountsView) {
	m.families.copies.DeletePartialMatch(prometheus.Labels{"outbox": m.outbox})
	for _, c := range counts {
		for st, n := range c.Copies {
			m.copies.WithLabelValues(c.Destination, st).Set(float64(n))
		}
	}
}

func (m *Metrics) setOldestDue(d time.Duration) { m.oldest.Set(d.Seconds()) }

// setInbox publishes a count of the inbox table: every state found, and
// zero for the two that were not.
func (m *Metrics) setInbox(st dialects.InboxStats) {
	m.families.inboxRows.DeletePartialMatch(prometheus.Labels{"outbox": m.outbox})
	for _, s := range inboxStates {
		m.inboxRows.WithLabelValues(string(s)).Set(0)
	}
	for s, n := range st.Rows {
		m.inboxRows.WithLabelValues(string(s)).Set(float64(n))
	}
	m.setInboxAge(st.OldestReceived)
}

func (m *Metrics) setInboxAge(d time.Duration) { m.inboxAge.Set(d.Seconds()) }

// destinationTotals reads the cumulative counts per destination.
func (m *Metrics) destinationTotals() map[string][3]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string][3]int64, len(m.dests))
	for name, c := range m.dests {
		out[name] = [3]int64{c.delivered.Load(), c.retried.Load(), c.dead.Load()}
	}
	return out
}

// CountPurges wraps the engine's dialect so that every retention delete is
// counted in queuebox_retention_deleted_total. The janitor tells no
// observer what it deleted; the dialect's answer is exact.
func (m *Metrics) CountPurges(d dialects.Dialect) dialects.Dialect {
	return purgeCounter{Dialect: d, deleted: m.retention}
}

type purgeCounter struct {
	dialects.Dialect
	deleted *prometheus.CounterVec
}

func (p purgeCounter) OutboxPurge(ctx context.Context, pp dialects.PurgeParams) (int, error) {
	n, err := p.Dialect.OutboxPurge(ctx, pp)
	if n > 0 {
		p.deleted.WithLabelValues(string(pp.State)).Add(float64(n))
	}
	return n, err
}
