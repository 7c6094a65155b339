package sinks

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// Answers land on their message, for a single message and for a broker's
// batch, in any order; an id not in the call is ignored; bodies are cut to
// the limit without a broken character.
func TestAnswersByMessage(t *testing.T) {
	for _, n := range []int{1, 3, 40} {
		msgs := make([]Message, n)
		for i := range msgs {
			msgs[i].ID = fmt.Sprintf("id-%d", i)
		}
		a := NewAnswers(msgs, 7)
		ctx := WithAnswers(context.Background(), a)
		if max, ok := Wants(ctx); !ok || max != 7 {
			t.Fatalf("Wants: %d %v", max, ok)
		}
		for i := n - 1; i >= 0; i-- {
			Report(ctx, msgs[i].ID, Answer{Status: fmt.Sprint("s", i), Body: "abcdeé" + strings.Repeat("x", i)})
		}
		Report(ctx, "someone-else", Answer{Status: "no"})
		for i := range msgs {
			if got := a.Of(i); got.Status != fmt.Sprint("s", i) || got.Body != "abcdeé" {
				t.Errorf("n=%d: answer %d is %+v", n, i, got)
			}
		}
	}
	// A body read up to a limit that cut a character drops the part.
	a := NewAnswers([]Message{{ID: "x"}}, 100)
	a.Set("x", Answer{Body: "ok \xc3"})
	if got := a.Of(0).Body; got != "ok " {
		t.Errorf("a cut character: %q", got)
	}
}
