package node

import (
	"context"
	"log/slog"

	"github.com/cohort-coord/cohort/internal/disconnect"
)

// disconnectHandler is the handler of protoactor's log (the native API's
// remote): a record whose error is a peer going away as peers do (EOF, a
// connection reset or closed, a stream cancelled) is logged at DEBUG, not at
// the ERROR protoactor gives it. A member process that exits is not an
// operator's problem; anything else keeps its level.
type disconnectHandler struct{ slog.Handler }

func (h disconnectHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level <= slog.LevelDebug || !hasDisconnect(r) {
		return h.Handler.Handle(ctx, r)
	}
	if !h.Handler.Enabled(ctx, slog.LevelDebug) {
		return nil
	}
	d := slog.NewRecord(r.Time, slog.LevelDebug, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		d.AddAttrs(a)
		return true
	})
	return h.Handler.Handle(ctx, d)
}

func (h disconnectHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return disconnectHandler{h.Handler.WithAttrs(as)}
}

func (h disconnectHandler) WithGroup(name string) slog.Handler {
	return disconnectHandler{h.Handler.WithGroup(name)}
}

func hasDisconnect(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && disconnect.Is(err) {
			found = true
			return false
		}
		return true
	})
	return found
}
