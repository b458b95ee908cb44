// Package disconnect recognises the errors of a peer going away as peers do
// (EOF, a connection reset or closed, a cancelled stream), which the
// listeners log at DEBUG: a client that leaves is not an operator's problem.
package disconnect

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
)

// texts are how a gone peer reads in errors that lost their type on the
// way (gRPC statuses carry only the text).
var texts = []string{
	"EOF", "connection reset by peer", "broken pipe", "use of closed network connection",
	"code = Canceled", "transport is closing", "client connection is closing",
}

// Is reports whether err says the peer went away.
func Is(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, context.Canceled) {
		return true
	}
	msg := err.Error()
	for _, t := range texts {
		if strings.Contains(msg, t) {
			return true
		}
	}
	return false
}
