package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/proto"

	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
)

// ClusterActor is the name of the actor that serves cluster administration
// on every node.
const ClusterActor = "cluster"

// Admin sends cluster administration requests over the native API. One
// process runs at most one protoactor remote (it sets gRPC's global logger
// when it starts), so all callers share the client SharedAdmin returns.
type Admin struct {
	system *actor.ActorSystem
}

var (
	adminOnce sync.Once
	admin     *Admin
	adminErr  error
)

// SharedAdmin returns the process-wide admin client, starting its actor
// system and remote endpoint on a free 127.0.0.1 port on first use.
func SharedAdmin() (*Admin, error) {
	adminOnce.Do(func() { admin, adminErr = newAdmin() })
	return admin, adminErr
}

func newAdmin() (a *Admin, err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	r := remote.NewRemote(system, remote.Configure("127.0.0.1", port))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("admin remote on port %d: %v", port, p)
		}
	}()
	r.Start()
	return &Admin{system: system}, nil
}

// System returns the admin client's actor system (it runs protoactor remote),
// for other native API clients in the same test process.
func (a *Admin) System() *actor.ActorSystem { return a.system }

// ErrAdminTimeout is returned when a node does not answer in time.
var ErrAdminTimeout = errors.New("cluster admin request timed out")

// Call sends req to the cluster actor at remoteAddr and waits up to timeout.
func (a *Admin) Call(remoteAddr string, req proto.Message, timeout time.Duration) (proto.Message, error) {
	res, err := a.system.Root.RequestFuture(actor.NewPID(remoteAddr, ClusterActor), req, timeout).Result()
	if err != nil {
		if errors.Is(err, actor.ErrTimeout) {
			return nil, fmt.Errorf("%s: %w", remoteAddr, ErrAdminTimeout)
		}
		return nil, fmt.Errorf("%s: %w", remoteAddr, err)
	}
	msg, ok := res.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%s: unexpected answer %T", remoteAddr, res)
	}
	return msg, nil
}

// Status asks one node for its view of the cluster.
func (a *Admin) Status(remoteAddr string, timeout time.Duration) (*clusterpb.StatusResponse, error) {
	res, err := a.Call(remoteAddr, &clusterpb.StatusRequest{}, timeout)
	if err != nil {
		return nil, err
	}
	st, ok := res.(*clusterpb.StatusResponse)
	if !ok {
		return nil, fmt.Errorf("%s: status answered with %T", remoteAddr, res)
	}
	if st.Error != "" {
		return st, fmt.Errorf("%s: status: %s", remoteAddr, st.Error)
	}
	return st, nil
}

// Do sends an admin request (AddVoterRequest, RemoveVoterRequest,
// TransferLeadershipRequest) and turns an error in its AdminResponse into a
// Go error.
func (a *Admin) Do(ctx context.Context, remoteAddr string, req proto.Message) (*clusterpb.AdminResponse, error) {
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	res, err := a.Call(remoteAddr, req, timeout)
	if err != nil {
		return nil, err
	}
	ar, ok := res.(*clusterpb.AdminResponse)
	if !ok {
		return nil, fmt.Errorf("%s: %T answered with %T", remoteAddr, req, res)
	}
	if ar.Error != "" {
		return ar, fmt.Errorf("%s: %T: %s (leader %q)", remoteAddr, req, ar.Error, ar.LeaderRemoteAddr)
	}
	return ar, nil
}

// DoOnLeader sends an admin request to remoteAddr and follows the leader:
// a node that is not the leader answers with an error and the leader's
// address (empty while none is known, as right after a leadership
// transfer). The last error is returned when ctx ends.
func (a *Admin) DoOnLeader(ctx context.Context, remoteAddr string, req proto.Message) (*clusterpb.AdminResponse, error) {
	addr := remoteAddr
	for {
		ar, err := a.Do(ctx, addr, req)
		if err == nil {
			return ar, nil
		}
		if ar != nil && ar.LeaderRemoteAddr == addr {
			return ar, err
		}
		if ar != nil && ar.LeaderRemoteAddr != "" {
			addr = ar.LeaderRemoteAddr
			continue
		}
		select {
		case <-ctx.Done():
			return ar, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
