package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/queuebox/queuebox/admin"
	"github.com/queuebox/queuebox/bootstrap"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/migrations"
)

var configPath string

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "queuebox",
		Short: "QueueBox relays outbox rows from your database to HTTP endpoints and brokers",
		Example: "  queuebox run --config queuebox.yaml      # the relay\n" +
			"  queuebox status --config queuebox.yaml   # rows per state\n" +
			"  queuebox dead groups                     # why rows went dead (--config defaults to ./queuebox.yaml)\n" +
			"  queuebox help replay",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		// A group that only holds subcommands gets the flags of a command
		// line whose command word it did not know (`queuebox statsu
		// --config f.yaml`): the word, not the flag, is what went wrong.
		if words := c.Flags().Args(); c.Annotations[onlySubcommands] != "" && len(words) > 0 {
			return unknownCommand(c, words[0])
		}
		if why, ok := noConfig[topOf(c).Name()]; ok && strings.Contains(err.Error(), "unknown flag: --config") {
			return &usageError{fmt.Errorf("--config: `%s` reads no configuration file: %s", c.CommandPath(), why)}
		}
		return &usageError{fmt.Errorf("%v (see `%s --help`)", flagError(c, err), c.CommandPath())}
	})
	root.AddCommand(runCmd(), devCmd(), migrateCmd(), configCmd(), statusCmd(), replayCmd(), deadCmd(), rowsCmd(), destinationsCmd(), versionCmd(), benchCmd(), healthcheckCmd())
	root.InitDefaultCompletionCmd()
	root.InitDefaultHelpCmd()
	for _, c := range root.Commands() {
		c.Args = wrapArgs(c.Args)
	}
	groups(root)
	builtInExamples(root)
	configFlags(root)
	return root
}

// topOf is the command under the root that c belongs to: completion for
// `completion bash`.
func topOf(c *cobra.Command) *cobra.Command {
	for c.HasParent() && c.Parent().HasParent() {
		c = c.Parent()
	}
	return c
}

// noConfig names the commands that read no configuration file, and what
// they use instead: they have no --config, and say so when given one.
var noConfig = map[string]string{
	"dev":        "it runs a built-in one against its own throwaway database; run your own with `queuebox run --config FILE`",
	"bench":      "it uses --database-url, or a throwaway cluster",
	"version":    "it only prints the version",
	"completion": "it only prints a shell completion script",
	"help":       "it only prints help",
}

// configFlags gives --config to every command that runs and reads the
// configuration file: all but those of noConfig and the groups that only
// hold subcommands. Commands added later get it too.
func configFlags(c *cobra.Command) {
	for _, sub := range c.Commands() {
		configFlags(sub)
	}
	_, none := noConfig[topOf(c).Name()]
	if none || !c.Runnable() || !c.HasParent() || c.Annotations[onlySubcommands] != "" || c.Flags().Lookup("config") != nil {
		return
	}
	c.Flags().StringVar(&configPath, "config", "queuebox.yaml", "the configuration file")
	if _, ok := outboxCommands[topOf(c).Name()]; ok && c.Flags().Lookup("outbox") == nil {
		c.Flags().StringVar(&outboxName, "outbox", "", outboxCommands[topOf(c).Name()])
	}
}

// outboxName is --outbox: the outbox of a file of several that a command
// reads or acts on.
var outboxName string

// outboxCommands are the commands that take --outbox, and what it means
// for each when left out.
var outboxCommands = map[string]string{
	"status":       "the outbox to show (default: every outbox)",
	"migrate":      "the outbox to migrate or show (default: every outbox)",
	"destinations": "the outbox whose database to read or write (default: every outbox's)",
	"dead":         "the outbox whose dead rows to read (required when the file has several)",
	"replay":       "the outbox whose rows to replay (required when the file has several)",
	"rows":         "the outbox that holds the row (required when the file has several)",
}

// builtInExamples gives cobra's own commands (help, completion and its
// shells) examples, as every command of ours has.
func builtInExamples(root *cobra.Command) {
	examples := map[string]string{
		"help":       "  queuebox help\n  queuebox help replay\n  queuebox help dead list",
		"completion": "  queuebox completion bash > /etc/bash_completion.d/queuebox\n  queuebox completion zsh > \"${fpath[1]}/_queuebox\"",
		"bash":       "  source <(queuebox completion bash)                          # this shell\n  queuebox completion bash > /etc/bash_completion.d/queuebox  # every new shell",
		"zsh":        "  queuebox completion zsh > \"${fpath[1]}/_queuebox\"",
		"fish":       "  queuebox completion fish > ~/.config/fish/completions/queuebox.fish",
		"powershell": "  queuebox completion powershell | Out-String | Invoke-Expression",
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Example == "" {
			c.Example = examples[c.Name()]
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
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
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[onlySubcommands] = "true"
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return c.Help()
		}
		return unknownCommand(c, args[0])
	}
}

// unknownCommand refuses a word that is no subcommand of the group c, with
// cobra's suggestions of the subcommands it is close to.
func unknownCommand(c *cobra.Command, word string) error {
	msg := fmt.Sprintf("unknown command %q for %q", word, c.CommandPath())
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2
	}
	if s := c.SuggestionsFor(word); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
	}
	return &usageError{fmt.Errorf("%s; see `%s --help`", msg, c.CommandPath())}
}

// onlySubcommands marks (in Annotations) a group that groups made
// runnable: it runs nothing of its own (migrate, a group that runs
// `migrate up`, is not one).
const onlySubcommands = "queuebox/only-subcommands"

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

// withDB loads the configuration as the tools need it (the database
// settings: bootstrap.LoadForTools), opens the database of one outbox as a
// tool (see bootstrap.OpenToolDialect) and runs f with the outbox's view.
// The outbox is --outbox, or the file's only one: a file of several needs
// --outbox.
func withDB(f func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error) error {
	return withDBAs(bootstrap.LoadForTools, bootstrap.OpenToolDialect, f)
}

// outboxSection is one outbox of a command that runs on several.
type outboxSection struct {
	// Name is the outbox's; Many says the command runs on more than one
	// (its output then names each).
	Name string
	Many bool
}

// withEachDB runs f on --outbox, or on every outbox of the file, in name
// order, each with its own database opened as a tool. An outbox whose f
// fails does not stop the others; the error names the outboxes that
// failed.
func withEachDB(f func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect, sec outboxSection) error) error {
	l, err := bootstrap.LoadForTools(configPath)
	if err != nil {
		return err
	}
	views, err := l.SelectOutboxes(outboxName, false)
	if err != nil {
		return &usageError{err}
	}
	ctx := context.Background()
	var failed []string
	var last error
	for _, v := range views {
		err := func() error {
			d, err := bootstrap.OpenToolDialect(ctx, v)
			if err != nil {
				return err
			}
			defer d.Close()
			return f(ctx, v, d, outboxSection{Name: v.OutboxName, Many: len(views) > 1})
		}()
		if err != nil {
			if len(views) == 1 {
				return err
			}
			fmt.Fprintf(os.Stderr, "queuebox: outbox %s: %v\n", v.OutboxName, err)
			failed, last = append(failed, v.OutboxName), err
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d outboxes failed (%s); the last: %w", len(failed), len(views), strings.Join(failed, ", "), last)
	}
	return nil
}

// withDBAs is withDB with the way to load the file and open the database.
func withDBAs(load func(string) (*bootstrap.Loaded, error), open func(context.Context, *bootstrap.Loaded) (dialects.Dialect, error), f func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error) error {
	file, err := load(configPath)
	if err != nil {
		return err
	}
	views, err := file.SelectOutboxes(outboxName, true)
	if err != nil {
		return &usageError{err}
	}
	l := views[0]
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
		Long: "run is the relay: it claims due rows, delivers them by the routes, retries, dead-letters,\n" +
			"runs the inbox and serves the admin listener until SIGINT or SIGTERM, then drains.\n" +
			"It needs every secret the configuration names (${NAME} set).",
		Example: "  queuebox run --config /etc/queuebox/queuebox.yaml\n" +
			"  queuebox run --migrate          # apply pending migrations first\n" +
			"  QUEUEBOX_DATABASE_URL=postgres://relay@db:5432/app queuebox run",
		RunE: func(*cobra.Command, []string) error {
			// Caught before the configuration is read: see StopSignals.
			sig := bootstrap.CatchStopSignals()
			defer sig.Release()
			l, err := bootstrap.Load(configPath)
			if err != nil {
				return err
			}
			log := bootstrap.NewLogger(l, bootstrap.Stderr)
			return bootstrap.RunOutboxes(sig.Stop, l, log, bootstrap.RunOptions{Migrate: migrate, Abort: sig.Abort})
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
		Example: "  queuebox dev              # Ctrl-C stops it and removes the database\n" +
			"  queuebox dev --rate 0     # no sample rows: insert your own (the banner says where)",
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
		return withEachDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect, sec outboxSection) error {
			if sec.Many {
				fmt.Printf("== outbox %s\n", sec.Name)
			}
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
	c := &cobra.Command{Use: "migrate", Short: "Apply the bundled schema migrations (as `migrate up`), or show them (`migrate status`)", RunE: up,
		Example: "  queuebox migrate --config queuebox.yaml\n  queuebox migrate status --config queuebox.yaml"}
	c.AddCommand(&cobra.Command{
		Use:     "up",
		Short:   "Apply every pending migration",
		Example: "  queuebox migrate up --config queuebox.yaml",
		RunE:    up,
	}, &cobra.Command{
		Use:     "status",
		Short:   "List the bundled migrations and whether each is applied",
		Example: "  queuebox migrate status --config queuebox.yaml",
		RunE: func(*cobra.Command, []string) error {
			return withEachDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect, sec outboxSection) error {
				if sec.Many {
					fmt.Printf("== outbox %s\n", sec.Name)
				}
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
	c := &cobra.Command{Use: "config", Short: "Work with the configuration file", Example: "  queuebox config check --config queuebox.yaml"}
	check := &cobra.Command{
		Use:   "check",
		Short: "Validate the configuration and print it with secrets redacted",
		Long: "check reports every problem of the file, each with its key and line, including every\n" +
			"${NAME} that is not set, and every OTEL_* variable that tracing cannot use; or prints the\n" +
			"configuration with its defaults, secrets redacted.",
		Example: "  queuebox config check --config queuebox.yaml\n" +
			"  queuebox config check --config queuebox.yaml > effective.yaml   # the problems and warnings go to stderr",
		RunE: func(*cobra.Command, []string) error {
			l, err := bootstrap.Load(configPath)
			if err != nil {
				return err
			}
			// The OTEL_* variables configure tracing: run refuses what it
			// cannot use, so check does too.
			if err := bootstrap.TracingProblems(l.File); err != nil {
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
		Example: "  queuebox status --config queuebox.yaml\n" +
			"  queuebox status --json | jq .rows.dead",
		RunE: func(*cobra.Command, []string) error {
			// With several outboxes, --json prints one object: each
			// outbox's status by name.
			many := map[string]any{}
			err := withEachDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect, sec outboxSection) error {
				st, err := admin.Status(ctx, d)
				if err != nil {
					if sec.Many && asJSON {
						many[sec.Name] = map[string]string{"error": err.Error()}
					}
					return err
				}
				switch {
				case asJSON && sec.Many:
					many[sec.Name] = st
					return nil
				case asJSON:
					return json.NewEncoder(os.Stdout).Encode(st)
				case sec.Many:
					fmt.Printf("== outbox %s\n", sec.Name)
					defer fmt.Println()
				}
				return st.WriteText(os.Stdout)
			})
			if len(many) > 0 {
				if jerr := json.NewEncoder(os.Stdout).Encode(map[string]any{"outboxes": many}); jerr != nil {
					return jerr
				}
			}
			return err
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return c
}

// filterFlags declares the row filters shared by replay and dead list; the
// admin package validates them. --destination is checked against the
// configuration once it is loaded (checkDestination).
func filterFlags(c *cobra.Command, t *admin.FilterText, destination *string, stateHelp, destinationHelp string) {
	c.Flags().StringArrayVar(&t.IDs, "id", nil, "a row id (repeatable)")
	c.Flags().StringArrayVar(&t.States, "state", nil, stateHelp)
	c.Flags().StringVar(&t.Topic, "topic", "", "a topic pattern (order.*, order.#)")
	c.Flags().StringVar(&t.Key, "key", "", "rows of this key")
	c.Flags().StringVar(&t.Since, "since", "", "updated at or after: RFC 3339 time, or a duration ago (24h)")
	c.Flags().StringVar(&t.Until, "until", "", "updated before: RFC 3339 time, or a duration ago")
	c.Flags().StringVar(&t.ErrorContains, "error-contains", "", "text in last_error, in any case")
	c.Flags().StringVar(destination, "destination", "", destinationHelp)
}

// checkDestination refuses a --destination that is no destination of the
// configuration.
func checkDestination(destination string, l *bootstrap.Loaded) error {
	if destination == "" || l.Destinations[destination] != nil {
		return nil
	}
	names := make([]string, 0, len(l.Destinations))
	for n := range l.Destinations {
		names = append(names, n)
	}
	sort.Strings(names)
	return &usageError{fmt.Errorf("--destination %q: is not a destination of %s; the destinations are %s", destination, l.File, strings.Join(names, ", "))}
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
	var destination, group string
	var dryRun, yes bool
	c := &cobra.Command{
		Use:   "replay",
		Short: "Put dead (or delivered) rows back to pending, by id, by filter or by group",
		Long: "Replay selects rows by --id, by filters (state, default dead; topic pattern; key; the\n" +
			"destination the routes send them to; an updated_at range; text in last_error), or by\n" +
			"--group, a group of `queuebox dead groups`, and puts them back to pending with attempt 0:\n" +
			"the relay tries them again from the first try. It never touches a row that is being delivered.\n\n" +
			"With --destination it replays that destination's part only: the rows routed to it alone, the\n" +
			"dead rows of fan-out routes to it, and its copies of fan-out rows (dead by default). With\n" +
			"--state delivered it also gives each delivered fan-out row without a copy of it a new one\n" +
			"(a backfill: a destination added to a route later gets the rows it missed); the other\n" +
			"destinations of those rows get nothing again.\n\n" +
			"A group whose failure would recur at once (no route matches its topics; its destination\n" +
			"refused the rows with a status it takes as final) is replayed only with --yes, after the\n" +
			"warning that says what will happen.",
		Example: "  queuebox replay --id 0b7e3f4e-8c1a-4d2e-9f3a-1b2c3d4e5f60\n" +
			"  queuebox replay --topic 'order.#' --error-contains 'HTTP 503' --dry-run\n" +
			"  queuebox replay --destination orders-webhook --since 2h\n" +
			"  queuebox replay --destination ledger --state delivered --since 24h --dry-run   # backfill a fan-out destination\n" +
			"  queuebox replay --group g-3f9a2c1b            # an id that `queuebox dead groups` prints\n" +
			"  queuebox replay --state delivered --topic 'invoice.*' --since 2025-01-31T12:00:00Z",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if group != "" {
				return replayGroup(cmd, group, dryRun, yes)
			}
			if yes {
				return &usageError{errors.New("--yes: confirms the replay of a group whose failure would recur; it goes with --group")}
			}
			f, err := text.Filter(admin.Flags, admin.ForReplay, time.Now())
			if err != nil && !(destination != "" && isBareReplay(err)) {
				return usage(err)
			}
			return withDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error {
				if err := checkDestination(destination, l); err != nil {
					return err
				}
				if destination == "" {
					n, err := admin.Replay(ctx, d, f, dryRun, replayedBy(l, ""))
					if err != nil {
						return err
					}
					printReplayed(n, dryRun)
					return nil
				}
				res, err := admin.ReplayDestination(ctx, d, f, destination, bootstrap.TargetsOf(l), dryRun, replayedBy(l, ""))
				if err != nil {
					return err
				}
				printReplayedTo(destination, res, dryRun)
				return nil
			})
		},
	}
	filterFlags(c, &text, &destination, "dead (default) or delivered (repeatable)",
		"replay this destination's part only: the rows routed to it alone, and its copies of fan-out rows")
	c.Flags().StringVar(&group, "group", "", "a group of dead rows, by the id `queuebox dead groups` prints (g-...)")
	c.Flags().BoolVar(&yes, "yes", false, "with --group: replay even when the group's failure would recur at once")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "count the rows without changing them")
	return c
}

// replayedBy is who replays from this command line, as the attempt
// history records it: the command (and the group it replays), the user and
// the host. "" when the history is off.
func replayedBy(l *bootstrap.Loaded, group string) string {
	if !l.Outbox.History.Enabled {
		return ""
	}
	by := "queuebox replay"
	if group != "" {
		by += " --group " + group
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		by += ", user " + u.Username
	} else {
		by += fmt.Sprintf(", uid %d", os.Getuid())
	}
	if h, err := os.Hostname(); err == nil {
		by += " on " + h
	}
	return by
}

// isBareReplay is the filter's refusal of a replay that names no rows:
// --destination names some.
func isBareReplay(err error) bool {
	var ie *admin.InputError
	return errors.As(err, &ie) && ie.Reason == "say which rows"
}

func printReplayed(n int, dryRun bool) {
	switch {
	case dryRun:
		fmt.Printf("%s would be replayed (dry run: nothing changed).\n", rowsText(n))
	case n == 1:
		fmt.Println("1 row replayed: back to pending with attempt 0. The relay tries it again; if it fails again, it goes dead again (`queuebox dead list`).")
	case n > 0:
		fmt.Printf("%s replayed: back to pending with attempt 0. The relay tries them again; any that fail again go dead again (`queuebox dead list`).\n", rowsText(n))
	default:
		fmt.Printf("%s replayed.\n", rowsText(n))
	}
	if n == 0 {
		fmt.Println("No row matched: replay takes dead rows (or delivered ones, with --state delivered) and never a pending or processing one; `queuebox dead list` shows the dead rows.")
	}
}

// printReplayedTo says what a replay of one destination's part did.
func printReplayedTo(destination string, r admin.ReplayResult, dryRun bool) {
	verb, created := "replayed", "created"
	if dryRun {
		verb, created = "would be replayed", "would be created"
	}
	fmt.Printf("%s %s (back to pending with attempt 0).\n", rowsText(r.Rows), verb)
	fmt.Printf("%s of %s %s (back to pending with attempt 0; its other destinations get nothing again).\n", copiesText(r.Copies), destination, verb)
	if r.Backfilled > 0 || dryRun {
		fmt.Printf("%s of %s %s for delivered fan-out rows that had none (a backfill).\n", copiesText(r.Backfilled), destination, created)
	}
	switch {
	case dryRun:
		fmt.Println("Dry run: nothing changed.")
	case r.Rows+r.Copies+r.Backfilled > 0:
		fmt.Println("The relay delivers them again; any that fail again go dead again (`queuebox dead list --destination " + destination + "`).")
	default:
		fmt.Println("Nothing matched: replay takes dead rows and copies (or delivered ones, with --state delivered) and never a pending or processing one; `queuebox dead list --destination " + destination + "` shows what is dead.")
	}
}

// copiesText is "1 copy" or "n copies".
func copiesText(n int) string {
	if n == 1 {
		return "1 copy"
	}
	return fmt.Sprintf("%d copies", n)
}

var groupIDRE = regexp.MustCompile(`^g-[0-9a-f]{8}$`)

// replayGroup is `queuebox replay --group ID`: the group's rows, as the
// admin page groups them, put back to pending; a group whose failure
// would recur needs --yes.
func replayGroup(cmd *cobra.Command, id string, dryRun, yes bool) error {
	var others []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if !oneOf(f.Name, "group", "yes", "dry-run", "config", "outbox") {
			others = append(others, "--"+f.Name)
		}
	})
	if len(others) > 0 {
		return &usageError{fmt.Errorf("--group replays one group as `queuebox dead groups` shows it, and takes no filter (%s); leave them out, or replay by filter without --group", strings.Join(others, ", "))}
	}
	if !groupIDRE.MatchString(id) {
		return &usageError{fmt.Errorf("--group %q: is not a group id; give one that `queuebox dead groups` prints, such as g-3f9a2c1b", id)}
	}
	return withDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error {
		gs, err := admin.GroupDead(ctx, d, bootstrap.RouteOf(l), bootstrap.FinalStatus(l), admin.DeadGroupWindow)
		if err != nil {
			return err
		}
		g, ok := gs.Group(id)
		if !ok {
			return fmt.Errorf("--group %s: no group of the newest %d dead rows has this id: its rows were replayed or deleted since, or the routes changed; `queuebox dead groups` lists the groups", id, gs.Window)
		}
		if w := g.ReplayWarning; w != nil {
			fmt.Fprintf(os.Stderr, "warning: %s.\n", w)
			if !yes && !dryRun {
				return fmt.Errorf("nothing replayed: the %s of group %s would fail again; fix the cause first, or replay anyway with --yes", rowsText(len(g.IDs)), id)
			}
		}
		dead := []dialects.State{dialects.Dead}
		if g.Copies {
			n, err := admin.ReplayCopies(ctx, d, g.Destination, g.IDs, dead, dryRun, replayedBy(l, id))
			if err != nil {
				return err
			}
			printReplayedTo(g.Destination, admin.ReplayResult{Copies: n}, dryRun)
		} else {
			n, err := admin.Replay(ctx, d, dialects.Filter{IDs: g.IDs, States: dead}, dryRun, replayedBy(l, id))
			if err != nil {
				return err
			}
			printReplayed(n, dryRun)
		}
		if gs.Grouped >= int64(gs.Window) {
			fmt.Printf("The groups cover the newest %d dead rows: older rows of this group, if any, show in `queuebox dead groups` once these are gone.\n", gs.Window)
		}
		return nil
	})
}

func oneOf(s string, allowed ...string) bool {
	for _, a := range allowed {
		if s == a {
			return true
		}
	}
	return false
}

func deadCmd() *cobra.Command {
	c := &cobra.Command{Use: "dead", Short: "Inspect dead rows: one by one (list), or grouped by failure (groups)",
		Example: "  queuebox dead list --limit 20\n  queuebox dead groups"}
	var text admin.FilterText
	var destination string
	var limit int
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List dead rows and dead copies with their last error, the most recently updated first",
		Long: "list prints the dead rows that the filters select, at most --limit, each with where its\n" +
			"topic routes today, its tries (\"try 6 of 6\": the last try made, of at most max_attempts + 1)\n" +
			"and its last error, and says when --limit cut the list. The dead copies of fan-out rows are\n" +
			"listed with them (DEAD copy: that destination's part of the row is dead, not the row), each\n" +
			"with its destination and its own tries; --destination lists that destination's.",
		Example: "  queuebox dead list --limit 20\n" +
			"  queuebox dead list --destination orders-webhook --error-contains 'gone'\n" +
			"  queuebox dead list --topic 'order.#' --since 24h\n" +
			"  queuebox dead list --json | jq -r '.rows[].id'",
		RunE: func(*cobra.Command, []string) error {
			f, err := text.Filter(admin.Flags, admin.ForDeadRows, time.Now())
			if err == nil {
				err = admin.CheckLimit(admin.Flags, limit)
			}
			if err != nil {
				return usage(err)
			}
			return withDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error {
				if err := checkDestination(destination, l); err != nil {
					return err
				}
				dead, err := admin.DeadRows(ctx, d, f, destination, limit, bootstrap.RouteOf(l), bootstrap.TargetsOf(l))
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(os.Stdout).Encode(dead)
				}
				return dead.WriteText(os.Stdout)
			})
		},
	}
	filterFlags(list, &text, &destination, "dead", "rows whose topic the configured routes send to this destination, and its dead copies of fan-out rows")
	list.Flags().IntVar(&limit, "limit", 100, fmt.Sprintf("the most rows to list (1 to %d)", admin.MaxLimit))
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts: the rows, the limit, and whether more rows match")
	list.Args = wrapArgs(nil)
	var groupsJSON bool
	groupsCmd := &cobra.Command{
		Use:   "groups",
		Short: "Group the newest dead rows and dead copies by destination and error, as the admin page does",
		Long: fmt.Sprintf("groups takes the newest %d dead rows and groups them by the destination their topic\n"+
			"routes to today and their last error with ids and numbers taken out, and the newest %d dead\n"+
			"copies of fan-out rows by their destination and error, in groups of their own. Each group\n"+
			"has an id (g- and 8 hex digits, the same while its destination and error are) for\n"+
			"`queuebox replay --group ID` (a group of copies replays that destination's copies only),\n"+
			"and a warning when a replay would not cure it.", admin.DeadGroupWindow, admin.DeadGroupWindow),
		Example: "  queuebox dead groups --config queuebox.yaml\n" +
			"  queuebox dead groups --json | jq -r '.groups[] | [.id, .rows, .error] | @tsv'",
		RunE: func(*cobra.Command, []string) error {
			return withDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error {
				gs, err := admin.GroupDead(ctx, d, bootstrap.RouteOf(l), bootstrap.FinalStatus(l), admin.DeadGroupWindow)
				if err != nil {
					return err
				}
				if groupsJSON {
					return json.NewEncoder(os.Stdout).Encode(gs)
				}
				return gs.WriteText(os.Stdout, time.Now())
			})
		},
	}
	groupsCmd.Flags().BoolVar(&groupsJSON, "json", false, "print JSON for scripts (the admin API's GET /api/dead-groups)")
	groupsCmd.Args = wrapArgs(nil)
	c.AddCommand(list, groupsCmd)
	return c
}

func healthcheckCmd() *cobra.Command {
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "healthcheck",
		Short: "Ask the local relay's admin listener whether it is ready: exit 0 if it is, 1 if not",
		Long: "healthcheck asks GET /readyz of the admin listener that admin.listen names (on loopback\n" +
			"when it listens on every interface), with admin.token when one is set, and exits 0 when\n" +
			"the relay is ready. Anything else exits 1 with the reason: nothing listens there, the\n" +
			"relay waits for its database or a migration, it is draining, or the token does not match.\n" +
			"It needs no shell and no curl: images from scratch, Docker's HEALTHCHECK, ECS and\n" +
			"Kubernetes exec probes run it as it is.",
		Example: "  queuebox healthcheck --config /etc/queuebox/queuebox.yaml\n" +
			"  queuebox healthcheck --timeout 2s",
		RunE: func(*cobra.Command, []string) error {
			if timeout <= 0 {
				return &usageError{fmt.Errorf("--timeout: %v is not positive; give how long to wait for the answer, such as 5s", timeout)}
			}
			// A health check's callers read 0 as healthy and anything
			// else as not (Docker reserves 2): a configuration it cannot
			// read is a failed check, code 1, like any other.
			l, err := bootstrap.LoadForTools(configPath)
			if err != nil {
				return &bootstrap.ExitError{Code: 1, Err: err}
			}
			out, err := bootstrap.Healthcheck(context.Background(), l, timeout)
			if err != nil {
				return err
			}
			fmt.Println(out)
			return nil
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", bootstrap.DefaultHealthcheckTimeout, "how long to wait for the relay's answer")
	return c
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version, commit and Go version",
		Example: "  queuebox version",
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
