package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/queuebox/queuebox/benchmarks"
)

func benchCmd() *cobra.Command {
	var o benchmarks.Options
	c := &cobra.Command{
		Use:   "bench",
		Short: "Run the benchmark scenarios against a real PostgreSQL and print one table",
		Long: "bench runs named scenarios (drains, latency, producer cost, replicas, mailbox sizes) against\n" +
			"a real PostgreSQL: --database-url, or else a throwaway cluster with durable settings that it\n" +
			"removes at the end. Each scenario uses a schema of its own. docs/performance.md explains the method.\n\n" +
			"Scenarios: " + scenarioNames(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			o.Out, o.Progress = cmd.OutOrStdout(), cmd.ErrOrStderr()
			_, err := benchmarks.Run(ctx, o)
			if benchmarks.IsUsage(err) {
				return &usageError{err}
			}
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&o.DatabaseURL, "database-url", "", "the PostgreSQL server (default: a throwaway cluster, removed afterwards)")
	f.StringSliceVar(&o.Scenarios, "scenarios", nil, "the scenarios to run, comma-separated (default: all)")
	f.IntVar(&o.Rows, "rows", 100000, "rows per drain (backlog: ten times as many)")
	f.IntVar(&o.PayloadBytes, "payload-bytes", 200, "the size of each row's payload")
	f.IntVar(&o.Seconds, "seconds", 10, "how long the latency and producer scenarios run")
	f.IntVar(&o.Rate, "rate", 1000, "the latency scenario's insert rate, rows per second")
	f.StringVar(&o.JSON, "json", "", "also write the results to this file as JSON")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of each scenario into this folder")
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
