package actors

import (
	"context"
	"log/slog"
)

// minLevel is a log handler that drops the records below min. The engine
// hands it to protoactor's actor system, which logs every dead letter (a
// message to an actor that just stopped, normal here) at info.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.Handler.Enabled(ctx, l)
}

func (m minLevel) WithAttrs(a []slog.Attr) slog.Handler {
	return minLevel{m.Handler.WithAttrs(a), m.min}
}
func (m minLevel) WithGroup(g string) slog.Handler { return minLevel{m.Handler.WithGroup(g), m.min} }
