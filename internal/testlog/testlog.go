// Package testlog is a log destination that a test reads while the code
// under test writes to it from other goroutines.
package testlog

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/queuebox/queuebox/internal/testkit"
)

// Buffer collects what is written to it; safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Logger logs text lines into the buffer.
func (l *Buffer) Logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// WaitFor waits until the log holds text (testkit.Wait at most), and fails
// the test with the log so far when it does not.
func (l *Buffer) WaitFor(t testing.TB, text string) {
	t.Helper()
	if err := testkit.Poll(0, func() error {
		if strings.Contains(l.String(), text) {
			return nil
		}
		return errors.New("not logged yet")
	}); err != nil {
		t.Fatalf("the log lacks %q: %v; the log:\n%s", text, err, l.String())
	}
}
