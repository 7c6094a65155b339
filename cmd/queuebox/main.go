// Command queuebox is the transactional-outbox relay. The commands are thin:
// they declare flags and print. Loading, wiring and running are in package
// bootstrap; filters, status, dead rows and replay in package admin.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/queuebox/queuebox/bootstrap"
	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/internal/gcfloor"
)

func main() {
	// A relay's live heap is small; without this the collector took about
	// a third of its CPU in a drain (see package gcfloor).
	gcfloor.Start(gcfloor.Headroom)
	err := newRoot().Execute()
	if err == nil {
		return
	}
	msg := err.Error()
	switch {
	case errors.Is(err, dialects.ErrNoTable):
		msg += "; run `queuebox migrate up` (with the same --config) to create it, or check database.schema and database.outboxTableName"
	case errors.Is(err, dialects.ErrLoginRefused):
		msg += " (check the user, the password and the database name in database.url, or QUEUEBOX_DATABASE_URL)"
	case errors.Is(err, dialects.ErrUnreachable):
		msg += " (check database.url, or QUEUEBOX_DATABASE_URL, and that the server runs)"
	}
	fmt.Fprintln(os.Stderr, "queuebox: "+msg)
	os.Exit(exitCode(err))
}

// exitCode: 0 success, 1 runtime failure, 2 usage or configuration error.
func exitCode(err error) int {
	var ce *bootstrap.Error
	var ee *bootstrap.ExitError
	var ue *usageError
	switch {
	case errors.As(err, &ee):
		return ee.Code
	case errors.As(err, &ce), errors.As(err, &ue):
		return 2
	}
	return 1
}

type usageError struct{ err error }

func (u *usageError) Error() string { return u.err.Error() }
func (u *usageError) Unwrap() error { return u.err }
