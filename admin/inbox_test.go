package admin

import (
	"context"
	"testing"

	"github.com/queuebox/queuebox/dialects"
)

// Status counts the inbox: received rows wait for the relay, relayed ones
// are outbox rows.
func TestStatusCountsTheInbox(t *testing.T) {
	d := outbox(t)
	ctx := context.Background()
	msgs := []dialects.InboxMessage{
		{Source: "web", MessageID: "a", Topic: "in", Payload: []byte(`{}`)},
		{Source: "web", MessageID: "b", Topic: "in", Payload: []byte(`{}`)},
		{Source: "web", MessageID: "c", Topic: "in", Payload: []byte(`{}`)},
	}
	if _, err := d.InboxReceive(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := d.InboxRelay(ctx, dialects.InboxRelayParams{Limit: 1, MaxAttempts: 5}); err != nil {
		t.Fatal(err)
	}
	st, err := Status(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if st.Inbox.Received != 2 || st.Inbox.Relayed != 1 || st.Inbox.OldestReceived < 0 {
		t.Fatalf("inbox status %+v, want 2 received and 1 relayed", st.Inbox)
	}
}
