// Package admin is the client of cohort's cluster administration API: the
// messages of proto/cohort/cluster/v1, served by every node at the actor
// named ActorName over the native API (protoactor remote).
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
	"github.com/cohort-coord/cohort/tlsconfig"
)

// ActorName is the well-known name of the actor that serves cluster
// administration on every node.
const ActorName = "cluster"

// DefaultTimeout bounds a call whose context has no deadline.
const DefaultTimeout = 10 * time.Second

var (
	// ErrTimeout: the node did not answer in time.
	ErrTimeout = errors.New("cluster admin request timed out")
	// ErrNoActor: nothing serves cluster administration at the address.
	ErrNoActor = errors.New("no cluster actor answers there (is it a cohortd native API address?)")
)

// Error is a failed administration request, as the node answered it.
type Error struct {
	Code    clusterpb.AdminError
	Message string
	// Leader is the native API address of the leader the node knew ("" when
	// none).
	Leader string
}

func (e *Error) Error() string {
	if e.Leader != "" {
		return fmt.Sprintf("%s (leader %s)", e.Message, e.Leader)
	}
	return e.Message
}

// Client sends administration requests. Answers come back through the
// actor system's own remote endpoint, so that system must run protoactor
// remote.
type Client struct{ system *actor.ActorSystem }

// NewClient returns a client that sends through system.
func NewClient(system *actor.ActorSystem) *Client { return &Client{system: system} }

// System returns the client's actor system (it runs protoactor remote when
// the client came from Listen), for other native API clients in the same
// process: a process runs at most one protoactor remote.
func (c *Client) System() *actor.ActorSystem { return c.system }

// RemoteTLS returns the protoactor remote options that carry the native
// API over TLS with src's certificate, both as a server (client
// certificates required) and as a client (the server verified against the
// host dialed). server are further gRPC server options. Every process on
// the native API (nodes, cohortctl, member applications) needs both sides,
// since answers come back through the caller's own endpoint.
func RemoteTLS(src *tlsconfig.Source, server ...grpc.ServerOption) []remote.ConfigOption {
	return []remote.ConfigOption{
		remote.WithServerOptions(append(append([]grpc.ServerOption(nil), server...), grpc.Creds(src.GRPCServer()))...),
		remote.WithDialOptions(grpc.WithTransportCredentials(src.GRPCClient())),
	}
}

// Listen starts an actor system with protoactor remote on listen
// (host:port; port 0 picks a free port) and returns a client on it. One
// process runs at most one protoactor remote. opts configure the remote
// (RemoteTLS for a node with TLS on its native API).
func Listen(listen string, opts ...remote.ConfigOption) (_ *Client, err error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("listen %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("listen %q: bad port", listen)
	}
	if port == 0 {
		// protoactor's remote needs the port up front: reserve a free one.
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("listen %q: %w", listen, err)
		}
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	quiet := slog.New(slog.DiscardHandler)
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("native API endpoint on %s: %v", net.JoinHostPort(host, strconv.Itoa(port)), p)
		}
	}()
	remote.NewRemote(system, remote.Configure(host, port, opts...)).Start()
	return &Client{system: system}, nil
}

// Call sends req to the cluster actor at addr and waits for its answer
// until ctx's deadline (DefaultTimeout without one).
func (c *Client) Call(ctx context.Context, addr string, req proto.Message) (proto.Message, error) {
	timeout := DefaultTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("%s: %w", addr, ctx.Err())
	}
	f := c.system.Root.RequestFuture(actor.NewPID(addr, ActorName), req, timeout)
	type result struct {
		v   any
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f.Result()
		ch <- result{v, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", addr, ctx.Err())
	}
	switch {
	case errors.Is(r.err, actor.ErrTimeout):
		return nil, fmt.Errorf("%s did not answer within %v: %w", addr, timeout.Round(time.Millisecond), ErrTimeout)
	case errors.Is(r.err, actor.ErrDeadLetter):
		return nil, fmt.Errorf("%s: %w", addr, ErrNoActor)
	case r.err != nil:
		return nil, fmt.Errorf("%s: %w", addr, r.err)
	}
	msg, ok := r.v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%s: unexpected answer %T", addr, r.v)
	}
	return msg, nil
}

// Status asks one node for its view of the cluster.
func (c *Client) Status(ctx context.Context, addr string) (*clusterpb.StatusResponse, error) {
	res, err := c.Call(ctx, addr, &clusterpb.StatusRequest{})
	if err != nil {
		return nil, err
	}
	st, ok := res.(*clusterpb.StatusResponse)
	if !ok {
		return nil, fmt.Errorf("%s: status answered with %T", addr, res)
	}
	if st.Error != "" {
		return st, fmt.Errorf("%s: status: %s", addr, st.Error)
	}
	return st, nil
}

// Do sends a request that changes the cluster (AddVoterRequest,
// RemoveVoterRequest, TransferLeadershipRequest, JoinRequest) to one node.
// A failure the node answers is an *Error.
func (c *Client) Do(ctx context.Context, addr string, req proto.Message) (*clusterpb.AdminResponse, error) {
	res, err := c.Call(ctx, addr, req)
	if err != nil {
		return nil, err
	}
	var ar *clusterpb.AdminResponse
	switch r := res.(type) {
	case *clusterpb.AdminResponse:
		ar = r
	case *clusterpb.JoinResponse:
		ar = &clusterpb.AdminResponse{Error: r.Error, LeaderRemoteAddr: r.LeaderRemoteAddr, Code: r.Code}
	default:
		return nil, fmt.Errorf("%s: %T answered with %T", addr, req, res)
	}
	if ar.Error == "" && ar.Code == clusterpb.AdminError_ADMIN_ERROR_NONE {
		return ar, nil
	}
	return ar, fmt.Errorf("%s: %w", addr, &Error{Code: ar.Code, Message: ar.Error, Leader: ar.LeaderRemoteAddr})
}

// Retry between attempts that found no leader.
const leaderRetry = 200 * time.Millisecond

// DoOnLeader sends a request to addr and follows the leader: a node that
// does not lead answers NOT_LEADER with the leader's address (empty while
// none is known, as right after a leadership transfer), and removing the
// leader answers LEADERSHIP_MOVED. Other failures are final; so is the last
// one when ctx ends.
func (c *Client) DoOnLeader(ctx context.Context, addr string, req proto.Message) (*clusterpb.AdminResponse, error) {
	for {
		ar, err := c.Do(ctx, addr, req)
		var ae *Error
		if err == nil || !errors.As(err, &ae) {
			return ar, err
		}
		if ae.Code != clusterpb.AdminError_ADMIN_ERROR_NOT_LEADER && ae.Code != clusterpb.AdminError_ADMIN_ERROR_LEADERSHIP_MOVED {
			return ar, err
		}
		if ae.Leader != "" && ae.Leader != addr {
			addr = ae.Leader
			continue
		}
		select {
		case <-ctx.Done():
			return ar, err
		case <-time.After(leaderRetry):
		}
	}
}
