package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/queuebox/queuebox/bootstrap"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/migrations"
	"github.com/queuebox/queuebox/routing"
)

var configPath string

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "queuebox",
		Short:         "QueueBox relays outbox rows from your database to HTTP endpoints and brokers",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&configPath, "config", "queuebox.yaml", "the configuration file")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &usageError{fmt.Errorf("%v (see `%s --help`)", err, c.CommandPath())}
	})
	root.AddCommand(runCmd(), devCmd(), migrateCmd(), configCmd(), statusCmd(), replayCmd(), deadCmd(), versionCmd())
	for _, c := range root.Commands() {
		c.Args = wrapArgs(c.Args)
	}
	return root
}

func wrapArgs(a cobra.PositionalArgs) cobra.PositionalArgs {
	if a == nil {
		a = cobra.NoArgs
	}
	return func(c *cobra.Command, args []string) error {
		if err := a(c, args); err != nil {
			return &usageError{fmt.Errorf("%v (see `%s --help`)", err, c.CommandPath())}
		}
		return nil
	}
}

func load() (*bootstrap.Loaded, error) { return bootstrap.Load(configPath) }

// withDB loads the configuration, opens the database and runs f.
func withDB(f func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error) error {
	l, err := load()
	if err != nil {
		return err
	}
	ctx := context.Background()
	d, err := bootstrap.OpenDialect(ctx, l)
	if err != nil {
		return err
	}
	defer d.Close()
	return f(ctx, l, d)
}

func runCmd() *cobra.Command {
	var migrate bool
	c := &cobra.Command{
		Use:   "run",
		Short: "Run the relay: claim, deliver, renew, retain",
		RunE: func(*cobra.Command, []string) error {
			return withDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error {
				log := bootstrap.NewLogger(l, bootstrap.Stderr)
				return bootstrap.Run(ctx, l, d, log, bootstrap.RunOptions{Migrate: migrate})
			})
		},
	}
	c.Flags().BoolVar(&migrate, "migrate", false, "apply pending migrations before starting")
	return c
}

func devCmd() *cobra.Command {
	var rate float64
	c := &cobra.Command{
		Use:   "dev",
		Short: "Start a throwaway PostgreSQL, the relay, a receiver that prints what it gets, and sample traffic",
		RunE: func(*cobra.Command, []string) error {
			return bootstrap.Dev(context.Background(), bootstrap.DevOptions{Rate: rate, Out: os.Stdout})
		},
	}
	c.Flags().Float64Var(&rate, "rate", 2, "sample rows inserted per second (0 for none)")
	return c
}

func migrateCmd() *cobra.Command {
	c := &cobra.Command{Use: "migrate", Short: "Apply or show the bundled schema migrations"}
	c.AddCommand(&cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration",
		RunE: func(*cobra.Command, []string) error {
			return withDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error {
				applied, err := migrations.Up(ctx, d)
				if err != nil {
					return err
				}
				if len(applied) == 0 {
					fmt.Printf("The schema is current (version %d).\n", migrations.Latest(d.Name()))
					return nil
				}
				for _, m := range applied {
					fmt.Printf("applied V%d %s\n", m.Version, m.Name)
				}
				return nil
			})
		},
	}, &cobra.Command{
		Use:   "status",
		Short: "List the bundled migrations and whether each is applied",
		RunE: func(*cobra.Command, []string) error {
			return withDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error {
				st, err := migrations.StatusOf(ctx, d)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "VERSION\tNAME\tAPPLIED")
				pending := 0
				for _, s := range st {
					at := "pending"
					if s.Applied {
						at = s.AppliedAt.UTC().Format(time.RFC3339)
						if s.Changed {
							at += "  (the bundled file has changed since)"
						}
					} else {
						pending++
					}
					fmt.Fprintf(w, "V%d\t%s\t%s\n", s.Version, s.Name, at)
				}
				w.Flush()
				if pending > 0 {
					fmt.Printf("%d pending: run `queuebox migrate up`.\n", pending)
				}
				return nil
			})
		},
	})
	for _, s := range c.Commands() {
		s.Args = wrapArgs(s.Args)
	}
	return c
}

func configCmd() *cobra.Command {
	c := &cobra.Command{Use: "config", Short: "Work with the configuration file"}
	check := &cobra.Command{
		Use:   "check",
		Short: "Validate the configuration and print it with secrets redacted",
		RunE: func(*cobra.Command, []string) error {
			l, err := load()
			if err != nil {
				return err
			}
			out, err := yaml.Marshal(l.Config)
			if err != nil {
				return err
			}
			fmt.Print(l.Secrets.Redact(string(out)))
			fmt.Fprintf(os.Stderr, "%s is valid.\n", l.File)
			return nil
		},
	}
	check.Args = wrapArgs(nil)
	c.AddCommand(check)
	return c
}

func statusCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status",
		Short: "Rows per state, the oldest pending row's age, dead rows per topic",
		RunE: func(*cobra.Command, []string) error {
			return withDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error {
				st, err := d.OutboxStats(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					rows := map[string]int64{}
					for s, n := range st.Rows {
						rows[string(s)] = n
					}
					return json.NewEncoder(os.Stdout).Encode(map[string]any{
						"rows": rows, "oldestPendingSeconds": st.OldestPending.Seconds(), "deadByTopic": st.DeadByTopic,
					})
				}
				w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "STATE\tROWS")
				for _, s := range dialects.States {
					fmt.Fprintf(w, "%s\t%d\n", s, st.Rows[s])
				}
				w.Flush()
				fmt.Printf("\noldest pending: %s\n", st.OldestPending.Round(time.Millisecond))
				if len(st.DeadByTopic) > 0 {
					fmt.Println("\ndead rows per topic:")
					topics := make([]string, 0, len(st.DeadByTopic))
					for t := range st.DeadByTopic {
						topics = append(topics, t)
					}
					sort.Strings(topics)
					w = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
					for _, t := range topics {
						fmt.Fprintf(w, "  %s\t%d\n", t, st.DeadByTopic[t])
					}
					w.Flush()
				}
				return nil
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return c
}

// filterFlags are the row filters shared by replay and dead list.
type filterFlags struct {
	ids           []string
	states        []string
	topic, key    string
	since, until  string
	errorContains string
}

func (f *filterFlags) register(c *cobra.Command, stateHelp string) {
	c.Flags().StringArrayVar(&f.ids, "id", nil, "a row id (repeatable)")
	c.Flags().StringArrayVar(&f.states, "state", nil, stateHelp)
	c.Flags().StringVar(&f.topic, "topic", "", "a topic pattern (order.*, order.#)")
	c.Flags().StringVar(&f.key, "key", "", "rows of this key")
	c.Flags().StringVar(&f.since, "since", "", "updated at or after: RFC 3339 time, or a duration ago (24h)")
	c.Flags().StringVar(&f.until, "until", "", "updated before: RFC 3339 time, or a duration ago")
	c.Flags().StringVar(&f.errorContains, "error-contains", "", "text in last_error")
}

func parseWhen(flag, s string, now time.Time) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return &t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		t := now.Add(-d)
		return &t, nil
	}
	return nil, &usageError{fmt.Errorf("--%s %q is neither an RFC 3339 time (2025-01-31T12:00:00Z) nor a duration (24h)", flag, s)}
}

func (f *filterFlags) filter(allowed []dialects.State) (dialects.Filter, error) {
	var out dialects.Filter
	for _, s := range f.ids {
		id, err := uuid.Parse(s)
		if err != nil {
			return out, &usageError{fmt.Errorf("--id %q is not a row id (a UUID)", s)}
		}
		out.IDs = append(out.IDs, id)
	}
	for _, s := range f.states {
		st := dialects.State(s)
		ok := false
		for _, a := range allowed {
			ok = ok || a == st
		}
		if !ok {
			names := make([]string, len(allowed))
			for i, a := range allowed {
				names[i] = string(a)
			}
			return out, &usageError{fmt.Errorf("--state %q: use %s", s, strings.Join(names, " or "))}
		}
		out.States = append(out.States, st)
	}
	if f.topic != "" {
		p, err := routing.CompilePattern(f.topic)
		if err != nil {
			return out, &usageError{fmt.Errorf("--topic: %v", err)}
		}
		out.TopicMatch = p.Match
	}
	if f.key != "" {
		k := f.key
		out.Key = &k
	}
	now := time.Now()
	var err error
	if out.Since, err = parseWhen("since", f.since, now); err != nil {
		return out, err
	}
	if out.Until, err = parseWhen("until", f.until, now); err != nil {
		return out, err
	}
	out.ErrorContains = f.errorContains
	return out, nil
}

func replayCmd() *cobra.Command {
	var f filterFlags
	var dryRun bool
	c := &cobra.Command{
		Use:   "replay",
		Short: "Put dead (or delivered) rows back to pending, by id or by filter",
		Long: "Replay selects rows by --id, or by filters (state, default dead; topic pattern; key;\n" +
			"an updated_at range; text in last_error), and puts them back to pending with attempt 0.\n" +
			"It never touches a row that is being delivered.",
		RunE: func(*cobra.Command, []string) error {
			flt, err := f.filter([]dialects.State{dialects.Dead, dialects.Delivered})
			if err != nil {
				return err
			}
			if len(flt.IDs) == 0 && flt.TopicMatch == nil && flt.Key == nil && flt.Since == nil && flt.Until == nil && flt.ErrorContains == "" && len(flt.States) == 0 {
				return &usageError{fmt.Errorf("say which rows: --id, or at least one filter (--state dead replays every dead row)")}
			}
			return withDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error {
				n, err := dialects.Replay(ctx, d, flt, dryRun)
				if err != nil {
					return err
				}
				if dryRun {
					fmt.Printf("%d rows would be replayed (dry run: nothing changed).\n", n)
				} else {
					fmt.Printf("%d rows replayed.\n", n)
				}
				return nil
			})
		},
	}
	f.register(c, "dead (default) or delivered (repeatable)")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "count the rows without changing them")
	return c
}

func deadCmd() *cobra.Command {
	c := &cobra.Command{Use: "dead", Short: "Inspect dead rows"}
	var f filterFlags
	var limit int
	list := &cobra.Command{
		Use:   "list",
		Short: "List dead rows with their last error",
		RunE: func(*cobra.Command, []string) error {
			flt, err := f.filter([]dialects.State{dialects.Dead})
			if err != nil {
				return err
			}
			return withDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error {
				rows, _, err := dialects.List(ctx, d, flt, nil, limit)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "ID\tTOPIC\tKEY\tATTEMPT\tUPDATED_AT\tLAST_ERROR")
				for _, r := range rows {
					key, le := "", ""
					if r.Key != nil {
						key = *r.Key
					}
					if r.LastError != nil {
						le = strings.ReplaceAll(*r.LastError, "\n", " ")
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Topic, key, r.Attempt, r.UpdatedAt.UTC().Format(time.RFC3339), le)
				}
				return w.Flush()
			})
		},
	}
	f.register(list, "dead")
	list.Flags().IntVar(&limit, "limit", 100, "the most rows to list")
	list.Args = wrapArgs(nil)
	c.AddCommand(list)
	return c
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version",
		Run: func(*cobra.Command, []string) {
			fmt.Printf("queuebox %s\ncommit %s\n%s %s/%s\n", bootstrap.Version, bootstrap.Commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	}
}
