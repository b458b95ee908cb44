package member

import (
	"errors"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
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
	Logger           *slog.Logger
}

// TransportFactory builds a member's transport when it starts.
type TransportFactory func(env TransportEnv) (Transport, error)

// ErrNoCoordinator is the error of requests sent while no coordinator is
// known (the member finds it again).
var ErrNoCoordinator = errors.New("member: no coordinator known")

func (e TransportEnv) timeoutOf(req any) time.Duration {
	if isJoin(req) {
		return e.RequestTimeout + e.RebalanceTimeout
	}
	return e.RequestTimeout
}
