package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
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
			"Scenarios: " + scenarioNames() + "\n\nThe ratios compare scenarios of one run: a scenario that is compared against raw, drain or\ndrain-keys brings them along (drain-keys brings drain and raw, backlog brings drain-keys and raw).",
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			for name, v := range map[string]int{"rows": o.Rows, "payload-bytes": o.PayloadBytes, "seconds": o.Seconds, "rate": o.Rate} {
				if f.Changed(name) && v <= 0 {
					return &usageError{fmt.Errorf("--%s: %d is not a positive number; give one, or leave the flag out for its default", name, v)}
				}
			}
			if f.Changed("scenarios") && len(o.Scenarios) == 0 {
				o.Scenarios = []string{} // given but empty: refused, not "all"
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go func() {
				<-ctx.Done()
				stop() // a second Ctrl-C ends the process at once
			}()
			o.Out, o.Progress = cmd.OutOrStdout(), cmd.ErrOrStderr()
			results, err := benchmarks.Run(ctx, o)
			if benchmarks.IsUsage(err) {
				return &usageError{err}
			}
			if err != nil && ctx.Err() != nil {
				what := "no scenario finished"
				if len(results) > 0 {
					what = "the table above holds the scenarios that finished"
					if o.JSON != "" {
						what += ", and " + o.JSON + " their results"
					}
				}
				return &bootstrap.ExitError{Code: 130, Err: fmt.Errorf("bench interrupted: %s; the throwaway cluster, the scenarios' schemas and the replicas it started are gone", what)}
			}
			return err
		},
	}
	fl := c.Flags()
	fl.StringVar(&o.DatabaseURL, "database-url", "", "the PostgreSQL server (default: a throwaway cluster, removed afterwards)")
	fl.StringSliceVar(&o.Scenarios, "scenarios", nil, "the scenarios to run, comma-separated (default: all)")
	fl.IntVar(&o.Rows, "rows", 100000, "rows per drain (backlog: ten times as many)")
	fl.IntVar(&o.PayloadBytes, "payload-bytes", 200, "the size of each row's payload")
	fl.IntVar(&o.Seconds, "seconds", 10, "how long the latency and producer scenarios run")
	fl.IntVar(&o.Rate, "rate", 1000, "the latency scenario's insert rate, rows per second")
	fl.StringVar(&o.JSON, "json", "", "also write the results to this file as JSON")
	fl.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of each scenario into this folder")
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
