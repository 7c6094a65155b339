package sinks

import (
	"context"
	"strings"
	"sync"
	"unicode/utf8"
)

// Answer is what a destination answered to one message: a status ("HTTP
// 200 OK", a broker's acknowledgement such as "stream ORDERS seq 42") and an
// excerpt of the response's body. The relay keeps it in the attempt
// history; a sink reports it with Report when the caller asks (Wants).
type Answer struct {
	Status string
	Body   string
}

// Answers collects the answers of one Publish call, by message. The caller
// makes one with NewAnswers and hands it to the sink with WithAnswers; a
// sink that reports nothing leaves every answer empty. Safe for concurrent
// use (a sink may learn its answers in several goroutines).
type Answers struct {
	mu      sync.Mutex
	ids     []string
	index   map[string]int // by id, for a large batch; built at first use
	answers []Answer
	maxBody int
}

// NewAnswers collects the answers to msgs, with body excerpts of at most
// maxBody bytes.
func NewAnswers(msgs []Message, maxBody int) *Answers {
	a := &Answers{ids: make([]string, len(msgs)), answers: make([]Answer, len(msgs)), maxBody: maxBody}
	for i := range msgs {
		a.ids[i] = msgs[i].ID
	}
	return a
}

// Of returns the answer to the i-th message.
func (a *Answers) Of(i int) Answer {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.answers[i]
}

type answersKey struct{}

// WithAnswers returns a context that asks the sinks for their answers.
func WithAnswers(ctx context.Context, a *Answers) context.Context {
	return context.WithValue(ctx, answersKey{}, a)
}

// Wants says whether the caller collects answers, and how much of a body
// it keeps: a sink that must read a body to report it reads no more, and
// reads nothing when the caller does not ask.
func Wants(ctx context.Context) (maxBody int, ok bool) {
	a, _ := ctx.Value(answersKey{}).(*Answers)
	if a == nil {
		return 0, false
	}
	return a.maxBody, true
}

// AnswersOf returns the collector of ctx, nil when the caller collects no
// answers: a sink that learns its answers away from the Publish call (in a
// callback) keeps it and reports with Set.
func AnswersOf(ctx context.Context) *Answers {
	a, _ := ctx.Value(answersKey{}).(*Answers)
	return a
}

// Report records the answer to the message id, when the caller collects
// answers (a no-op otherwise). The body is cut to the caller's limit and to
// valid UTF-8.
func Report(ctx context.Context, id string, ans Answer) {
	if a := AnswersOf(ctx); a != nil {
		a.Set(id, ans)
	}
}

// Set records the answer to the message id (Report, for a sink that holds
// the collector).
func (a *Answers) Set(id string, ans Answer) {
	ans.Body = cutBody(ans.Body, a.maxBody)
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.ids) > 16 {
		// A broker's batch: look ids up rather than scan for each.
		if a.index == nil {
			a.index = make(map[string]int, len(a.ids))
			for i, x := range a.ids {
				a.index[x] = i
			}
		}
		if i, ok := a.index[id]; ok {
			a.answers[i] = ans
		}
		return
	}
	for i, x := range a.ids {
		if x == id {
			a.answers[i] = ans
			return
		}
	}
}

func cutBody(s string, n int) string {
	// A body read up to a limit may end inside a character: drop the
	// part, rather than mark it as invalid.
	for i := 1; i <= utf8.UTFMax-1 && i <= len(s); i++ {
		if utf8.RuneStart(s[len(s)-i]) {
			if !utf8.FullRuneInString(s[len(s)-i:]) {
				s = s[:len(s)-i]
			}
			break
		}
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if n <= 0 || len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}
