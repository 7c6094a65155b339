// Command queuebox is the transactional-outbox relay. The commands are thin:
// the work is in package bootstrap.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/queuebox/queuebox/bootstrap"
)

func main() {
	err := newRoot().Execute()
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "queuebox: "+err.Error())
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
