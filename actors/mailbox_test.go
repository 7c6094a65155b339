package actors

import (
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/queuebox/queuebox/internal/testkit"
)

// A mailbox's length counts the message being handled and those waiting,
// not the system messages, and comes back to zero even when the actor stops
// with messages still in its mailbox.
func TestMailboxLengthCountsWaitingMessages(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	var length mailboxLength
	handling := make(chan struct{}, 4)
	gate := make(chan struct{})
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(string); ok {
			handling <- struct{}{}
			<-gate
		}
	}, actor.WithMailbox(mailbox(1, &length))))
	sys.Root.Send(pid, "a")
	<-handling // "a" is being handled
	sys.Root.Send(pid, "b")
	sys.Root.Stop(pid) // a system message, behind "a"
	if n := length.n.Load(); n != 2 {
		t.Fatalf("length %d with one message handled and one waiting, want 2", n)
	}
	close(gate)
	testkit.Eventually(t, "an empty mailbox once the actor stopped", 10*time.Second,
		func() error {
			if n := length.n.Load(); n != 0 {
				return fmt.Errorf("length %d", n)
			}
			return nil
		})
}
