package benchmarks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Options configure a run of the benchmark suite.
type Options struct {
	// DatabaseURL is the PostgreSQL server to use; empty starts a durable
	// throwaway cluster and removes it afterwards.
	DatabaseURL string
	// Scenarios to run, by name; empty runs every scenario.
	Scenarios []string
	// Rows is the backlog of a drain (the backlog scenario takes ten times
	// as many).
	Rows int
	// PayloadBytes is the size of each row's JSON payload.
	PayloadBytes int
	// Seconds is how long the producer and latency scenarios run (each
	// workload, each table), and how long long-transaction holds its
	// transactions open (default 90 s there).
	Seconds int
	// Rate is the latency scenario's steady insert rate, rows per second.
	Rate int
	// Binary is the queuebox executable that the scenarios which run the
	// binary start (replicas, wake-after-idle, trickle); empty is this
	// process's own.
	Binary string
	// JSON, when set, receives the results as a JSON list.
	JSON string
	// secondsGiven: Seconds came from the caller, not the default (the
	// long-transaction hold has a default of its own).
	secondsGiven bool
	// CPUProfile, when set, is a folder that receives a CPU profile of each
	// in-process scenario.
	CPUProfile string
	// AMQPURL, NATSURL and KafkaBrokers are the brokers of the broker
	// scenarios; empty reads QUEUEBOX_BENCH_AMQP_URL,
	// QUEUEBOX_BENCH_NATS_URL and QUEUEBOX_BENCH_KAFKA_BROKERS, and
	// without them the local RabbitMQ and NATS, and kfake in this process.
	AMQPURL, NATSURL string
	KafkaBrokers     []string
	// Out receives the table; Progress the progress bar and notes.
	Out, Progress io.Writer
	// forceBar draws the bar on Progress even when it is no terminal, at
	// every change (tests).
	forceBar bool
}

// Result is one measured line of the table.
type Result struct {
	Scenario string `json:"scenario"`
	// Variant tells lines of one scenario apart: a mailbox size, a
	// workload, the number of replicas.
	Variant   string `json:"variant,omitempty"`
	Rows      int    `json:"rows"`
	Keys      int    `json:"keys"`
	Replicas  int    `json:"replicas"`
	BatchSize int    `json:"batch_size"`
	Mailbox   string `json:"mailbox"`
	// RowsPerSec is the throughput: drained, inserted or delivered rows per
	// second (the producer scenario's rows inserted per second; its note
	// gives the transactions).
	RowsPerSec float64 `json:"rows_per_sec"`
	// RatioToRaw is a drain's rate against the raw loop of the same run.
	RatioToRaw *float64 `json:"ratio_to_raw,omitempty"`
	// Ratio is what the scenario compares: with what QueueBox installs
	// against without (producer), three replicas against one (replicas),
	// against the 100,000-row rate (backlog), against drain-keys (a
	// broker's relay), tracing on against off (tracing), transactions per
	// row against the budget (trickle).
	Ratio *float64 `json:"ratio,omitempty"`
	// RatioToCeiling is a broker's relay against the plain publisher of
	// the same broker and run.
	RatioToCeiling *float64 `json:"ratio_to_ceiling,omitempty"`
	// Latencies, where measured, in milliseconds.
	P50 *float64 `json:"p50_ms,omitempty"`
	P95 *float64 `json:"p95_ms,omitempty"`
	P99 *float64 `json:"p99_ms,omitempty"`
	// TransactionsPerSec is the relay's transactions per second on its
	// database: idle (wake-after-idle), or at a trickle (trickle).
	TransactionsPerSec *float64 `json:"transactions_per_sec,omitempty"`
	// TransactionsPerRow is the relay's transactions per delivered row
	// (trickle).
	TransactionsPerRow *float64 `json:"transactions_per_row,omitempty"`
	// PeakRSSMB is the most memory the relay held during the scenario: the
	// bench process's for the drains it runs in process (the engine and
	// the bench's own bookkeeping; garbage of earlier scenarios is
	// collected and returned first), the largest replica's for replicas.
	// Zero where nothing relays (producer).
	PeakRSSMB float64 `json:"peak_rss_mb"`
	// DBCPUShare is the database's share of the CPU time that the database
	// and the relay used (only for a throwaway cluster on this machine).
	DBCPUShare *float64 `json:"db_cpu_share,omitempty"`
	// RelayCPU and DBCPU are the CPU seconds the relay and the database
	// server used (DBCPU only for a throwaway cluster on this machine).
	RelayCPU float64 `json:"relay_cpu_seconds"`
	DBCPU    float64 `json:"db_cpu_seconds,omitempty"`
	Seconds  float64 `json:"seconds"`
	// Failed counts failed transactions (producer) or rows not delivered.
	Failed int64  `json:"failed"`
	Note   string `json:"note,omitempty"`
	// ClaimPlans is, for backlog, both claims' EXPLAIN ANALYZE on the
	// large table before the drain (each run and rolled back).
	ClaimPlans string `json:"claim_plans,omitempty"`
}

// Scenario is one named benchmark.
type Scenario struct {
	Name string
	What string
	run  func(ctx context.Context, e *env) ([]Result, error)
}

// Scenarios lists every scenario in the order they run. A scenario runs
// soon after the one its ratio compares it with (backlog after
// drain-keys): the server slows a little as a run goes on (its files and
// caches fill), which would otherwise count against the later one.
func Scenarios() []Scenario {
	return []Scenario{
		{"raw", "claim and complete statements in two loops, no engine (the baseline)", runRaw},
		{"drain", "drain an unkeyed backlog", runDrain(0)},
		{"drain-keys", "drain a backlog over 1,000 keys", runDrain(1000)},
		{"backlog", "drain a backlog ten times as deep, 1,000 keys", runBacklog},
		{"rabbitmq", "drain over 1,000 keys into RabbitMQ, and its plain publisher's ceiling", runBroker("rabbitmq")},
		{"nats", "drain over 1,000 keys into NATS JetStream, and its plain publisher's ceiling", runBroker("nats")},
		{"kafka", "drain over 1,000 keys into Kafka, and its plain publisher's ceiling", runBroker("kafka")},
		{"hot-keys", "drain a backlog over 10 keys", runDrain(10)},
		{"one-key", "drain a backlog of one key", runDrain(1)},
		{"drain-held", "drain-keys while a snapshot is held from before the rows were inserted", runDrainHeld},
		{"latency", "steady single-row inserts; commit to delivery", runLatency},
		{"wake-after-idle", "what an idle relay costs its database, and its first row after a quiet spell, with logical wake-ups and with probes (the binary; --seconds sets the quiet spell, default 8)", runWakeAfterIdle},
		{"trickle", "what a relay costs its database at 1, 10, 50 and 200 single-row transactions a second over 100 keys (the binary, logical wake-ups; --seconds per rate, default 30): transactions per delivered row against 3 a row and 2 a second", runTrickle},
		{"outboxes", "one relay (the binary) for 50 outboxes, the schemas of one database: idle transactions per second per outbox, the first row after a quiet spell on any of them (--seconds, default 8), memory; and a drain of --rows spread over the 50 against one outbox", runOutboxes},
		{"long-transaction", "steady single-row inserts while a reader, then a writer, holds a transaction open (--seconds, default 90); p50/p99 per 30 s window", runLongTransaction},
		{"producer", "insert throughput with and without what QueueBox installs (pgbench, 8 clients)", runProducer},
		{"replicas", "one relay process against three", runReplicas},
		{"mailbox", "drain over 1,000 keys with every mailbox at 1, 16, 256, 4096 and unbounded", runMailbox},
		{"batch", "drain over 1,000 keys with claims of 100, 500 and 2,000 rows", runBatch},
		{"in-flight", "drain over 1,000 keys with 1,000, 10,000 and 50,000 rows in flight at most", runInFlight},
		{"http", "drain to the built-in HTTP receiver, unkeyed and over 1,000 keys", runHTTP},
		{"history", "drain over 1,000 keys with the attempt history off, on, recording every delivery, and back; ratio: on against the mean of off", runHistory},
		{"fanout", "drain over 1,000 keys through a route to one null destination and through a route to three, in turns (one, three, three, one); ratio: rows per second of three against the mean of one", runFanOut},
		{"inbox-http", "messages accepted per second by an HTTP inbox source, 8 clients", runInboxHTTP},
		{"tracing", "drain over 1,000 keys with tracing off and on (a span per delivery, OTLP/HTTP to a receiver in this process, always_on)", runTracing},
	}
}

// Run runs the selected scenarios and prints the table. When a scenario
// fails or ctx ends, the scenarios that finished are still printed (and
// written to Options.JSON) before the error is returned.
func Run(ctx context.Context, o Options) ([]Result, error) {
	for _, f := range []struct {
		name string
		v    int
	}{{"rows", o.Rows}, {"payload-bytes", o.PayloadBytes}, {"seconds", o.Seconds}, {"rate", o.Rate}} {
		if f.v < 0 {
			return nil, NotPositive(f.name, f.v)
		}
	}
	if o.Rows == 0 {
		o.Rows = 100000
	}
	if o.PayloadBytes == 0 {
		o.PayloadBytes = 200
	}
	o.secondsGiven = o.Seconds > 0
	if o.Seconds == 0 {
		o.Seconds = 10
	}
	if o.Rate == 0 {
		o.Rate = 1000
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Progress == nil {
		o.Progress = os.Stderr
	}
	selected, err := selectScenarios(o.Scenarios)
	if err != nil {
		return nil, err
	}
	// The results go to a file made beside --json before anything runs,
	// so that a path that cannot be written costs no run, and replace the
	// file only once there are results: a run that fails first leaves an
	// earlier file as it was.
	var jsonFile *os.File
	if o.JSON != "" {
		if fi, err := os.Stat(o.JSON); err == nil && fi.IsDir() {
			return nil, &UsageError{fmt.Sprintf("--json %s: is a folder; give a file name, such as %s", o.JSON, filepath.Join(o.JSON, "bench.json"))}
		}
		if jsonFile, err = os.CreateTemp(filepath.Dir(o.JSON), ".queuebox-bench-*.json"); err != nil {
			return nil, &UsageError{fmt.Sprintf("--json %s: %v; give a file in a folder that exists and may be written", o.JSON, unwrapPath(err))}
		}
		defer func() {
			_ = jsonFile.Close()
			_ = os.Remove(jsonFile.Name()) // gone already when renamed
		}()
	}
	if slices.ContainsFunc(selected, func(s Scenario) bool { return s.Name == "producer" }) {
		if _, err := pgbenchPath(); err != nil {
			return nil, err
		}
	}
	if err := checkBrokers(ctx, &o, selected); err != nil {
		return nil, err
	}
	results, runErr := runSelected(ctx, o, selected)
	if jsonFile != nil && len(results) > 0 {
		if err := writeJSON(jsonFile, o.JSON, results); err != nil {
			err = fmt.Errorf("--json %s: the results could not be written: %w", o.JSON, err)
			if runErr == nil {
				return results, err
			}
			runErr = fmt.Errorf("%w; and %v", runErr, err)
		}
	}
	if runErr != nil {
		return results, runErr
	}
	return results, ctx.Err()
}

// runSelected starts the database, runs the scenarios and prints the table
// of those that finished.
func runSelected(ctx context.Context, o Options, selected []Scenario) (results []Result, err error) {
	e, err := newEnv(ctx, o)
	if err != nil {
		return nil, err
	}
	defer e.close()
	defer func() {
		e.progress.finish()
		if len(results) > 0 {
			ratios(results)
			printTable(o.Out, results, e.conditions())
			if e.plan != "" {
				fmt.Fprintf(o.Out, "\nThe claims' plans on the backlog table (%d rows, 1,000 keys; each run and rolled back):\n%s\n", 10*o.Rows, e.plan)
			}
		}
	}()
	for i, s := range selected {
		e.progress.start(i, len(selected), s, plannedRows(s.Name, e.o, e.hold()))
		rs, err := e.profiled(s.Name, func() ([]Result, error) { return s.run(ctx, e) })
		e.progress.finish()
		e.dropSchemas()
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, context.Canceled) {
				return results, ctx.Err() // interrupted
			}
			return results, fmt.Errorf("scenario %s: %w", s.Name, err)
		}
		results = append(results, rs...)
	}
	return results, nil
}

// selectScenarios resolves --scenarios (empty: all), once each, in the
// order of Scenarios, adding what the ratios compare against.
func selectScenarios(names []string) ([]Scenario, error) {
	all := Scenarios()
	if names == nil {
		return all, nil
	}
	list := make([]string, len(all))
	for j, s := range all {
		list[j] = s.Name
	}
	if len(names) == 0 {
		return nil, &UsageError{"--scenarios is empty; name at least one of " + strings.Join(list, ", ") + ", or leave the flag out to run them all"}
	}
	var selected []Scenario
	has := func(name string) bool {
		return slices.ContainsFunc(selected, func(s Scenario) bool { return s.Name == name })
	}
	for _, name := range names {
		i := slices.IndexFunc(all, func(s Scenario) bool { return s.Name == name })
		if i < 0 {
			return nil, &UsageError{fmt.Sprintf("--scenarios: %q is not a scenario; the scenarios are %s", name, strings.Join(list, ", "))}
		}
		if !has(name) {
			selected = append(selected, all[i])
		}
	}
	// The ratios need the raw loop and the 100,000-row drain of the same
	// run: add them when a scenario that compares against them runs.
	need := func(name string) {
		if !has(name) {
			i := slices.IndexFunc(all, func(s Scenario) bool { return s.Name == name })
			selected = append([]Scenario{all[i]}, selected...)
		}
	}
	for _, s := range slices.Clone(selected) {
		switch s.Name {
		case "drain-keys", "hot-keys", "one-key", "mailbox", "batch", "in-flight":
			need("drain")
			need("raw")
		case "drain":
			need("raw")
		case "backlog", "drain-held":
			need("drain-keys")
			need("raw")
		case "rabbitmq", "nats", "kafka":
			need("drain-keys")
		}
	}
	slices.SortStableFunc(selected, func(a, b Scenario) int {
		return slices.IndexFunc(all, func(s Scenario) bool { return s.Name == a.Name }) -
			slices.IndexFunc(all, func(s Scenario) bool { return s.Name == b.Name })
	})
	return selected, nil
}

// writeJSON writes the results into f, then puts f in place of path.
func writeJSON(f *os.File, path string, results []Result) error {
	b, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// NotPositive is the usage error of a numeric flag that is not a positive
// number.
func NotPositive(flag string, v int) error {
	return &UsageError{fmt.Sprintf("--%s: %d is not a positive number; give one, or leave the flag out for its default", flag, v)}
}

// unwrapPath drops the path an *os.PathError repeats.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// UsageError is a bad option (exit 2).
type UsageError struct{ msg string }

func (u *UsageError) Error() string { return u.msg }

// IsUsage reports whether err is a bad option.
func IsUsage(err error) bool {
	var u *UsageError
	return errors.As(err, &u)
}

// ratios fills the ratios that compare lines of the same run.
func ratios(rs []Result) {
	find := func(scenario, variant string) *Result {
		for i := range rs {
			if rs[i].Scenario == scenario && (variant == "" || rs[i].Variant == variant) {
				return &rs[i]
			}
		}
		return nil
	}
	raw := find("raw", "")
	drainKeys := find("drain-keys", "")
	for i := range rs {
		r := &rs[i]
		switch r.Scenario {
		case "drain", "drain-keys", "hot-keys", "one-key", "mailbox", "batch", "in-flight", "http", "replicas":
			if raw != nil && raw.RowsPerSec > 0 {
				r.RatioToRaw = ptr(r.RowsPerSec / raw.RowsPerSec)
			}
		case "backlog", "drain-held":
			if raw != nil && raw.RowsPerSec > 0 {
				r.RatioToRaw = ptr(r.RowsPerSec / raw.RowsPerSec)
			}
			if drainKeys != nil && drainKeys.RowsPerSec > 0 {
				r.Ratio = ptr(r.RowsPerSec / drainKeys.RowsPerSec)
			}
		case "rabbitmq", "nats", "kafka":
			// The relay's line; the plain publisher's is no drain.
			if r.Variant == relayVariant && drainKeys != nil && drainKeys.RowsPerSec > 0 {
				r.Ratio = ptr(r.RowsPerSec / drainKeys.RowsPerSec)
			}
		}
	}
}

func ptr(f float64) *float64 { return &f }

// printTable prints the results, with only the columns that some line of
// the run fills: a run of drains has no latencies and no broker ceiling,
// and a column of dashes would say nothing. scenario, rows/s and failed
// are always there.
func printTable(w io.Writer, rs []Result, conditions string) {
	fmt.Fprintf(w, "\n%s\n\n", conditions)
	opt := func(f *float64, format string) string {
		if f == nil {
			return "-"
		}
		return fmt.Sprintf(format, *f)
	}
	type column struct {
		name   string
		filled func(r Result) bool
		cell   func(r Result) string
	}
	columns := []column{
		{"scenario", nil, func(r Result) string { return r.Scenario }},
		{"variant", func(r Result) bool { return r.Variant != "" }, func(r Result) string { return dash(r.Variant) }},
		{"rows", func(r Result) bool { return r.Rows != 0 }, func(r Result) string { return fmt.Sprint(r.Rows) }},
		{"keys", func(r Result) bool { return r.Keys != 0 }, func(r Result) string { return fmt.Sprint(r.Keys) }},
		{"replicas", func(r Result) bool { return r.Replicas != 0 }, func(r Result) string { return fmt.Sprint(r.Replicas) }},
		{"batch", func(r Result) bool { return r.BatchSize != 0 }, func(r Result) string { return fmt.Sprint(r.BatchSize) }},
		{"mailbox", func(r Result) bool { return r.Mailbox != "" }, func(r Result) string { return dash(r.Mailbox) }},
		{"rows/s", nil, func(r Result) string { return fmt.Sprintf("%.0f", r.RowsPerSec) }},
		{"vs raw", func(r Result) bool { return r.RatioToRaw != nil }, func(r Result) string { return opt(r.RatioToRaw, "%.2f") }},
		{"ratio", func(r Result) bool { return r.Ratio != nil }, func(r Result) string { return opt(r.Ratio, "%.2f") }},
		{"vs ceiling", func(r Result) bool { return r.RatioToCeiling != nil }, func(r Result) string { return opt(r.RatioToCeiling, "%.2f") }},
		{"p50 ms", func(r Result) bool { return r.P50 != nil }, func(r Result) string { return opt(r.P50, "%.1f") }},
		{"p95 ms", func(r Result) bool { return r.P95 != nil }, func(r Result) string { return opt(r.P95, "%.1f") }},
		{"p99 ms", func(r Result) bool { return r.P99 != nil }, func(r Result) string { return opt(r.P99, "%.1f") }},
		{"peak RSS MB", func(r Result) bool { return r.PeakRSSMB != 0 }, func(r Result) string { return fmt.Sprintf("%.0f", r.PeakRSSMB) }},
		{"db CPU", func(r Result) bool { return r.DBCPUShare != nil }, func(r Result) string { return percent(r.DBCPUShare) }},
		{"failed", nil, func(r Result) string { return fmt.Sprint(r.Failed) }},
	}
	shown := columns[:0:0]
	for _, c := range columns {
		if c.filled == nil || slices.ContainsFunc(rs, c.filled) {
			shown = append(shown, c)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	for _, c := range shown {
		fmt.Fprint(tw, c.name+"\t")
	}
	fmt.Fprintln(tw)
	for _, r := range rs {
		for _, c := range shown {
			fmt.Fprint(tw, c.cell(r)+"\t")
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
	for _, r := range rs {
		if r.Note != "" {
			name := r.Scenario
			if r.Variant != "" {
				name += " " + r.Variant
			}
			fmt.Fprintf(w, "%s: %s\n", name, r.Note)
		}
	}
}

func percent(f *float64) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100**f)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// since returns the seconds elapsed since t.
func since(t time.Time) float64 { return time.Since(t).Seconds() }
