package node

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/cohort-coord/cohort/internal/disconnect"
	"github.com/cohort-coord/cohort/internal/ratelog"
	"github.com/cohort-coord/cohort/tlsconfig"
)

// refusalLog wraps the native API's TLS server credentials so that a
// refused connection is logged with its reason: "TLS required" (the client
// spoke plaintext), "client certificate required" (it sent none) or the
// handshake's own error. gRPC drops these connections silently. The lines
// are rate-limited, since a misconfigured client retries without end; a
// client that goes away mid-handshake is logged at DEBUG.
type refusalLog struct {
	credentials.TransportCredentials
	log *slog.Logger
	lim *ratelog.Limiter
}

// nativeTLS is admin.RemoteTLS with refused handshakes logged to log.
func nativeTLS(src *tlsconfig.Source, log *slog.Logger, server ...grpc.ServerOption) []remote.ConfigOption {
	creds := newRefusalLog(src.GRPCServer(), log)
	return []remote.ConfigOption{
		remote.WithServerOptions(append(append([]grpc.ServerOption(nil), server...), grpc.Creds(creds))...),
		remote.WithDialOptions(grpc.WithTransportCredentials(src.GRPCClient())),
	}
}

func newRefusalLog(creds credentials.TransportCredentials, log *slog.Logger) refusalLog {
	return refusalLog{TransportCredentials: creds, log: log, lim: ratelog.New(5, 20)}
}

func (r refusalLog) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := r.TransportCredentials.ServerHandshake(c)
	if err != nil {
		reason, level := refusalReason(err)
		r.lim.Log(r.log, time.Now(), level, "native API connection refused: "+reason,
			slog.String("remote", c.RemoteAddr().String()), slog.String("err", err.Error()))
	}
	return conn, info, err
}

func (r refusalLog) Clone() credentials.TransportCredentials {
	return refusalLog{TransportCredentials: r.TransportCredentials.Clone(), log: r.log, lim: r.lim}
}

func refusalReason(err error) (string, slog.Level) {
	var rec tls.RecordHeaderError
	switch {
	case errors.As(err, &rec):
		return "TLS required", slog.LevelWarn
	case strings.Contains(err.Error(), "didn't provide a certificate"):
		return "client certificate required", slog.LevelWarn
	case disconnect.Is(err):
		return "client went away during the TLS handshake", slog.LevelDebug
	}
	return "TLS handshake failed", slog.LevelWarn
}
