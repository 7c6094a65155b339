package inbox_test

import (
	"strings"
	"testing"

	"github.com/queuebox/queuebox/inbox"
)

// Inbox templates read headers only; the rest of the template names belong
// to outbox rows.
func TestTemplatesReadHeadersOnly(t *testing.T) {
	for _, bad := range []string{"in.{{ topic }}", "{{ key }}", "{{ id }}", "x.{{ aggregateType }}"} {
		if _, err := inbox.ParseTemplate(bad); err == nil || !strings.Contains(err.Error(), "{{ headers.NAME }}") {
			t.Errorf("%s: %v, want a refusal naming {{ headers.NAME }}", bad, err)
		}
	}
	if _, err := inbox.ParseTemplate("billing.{{ headers.type }}"); err != nil {
		t.Fatal(err)
	}
}

// A template's header is found whatever its case, and the message keeps
// its headers; what cannot be stored is a Rejection with the reason.
func TestMappingMessage(t *testing.T) {
	m := mapping(t, "q", "billing.{{ headers.type }}", "invoice", "{{ headers.Invoice-Id }}")
	msg, err := m.Message(inbox.Received{MessageID: "m1", Body: []byte(`{"a":1}`),
		Headers: map[string]string{"TYPE": "paid", "invoice-id": "inv-7"}})
	if err != nil {
		t.Fatal(err)
	}
	if msg.Source != "q" || msg.Topic != "billing.paid" || *msg.AggregateID != "inv-7" || *msg.AggregateType != "invoice" ||
		string(msg.Headers) != `{"TYPE":"paid","invoice-id":"inv-7"}` {
		t.Fatalf("message %+v headers %s", msg, msg.Headers)
	}
	for _, tc := range []struct {
		r    inbox.Received
		want string
	}{
		{inbox.Received{MessageID: "", Body: []byte(`{}`), Headers: map[string]string{"type": "x", "invoice-id": "i"}}, "the message id"},
		{inbox.Received{MessageID: "m", Body: []byte(`nope`), Headers: map[string]string{"type": "x", "invoice-id": "i"}}, "not JSON"},
		{inbox.Received{MessageID: "m", Body: []byte(`{}`), Headers: map[string]string{"invoice-id": "i"}}, "needs the header type"},
		{inbox.Received{MessageID: "m", Body: []byte(`{}`), Headers: map[string]string{"type": "x", "invoice-id": ""}}, "needs the header Invoice-Id"},
		{inbox.Received{MessageID: "m", Body: []byte(`{}`), Headers: map[string]string{"type": strings.Repeat("é", 250), "invoice-id": "i"}}, "258 characters long"},
	} {
		_, err := m.Message(tc.r)
		if !inbox.IsRejection(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want a rejection with %q", tc.r, err, tc.want)
		}
	}
}
