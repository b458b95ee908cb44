package member

import (
	"errors"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Transport carries one member's requests to its group coordinator. The
// requests are those of the member machine: the native group API messages
// (*grouppb.JoinGroupRequest, SyncGroupRequest, HeartbeatRequest,
// OffsetCommitRequest, LeaveGroupRequest; ConsumerGroupHeartbeatRequest under
// the consumer protocol) and *machine.FindCoordinator and
// *machine.MetadataRequest. Send must not block; done is called exactly once,
// from any goroutine, with the answer (the matching native response,
// *machine.CoordinatorFound or *machine.MetadataResponse) or an error.
//
// A transport remembers the coordinator the last FindCoordinator found and
// forgets it on a connection error; the machine asks again when told
// NOT_COORDINATOR or when a request fails.
type Transport interface {
	Send(req any, done func(res any, err error))
	Close()
}

// TransportEnv is what a transport is built with.
type TransportEnv struct {
	System           *actor.ActorSystem
	Group            string
	ClientID         string
	RequestTimeout   time.Duration // bound of every request but JoinGroup
	RebalanceTimeout time.Duration // JoinGroup waits up to this much more
	// HeartbeatInterval bounds, twice over, how long a native request that
	// is not a JoinGroup or SyncGroup waits (see waitBound).
	HeartbeatInterval time.Duration
	Logger            *slog.Logger
}

// TransportFactory builds a member's transport when it starts.
type TransportFactory func(env TransportEnv) (Transport, error)

// ErrNoCoordinator is the error of requests sent while no coordinator is
// known (the member finds it again).
var ErrNoCoordinator = errors.New("member: no coordinator known")

// waitBound is how long a heartbeat, a commit, a leave or a status request
// waits for its answer: twice the heartbeat interval, a second at least and
// RequestTimeout at most. A coordinator that stopped answering without
// closing its connection (a stalled node, a lost network) is given up on
// soon enough for the member to find the next one within its session.
func (e TransportEnv) waitBound() time.Duration {
	d := max(2*e.HeartbeatInterval, time.Second)
	if e.RequestTimeout > 0 {
		d = min(d, e.RequestTimeout)
	}
	return d
}

// timeoutOf bounds req: a JoinGroup may wait the rebalance timeout for the
// other members, a SyncGroup for the leader's assignment; anything else is
// answered at once by a live coordinator.
func (e TransportEnv) timeoutOf(req any) time.Duration {
	switch req.(type) {
	case *pb.JoinGroupRequest:
		return e.RequestTimeout + e.RebalanceTimeout
	case *pb.SyncGroupRequest:
		return e.RequestTimeout
	}
	return e.waitBound()
}
