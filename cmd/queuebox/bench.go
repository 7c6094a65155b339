package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/queuebox/queuebox/benchmarks"
	"github.com/queuebox/queuebox/bootstrap"
)

func benchCmd() *cobra.Command {
	var o benchmarks.Options
	c := &cobra.Command{
		Use:   "bench",
		Short: "Run the benchmark scenarios against a real PostgreSQL and print one table",
		Long: "bench runs named scenarios (drains, latency, producer cost, replicas, mailbox sizes) against\n" +
			"a real PostgreSQL: --database-url, or else a throwaway cluster with durable settings that it\n" +
			"removes at the end. Each scenario uses a schema of its own. docs/performance.md explains the method.\n\n" +
			"Scenarios: " + scenarioNames() + "\n\nThe ratios compare scenarios of one run: a scenario that is compared against raw, drain or\n" +
			"drain-keys brings them along (drain-keys brings drain and raw, backlog brings drain-keys and\n" +
			"raw, a broker scenario brings drain-keys). The broker scenarios (rabbitmq, nats, kafka) use\n" +
			"--amqp-url, --nats-url and --kafka-brokers, else $QUEUEBOX_BENCH_AMQP_URL,\n" +
			"$QUEUEBOX_BENCH_NATS_URL and $QUEUEBOX_BENCH_KAFKA_BROKERS, else the local RabbitMQ and NATS\n" +
			"and kfake in this process.\n\n" +
			"The table has the columns that some scenario of the run fills:\n" +
			"  rows/s      rows drained (producer: inserted) per second\n" +
			"  vs raw      a drain's rows/s over the raw loop's in the same run: how much of the bare\n" +
			"              claim and complete statements' pace the engine keeps (1.00: all of it)\n" +
			"  ratio       the scenario's own comparison: backlog and drain-held against drain-keys;\n" +
			"              rabbitmq, nats and kafka, the relay against drain-keys; replicas, three\n" +
			"              processes against one; producer, inserts with what QueueBox installs against\n" +
			"              without; history and tracing, on against the mean of off (all rows/s over\n" +
			"              rows/s); long-transaction, the p99 of the hold's last 30 s against the 30 s\n" +
			"              before the hold\n" +
			"  vs ceiling  a broker's relay against a plain publisher of the same client library, same\n" +
			"              broker and run: the share of what the broker takes that the relay reaches\n" +
			"  p50/p95/p99 ms latencies; peak RSS MB the relay's memory; db CPU PostgreSQL's share of\n" +
			"              the CPU time (a throwaway cluster only); failed rows not delivered",
		Example: "  queuebox bench                                   # every scenario, on a throwaway cluster\n" +
			"  queuebox bench --scenarios drain,latency --rows 20000\n" +
			"  queuebox bench --database-url postgres://bench@db:5432/bench --json bench.json",
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			for name, v := range map[string]int{"rows": o.Rows, "payload-bytes": o.PayloadBytes, "seconds": o.Seconds, "rate": o.Rate} {
				if f.Changed(name) && v == 0 { // negatives: benchmarks.Run
					return &usageError{benchmarks.NotPositive(name, v)}
				}
			}
			// The first SIGINT or SIGTERM stops the run, which still
			// prints what finished. Its clean-up cannot be cut short, so
			// the handler lets go at once: a second signal takes its
			// default action and ends the process.
			sig := bootstrap.CatchStopSignals()
			defer sig.Release()
			defer context.AfterFunc(sig.Stop, sig.Release)()
			o.Out, o.Progress = cmd.OutOrStdout(), cmd.ErrOrStderr()
			results, err := benchmarks.Run(sig.Stop, o)
			sig.Release()
			if benchmarks.IsUsage(err) {
				return &usageError{err}
			}
			if s := sig.Signal(); s != nil && err != nil {
				return interrupted(s, o, results, err)
			}
			return err
		},
	}
	fl := c.Flags()
	fl.StringVar(&o.DatabaseURL, "database-url", "", "the PostgreSQL server (default: a throwaway cluster, removed afterwards)")
	fl.StringSliceVar(&o.Scenarios, "scenarios", nil, "the scenarios to run, comma-separated (default: all)")
	fl.IntVar(&o.Rows, "rows", 100000, "rows per drain (backlog: ten times as many)")
	fl.IntVar(&o.PayloadBytes, "payload-bytes", 200, "the size of each row's payload")
	// 0: each scenario's own default (a default of 10 here would read
	// as given, and cut long-transaction's hold to 10 s).
	fl.IntVar(&o.Seconds, "seconds", 0, "how long the latency and producer scenarios run (default 10), the long-transaction hold (default 90), wake-after-idle's quiet spell (default 8) and each trickle rate (default 30)")
	fl.StringVar(&o.Binary, "binary", "", "the queuebox executable that the scenarios which run the binary start (replicas, wake-after-idle, trickle), to compare builds (default: this one)")
	fl.IntVar(&o.Rate, "rate", 1000, "the latency scenario's insert rate, rows per second")
	fl.StringVar(&o.JSON, "json", "", "also write the results to this file as JSON")
	fl.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of each scenario into this folder")
	fl.StringVar(&o.AMQPURL, "amqp-url", "", "the RabbitMQ of the rabbitmq scenario (default: $QUEUEBOX_BENCH_AMQP_URL, else amqp://guest:guest@127.0.0.1:5672/)")
	fl.StringVar(&o.NATSURL, "nats-url", "", "the NATS server, with JetStream, of the nats scenario (default: $QUEUEBOX_BENCH_NATS_URL, else nats://127.0.0.1:4222)")
	fl.StringSliceVar(&o.KafkaBrokers, "kafka-brokers", nil, "the Kafka brokers of the kafka scenario, host:port,... (default: $QUEUEBOX_BENCH_KAFKA_BROKERS, else kfake in this process)")
	return c
}

func scenarioNames() string {
	var s string
	for i, sc := range benchmarks.Scenarios() {
		if i > 0 {
			s += ", "
		}
		s += sc.Name
	}
	return s
}

// interrupted is the error of a run stopped by a signal: what was kept,
// what was removed, and the exit code 128 + the signal's number.
func interrupted(s os.Signal, o benchmarks.Options, results []benchmarks.Result, err error) error {
	kept := "no scenario finished"
	if len(results) > 0 {
		kept = "the table above holds the scenarios that finished"
		if o.JSON != "" && !strings.Contains(err.Error(), "--json") {
			kept += ", and " + o.JSON + " their results"
		}
	}
	removed := "the throwaway cluster and the replicas it started are gone"
	if o.DatabaseURL != "" {
		removed = "the scenarios' schemas and the replicas it started are gone"
	}
	code := 130
	if n, ok := s.(syscall.Signal); ok {
		code = 128 + int(n)
	}
	return &bootstrap.ExitError{Code: code, Err: fmt.Errorf("bench stopped (signal: %v): %s; %s", s, kept, removed)}
}
