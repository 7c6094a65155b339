package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/queuebox/queuebox/admin"
	"github.com/queuebox/queuebox/bootstrap"
	"github.com/queuebox/queuebox/dialects"
)

// rowsCmd is `queuebox rows show ID`: one row with its payload, headers,
// state and attempts. It only reads, and needs only the database settings.
func rowsCmd() *cobra.Command {
	c := &cobra.Command{Use: "rows", Short: "Inspect one outbox row: what was sent, and what each attempt got back",
		Example: "  queuebox rows show 0b7e3f4e-5c1d-4a8e-9f3b-2d6c7e8f9a0b"}
	var asJSON bool
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show a row's payload, headers and state, and its attempts with what the destination answered",
		Long: "show prints one outbox row: its columns, where its topic routes today, its headers and payload,\n" +
			"and its delivery attempts, oldest first (the newest " + fmt.Sprint(admin.MaxRowAttempts) + "): when each started, how long it took, how it\n" +
			"ended, the HTTP status or broker answer, the error, and an excerpt of the response body.\n" +
			"Attempts are recorded while outbox.history is on, and kept for outbox.history.retention.\n" +
			"A first try that succeeded is not recorded (unless outbox.history.allDeliveries): the row\n" +
			"tells it, shown as \"1 (from the row)\" at its updated_at, with its duration, destination\n" +
			"and answer unknown.\n\n" +
			"A row of a fan-out route lists each destination's state: its copy's (state, tries, when it\n" +
			"is due, last error) for a destination that did not deliver in the row's pass, and\n" +
			"\"delivered (with the row)\" for one that did (a delivered row's destination without a copy).",
		Example: "  queuebox rows show 0b7e3f4e-5c1d-4a8e-9f3b-2d6c7e8f9a0b\n" +
			"  queuebox dead list --json | jq -r '.rows[0].id' | xargs queuebox rows show\n" +
			"  queuebox rows show 0b7e3f4e-5c1d-4a8e-9f3b-2d6c7e8f9a0b --json | jq '.attempts[] | [.try, .status] | @tsv'",
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return errors.New("give the id of the row to show (`queuebox dead list` prints ids)")
			case len(args) > 1:
				return errors.New("give one row id; to show several, run the command once for each")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			id, err := admin.ParseRowID("ID", args[0])
			if err != nil {
				return usage(err)
			}
			return withDB(func(ctx context.Context, l *bootstrap.Loaded, d dialects.Dialect) error {
				v, found, err := admin.RowDetail(ctx, d, id, bootstrap.RouteOf(l), bootstrap.TargetsOf(l))
				if err != nil {
					return err
				}
				if !found {
					return fmt.Errorf("no row has the id %s in %s: it was never inserted, or retention deleted it", id, d.Names().Outbox)
				}
				if asJSON {
					return json.NewEncoder(os.Stdout).Encode(v)
				}
				return v.WriteText(os.Stdout)
			})
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts (the admin API's GET /api/rows/{id})")
	c.AddCommand(show)
	for _, s := range c.Commands() {
		s.Args = wrapArgs(s.Args)
	}
	return c
}
