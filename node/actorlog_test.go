package node

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

// Errors of peers going away are logged at DEBUG, others keep their level.
func TestDisconnectsLoggedAtDebug(t *testing.T) {
	for _, c := range []struct {
		err        error
		disconnect bool
	}{
		{io.EOF, true},
		{fmt.Errorf("read: %w", io.EOF), true},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{net.ErrClosed, true},
		{errors.New("rpc error: code = Unavailable desc = error reading from server: EOF"), true},
		{errors.New("rpc error: code = Canceled desc = context canceled"), true},
		{errors.New("rpc error: code = Unavailable desc = connection refused"), false},
		{errors.New("failed to deserialize"), false},
	} {
		var buf strings.Builder
		log := slog.New(disconnectHandler{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})}).With("component", "actor")
		log.Error("EndpointWriter lost connection", slog.String("address", "127.0.0.1:1"), slog.Any("error", c.err))
		want := "level=ERROR"
		if c.disconnect {
			want = "level=DEBUG"
		}
		if out := buf.String(); !strings.Contains(out, want) || !strings.Contains(out, "component=actor") || !strings.Contains(out, "address=127.0.0.1:1") {
			t.Errorf("%v: %s, want %s", c.err, out, want)
		}
		// At INFO, a disconnect is not logged at all.
		buf.Reset()
		slog.New(disconnectHandler{slog.NewTextHandler(&buf, nil)}).Error("lost", slog.Any("error", c.err))
		if got := buf.Len() > 0; got == c.disconnect {
			t.Errorf("%v at INFO: logged %v: %s", c.err, got, buf.String())
		}
	}
}
