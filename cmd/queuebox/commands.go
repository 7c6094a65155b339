package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/queuebox/queuebox/admin"
	"github.com/queuebox/queuebox/bootstrap"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/migrations"
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
		return &usageError{fmt.Errorf("%v (see `%s --help`)", flagError(c, err), c.CommandPath())}
	})
	root.AddCommand(runCmd(), devCmd(), migrateCmd(), configCmd(), statusCmd(), replayCmd(), deadCmd(), versionCmd(), benchCmd())
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		c.Args = wrapArgs(c.Args)
	}
	groups(root)
	// Commands that read no configuration file refuse --config rather
	// than ignore it.
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		top := c // the command under the root: completion for completion bash
		for top.HasParent() && top.Parent().HasParent() {
			top = top.Parent()
		}
		if why, ok := noConfig[top.Name()]; ok && c.Flags().Changed("config") {
			return &usageError{fmt.Errorf("--config: `%s` reads no configuration file: %s", c.CommandPath(), why)}
		}
		return nil
	}
	return root
}

// noConfig names the commands that read no configuration file, and what
// they use instead.
var noConfig = map[string]string{
	"dev":        "it runs a built-in one against its own throwaway database; run your own with `queuebox run --config FILE`",
	"bench":      "it uses --database-url, or a throwaway cluster",
	"version":    "it only prints the version",
	"completion": "it only prints a shell completion script",
}

// groups makes every command that only holds subcommands (the root, config,
// dead, completion) refuse a word that is none of them, as a usage error
// with suggestions (exit 2), instead of printing its help and exiting 0.
func groups(c *cobra.Command) {
	for _, sub := range c.Commands() {
		groups(sub)
	}
	if !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return c.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
		if c.SuggestionsMinimumDistance <= 0 {
			c.SuggestionsMinimumDistance = 2
		}
		if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
		}
		return &usageError{fmt.Errorf("%s; see `%s --help`", msg, c.CommandPath())}
	}
}

// flagError rewrites pflag's "invalid argument" errors, which quote Go's
// parser ("strconv.ParseFloat: parsing ..."), in the flag's own terms.
func flagError(c *cobra.Command, err error) error {
	m := invalidFlagRE.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	name := strings.TrimPrefix(strings.TrimPrefix(m[2], "-"), "-")
	if i := strings.LastIndex(name, "--"); i >= 0 { // "-r, --rate"
		name = name[i+2:]
	}
	f := c.Flags().Lookup(name)
	if f == nil {
		return err
	}
	want := map[string]string{
		"int": "a whole number", "int64": "a whole number", "uint": "a whole number",
		"float64": "a number", "bool": "true or false", "duration": "a duration such as 30s or 5m",
	}[f.Value.Type()]
	if want == "" {
		return err
	}
	return fmt.Errorf("--%s: %q is not %s", name, m[1], want)
}

var invalidFlagRE = regexp.MustCompile(`^invalid argument "(.*)" for "([^"]+)" flag`)

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

// withDB loads the configuration, opens the database as a tool (see
// bootstrap.OpenToolDialect) and runs f.
func withDB(f func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error) error {
	return withDBAs(bootstrap.OpenToolDialect, f)
}

// withDBAs is withDB with the way to open the database.
func withDBAs(open func(context.Context, *bootstrap.Loaded) (dialects.Dialect, error), f func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error) error {
	l, err := load()
	if err != nil {
		return err
	}
	ctx := context.Background()
	d, err := open(ctx, l)
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
			// Caught before the configuration is read: see StopSignals.
			sig := bootstrap.CatchStopSignals()
			defer sig.Release()
			return withDBAs(bootstrap.OpenDialect, func(_ context.Context, l *bootstrap.Loaded, d dialects.Dialect) error {
				log := bootstrap.NewLogger(l, bootstrap.Stderr)
				return bootstrap.Run(sig.Stop, l, d, log, bootstrap.RunOptions{Migrate: migrate, Abort: sig.Abort})
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
			if rate < 0 {
				return &usageError{fmt.Errorf("--rate: %v is negative; give the sample rows per second, or 0 for none", rate)}
			}
			sig := bootstrap.CatchStopSignals()
			defer sig.Release()
			return bootstrap.Dev(sig.Stop, bootstrap.DevOptions{Rate: rate, Out: os.Stdout, Abort: sig.Abort})
		},
	}
	c.Flags().Float64Var(&rate, "rate", 2, "sample rows inserted per second (0 for none)")
	return c
}

func migrateCmd() *cobra.Command {
	up := func(*cobra.Command, []string) error {
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
	}
	// A bare `queuebox migrate` applies the migrations, as `migrate up`
	// does: it is what a person who types it wants.
	c := &cobra.Command{Use: "migrate", Short: "Apply the bundled schema migrations (as `migrate up`), or show them (`migrate status`)", RunE: up}
	c.AddCommand(&cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration",
		RunE:  up,
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
			out, err := l.Effective()
			if err != nil {
				return err
			}
			os.Stdout.Write(out)
			for _, w := range l.Warnings {
				fmt.Fprintf(os.Stderr, "warning: %s\n", w)
			}
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
		Short: "Rows per state, the oldest due pending row's wait, rows scheduled later, dead rows per topic",
		RunE: func(*cobra.Command, []string) error {
			return withDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error {
				st, err := admin.Status(ctx, d)
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(os.Stdout).Encode(st)
				}
				return st.WriteText(os.Stdout)
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return c
}

// filterFlags declares the row filters shared by replay and dead list; the
// admin package validates them.
func filterFlags(c *cobra.Command, t *admin.FilterText, stateHelp string) {
	c.Flags().StringArrayVar(&t.IDs, "id", nil, "a row id (repeatable)")
	c.Flags().StringArrayVar(&t.States, "state", nil, stateHelp)
	c.Flags().StringVar(&t.Topic, "topic", "", "a topic pattern (order.*, order.#)")
	c.Flags().StringVar(&t.Key, "key", "", "rows of this key")
	c.Flags().StringVar(&t.Since, "since", "", "updated at or after: RFC 3339 time, or a duration ago (24h)")
	c.Flags().StringVar(&t.Until, "until", "", "updated before: RFC 3339 time, or a duration ago")
	c.Flags().StringVar(&t.ErrorContains, "error-contains", "", "text in last_error")
}

// usage marks the admin package's input errors as usage errors (exit 2).
func usage(err error) error {
	var ie *admin.InputError
	if errors.As(err, &ie) {
		return &usageError{err}
	}
	return err
}

func replayCmd() *cobra.Command {
	var text admin.FilterText
	var dryRun bool
	c := &cobra.Command{
		Use:   "replay",
		Short: "Put dead (or delivered) rows back to pending, by id or by filter",
		Long: "Replay selects rows by --id, or by filters (state, default dead; topic pattern; key;\n" +
			"an updated_at range; text in last_error), and puts them back to pending with attempt 0.\n" +
			"It never touches a row that is being delivered.",
		RunE: func(*cobra.Command, []string) error {
			f, err := text.Filter(admin.Flags, admin.ForReplay, time.Now())
			if err != nil {
				return usage(err)
			}
			return withDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error {
				n, err := admin.Replay(ctx, d, f, dryRun)
				if err != nil {
					return err
				}
				if dryRun {
					fmt.Printf("%s would be replayed (dry run: nothing changed).\n", rowsText(n))
				} else {
					fmt.Printf("%s replayed.\n", rowsText(n))
				}
				if n == 0 {
					fmt.Println("No row matched: replay takes dead rows (or delivered ones, with --state delivered) and never a pending or processing one; `queuebox dead list` shows the dead rows.")
				}
				return nil
			})
		},
	}
	filterFlags(c, &text, "dead (default) or delivered (repeatable)")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "count the rows without changing them")
	return c
}

func deadCmd() *cobra.Command {
	c := &cobra.Command{Use: "dead", Short: "Inspect dead rows"}
	var text admin.FilterText
	var limit int
	list := &cobra.Command{
		Use:   "list",
		Short: "List dead rows with their last error",
		RunE: func(*cobra.Command, []string) error {
			f, err := text.Filter(admin.Flags, admin.ForDeadRows, time.Now())
			if err == nil {
				err = admin.CheckLimit(admin.Flags, limit)
			}
			if err != nil {
				return usage(err)
			}
			return withDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error {
				rows, err := admin.DeadRows(ctx, d, f, limit)
				if err != nil {
					return err
				}
				return admin.WriteDeadRows(os.Stdout, rows)
			})
		},
	}
	filterFlags(list, &text, "dead")
	list.Flags().IntVar(&limit, "limit", 100, fmt.Sprintf("the most rows to list (1 to %d)", admin.MaxLimit))
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

// rowsText is "1 row" or "n rows".
func rowsText(n int) string {
	if n == 1 {
		return "1 row"
	}
	return fmt.Sprintf("%d rows", n)
}
