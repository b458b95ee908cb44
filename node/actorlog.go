package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
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
		if err, ok := a.Value.Any().(error); ok && isDisconnect(err) {
			found = true
			return false
		}
		return true
	})
	return found
}

// disconnectTexts are how a gone peer reads in errors that lost their
// type on the way (gRPC statuses carry only the text).
var disconnectTexts = []string{
	"EOF", "connection reset by peer", "broken pipe", "use of closed network connection",
	"code = Canceled", "transport is closing", "client connection is closing",
}

func isDisconnect(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, context.Canceled) {
		return true
	}
	msg := err.Error()
	for _, t := range disconnectTexts {
		if strings.Contains(msg, t) {
			return true
		}
	}
	return false
}
