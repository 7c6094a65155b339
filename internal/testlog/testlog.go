// Package testlog is a log destination that a test reads while the code
// under test writes to it from other goroutines.
package testlog

import (
	"bytes"
	"log/slog"
	"sync"
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
