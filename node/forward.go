package node

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/actors"
	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// A shard this node handed over on purpose (placement, `cohortctl cluster
// transfer-leadership --shard`, a graceful shutdown) keeps its clients: a
// request for one of its groups that this node would answer
// NOT_COORDINATOR is forwarded, over the native API, to the shard's new
// leader, and that node's answer goes back to the client. The client never
// learns the group moved. That matters: some clients end their session on
// a NOT_COORDINATOR heartbeat (kafkajs rejoins, older sarama gives up), so
// an answer that says "moved" costs them a rejoin that a move need not
// cost. During the hand-over itself (no leader yet, or the new one still
// loading the shard's groups) the request waits, up to its own deadline.
//
// Clients stay connected to this node until they reconnect for some other
// reason, so each of their requests costs one more hop
// (cohort_shard_forwarded_requests_total counts them); new clients find
// the new leader through FindCoordinator. A shard this node lost to an
// election (it crashed, or was cut off) is not forwarded: its clients saw
// the connection fail and look for the coordinator again anyway.

// forwardTimeout bounds a forwarded request without a deadline of its own.
const forwardTimeout = 30 * time.Second

// isNotCoordinator reports whether res is a NOT_COORDINATOR answer.
func isNotCoordinator(res proto.Message) bool {
	switch r := res.(type) {
	case *pb.HeartbeatResponse:
		return r.GetErrorCode() == coordinator.ErrNotCoordinator
	case *pb.OffsetCommitResponse:
		for _, t := range r.GetTopics() {
			for _, p := range t.GetPartitions() {
				return p.GetErrorCode() == coordinator.ErrNotCoordinator
			}
		}
		return false
	case interface{ GetErrorCode() int32 }:
		return r.GetErrorCode() == coordinator.ErrNotCoordinator
	}
	return false
}

// forward sends req to the current leader of gs's shard and returns its
// answer; ok is false when the shard is no longer handed over (the move
// failed, or this node leads the shard again: ask the local service) or no
// leader answered other than NOT_COORDINATOR before the deadline. While the
// transfer runs this node is still the Raft leader, fenced: it waits.
func (n *Node) forward(ctx context.Context, gs *groupShard, req proto.Message, timeout time.Duration) (res proto.Message, ok bool) {
	if n.remote == nil {
		return nil, false
	}
	if timeout <= 0 {
		timeout = forwardTimeout
	}
	deadline := time.Now().Add(timeout)
	if dl, has := ctx.Deadline(); has && dl.Before(deadline) {
		deadline = dl
	}
	me := n.raft.ID()
	for {
		if !gs.handedOver.Load() {
			return nil, false
		}
		if leader := gs.rep.LeaderID(); leader != "" && leader != me {
			if reg, found := n.raft.FSM.Node(leader); found && reg.GetRemoteAddr() != "" {
				left := time.Until(deadline)
				if left <= 0 {
					return nil, false
				}
				r, err := n.system.Root.RequestFuture(actor.NewPID(reg.GetRemoteAddr(), actors.RouterName), req, left).Result()
				if m, isMsg := r.(proto.Message); err == nil && isMsg && !isNotCoordinator(m) {
					n.metrics.forwarded()
					return m, true
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// forwardingAnswerer passes an answer on, unless it is NOT_COORDINATOR for
// a shard this node handed over: that request is forwarded instead.
type forwardingAnswerer struct {
	n   *Node
	gs  *groupShard
	req proto.Message
	to  coordinator.Answerer
}

func (f *forwardingAnswerer) Answer(res proto.Message) {
	if !isNotCoordinator(res) {
		f.to.Answer(res)
		return
	}
	// Not on the answering actor's goroutine: the forward waits.
	go func() {
		if fwd, ok := f.n.forward(context.Background(), f.gs, f.req, 0); ok {
			f.to.Answer(fwd)
			return
		}
		if !f.gs.handedOver.Load() && f.gs.svc.Coordinating() {
			f.gs.svc.Send(f.req, f.to)
			return
		}
		f.to.Answer(res)
	}()
}
