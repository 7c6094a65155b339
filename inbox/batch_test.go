package inbox

import (
	"context"
	"errors"
	"testing"

	"github.com/queuebox/queuebox/dialects"
	"github.com/queuebox/queuebox/dialects/postgres"
	"github.com/queuebox/queuebox/internal/testdb"
	"github.com/queuebox/queuebox/migrations"
)

// One message the database refuses fails only its own request: the batch
// is stored again message by message.
func TestBatchIsolatesARefusedMessage(t *testing.T) {
	schema, url := testdb.Schema(t)
	names := dialects.DefaultNames()
	names.Schema = schema
	d, err := postgres.Open(context.Background(), postgres.Options{URL: url, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := migrations.Up(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	b := &batcher{store: d}
	var batch []*pending
	for _, m := range []struct{ id, body string }{{"a", `{"n":1}`}, {"bad", `{"n":"\ud800"}`}, {"b", `{"n":2}`}, {"a", `{"n":1}`}} {
		batch = append(batch, &pending{msg: dialects.InboxMessage{Source: "web", MessageID: m.id, Topic: "t", Payload: []byte(m.body)}, done: make(chan struct{})})
	}
	b.store1(batch)
	for _, p := range batch {
		<-p.done
	}
	if batch[0].err != nil || !batch[0].receipt.Stored || batch[2].err != nil || !batch[2].receipt.Stored {
		t.Fatalf("the good messages: %+v %+v", batch[0], batch[2])
	}
	if !errors.Is(batch[1].err, dialects.ErrInvalidValue) {
		t.Fatalf("the refused message: %v", batch[1].err)
	}
	if batch[3].err != nil || batch[3].receipt.Stored || batch[3].receipt.ID != batch[0].receipt.ID {
		t.Fatalf("the repeat in the same batch: %+v, want a duplicate of %s", batch[3], batch[0].receipt.ID)
	}
}
