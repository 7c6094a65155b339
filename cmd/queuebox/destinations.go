package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/queuebox/queuebox/admin"
	"github.com/queuebox/queuebox/bootstrap"
	"github.com/queuebox/queuebox/dialects"
)

// destinationsCmd is `queuebox destinations list | pause NAME | resume NAME`.
func destinationsCmd() *cobra.Command {
	c := &cobra.Command{Use: "destinations", Short: "List the destinations; pause and resume one on every replica",
		Example: "  queuebox destinations list --config queuebox.yaml\n" +
			"  queuebox destinations pause orders-webhook --reason \"partner maintenance until 14:00\"\n" +
			"  queuebox destinations resume orders-webhook"}
	var asJSON bool
	list := &cobra.Command{
		Use: "list",
		Example: "  queuebox destinations list --config queuebox.yaml\n" +
			"  queuebox destinations list --json | jq '.destinations[] | select(.paused)'",
		Short: "Each destination: delivering or paused, the replicas that hold its circuit open, its rate limit, concurrency and circuit breaker",
		RunE: func(*cobra.Command, []string) error {
			// With several outboxes, each database holds its own pauses and
			// circuits: each is listed (--json: by outbox).
			many := map[string]admin.DestinationsView{}
			err := withEachDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect, sec outboxSection) error {
				views, err := admin.Destinations(ctx, d, bootstrap.DestinationInfos(l))
				if err != nil {
					return err
				}
				switch {
				case asJSON && sec.Many:
					many[sec.Name] = admin.DestinationsView{Destinations: views}
					return nil
				case asJSON:
					return json.NewEncoder(os.Stdout).Encode(admin.DestinationsView{Destinations: views})
				case sec.Many:
					fmt.Printf("== outbox %s\n", sec.Name)
					defer fmt.Println()
				}
				return admin.WriteDestinations(os.Stdout, views, time.Now())
			})
			if len(many) > 0 {
				if jerr := json.NewEncoder(os.Stdout).Encode(map[string]any{"outboxes": many}); jerr != nil {
					return jerr
				}
			}
			return err
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	var reason string
	pause := &cobra.Command{
		Use:   "pause NAME",
		Short: "Pause a destination on every replica: its rows wait, with no attempt counted, until it is resumed",
		Long: "Pause keeps a destination's rows pending on every replica that shares the database (each reads\n" +
			"the pause within about a second): nothing is sent to it and no attempt is counted, while the other\n" +
			"destinations go on. Deliveries already under way finish. `queuebox destinations resume NAME` ends it.\n" +
			"With several outboxes the pause is written to every outbox's database (--outbox: one); a relay\n" +
			"holds the destination while any of its outboxes' databases says it is paused.",
		Example: "  queuebox destinations pause orders-webhook --reason \"503s since 09:10, ticket OPS-412\"",
		Args:    nameArg("pause"),
		RunE: func(_ *cobra.Command, args []string) error {
			return withEachDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect, sec outboxSection) error {
				st, changed, err := admin.PauseDestination(ctx, d, bootstrap.DestinationInfos(l), args[0], reason, "NAME", "--reason")
				if err != nil {
					return usage(err)
				}
				if sec.Many {
					fmt.Printf("outbox %s: ", sec.Name)
				}
				if !changed {
					fmt.Printf("%s was paused already (since %s); its reason is now %q.\n", st.Name, st.Since.UTC().Format(time.RFC3339), st.Reason)
					return nil
				}
				fmt.Printf("%s is paused on every replica (each reads it within about a second): its rows wait, with no attempt counted.\n"+
					"Resume it with `queuebox destinations resume %s`.\n", st.Name, st.Name)
				return nil
			})
		},
	}
	pause.Flags().StringVar(&reason, "reason", "", "why it is paused, shown to other operators (list, the admin page)")
	resume := &cobra.Command{
		Use:     "resume NAME",
		Short:   "Resume a paused destination on every replica",
		Example: "  queuebox destinations resume orders-webhook",
		Args:    nameArg("resume"),
		RunE: func(_ *cobra.Command, args []string) error {
			return withEachDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect, sec outboxSection) error {
				st, changed, err := admin.ResumeDestination(ctx, d, bootstrap.DestinationInfos(l), args[0], "NAME")
				if err != nil {
					return usage(err)
				}
				if sec.Many {
					fmt.Printf("outbox %s: ", sec.Name)
				}
				if !changed {
					fmt.Printf("%s was not paused.\n", st.Name)
					return nil
				}
				fmt.Printf("%s is resumed: every replica sends its rows again within about a second; rows held during a long pause come back within about 30 s.\n", st.Name)
				return nil
			})
		},
	}
	c.AddCommand(list, pause, resume)
	for _, s := range c.Commands() {
		s.Args = wrapArgs(s.Args)
	}
	return c
}

// nameArg takes exactly one destination name.
func nameArg(verb string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		switch {
		case len(args) == 0:
			return fmt.Errorf("give the name of the destination to %s (`queuebox destinations list` shows them)", verb)
		case len(args) > 1:
			return errors.New("give one destination name; to " + verb + " several, run the command once for each")
		}
		return nil
	}
}
