package node

import (
	"context"
	"errors"
	"sync"
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
// the new leader through FindCoordinator. When the node a shard was handed
// to crashes, the clients still connected here see nothing either: their
// requests go to whichever node the election makes the shard's leader. A
// shard this node lost to an election (it crashed, or was cut off) is not
// forwarded: its clients saw the connection fail and look for the
// coordinator again anyway.
//
// The other side of a move: a node that leads a shard but does not serve it
// yet (it is loading the shard's groups after the move, or renewing a
// lease that ran out) holds the shard's requests until it does, up to
// settleWait, rather than tell their clients to look elsewhere.

// forwardTimeout bounds a forwarded request without a deadline of its own.
const forwardTimeout = 30 * time.Second

// settleWait bounds how long a request waits for a shard in transit to
// have a leader that serves it (a hand-over takes tens of milliseconds; an
// election about a second): then it gets the local answer, NOT_COORDINATOR.
const settleWait = 3 * time.Second

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

// inTransit reports whether a NOT_COORDINATOR answer for gs's groups may be
// a moment of a planned hand-over rather than the truth: this node handed
// the shard over, or it leads the shard but does not serve it yet (its
// groups are loading after a move back, or its lease is being renewed).
func (gs *groupShard) inTransit() bool {
	return gs.handedOver.Load() || gs.rep.IsLeader()
}

// serving reports whether this node serves gs's groups from its own state
// now.
func (gs *groupShard) serving() bool {
	return gs.active.Load() && gs.lease.Held(time.Now())
}

// settle finds who answers req for a shard in transit. It returns the
// answer of the shard's new leader, forwarded (ok), or ok false when the
// local service should answer after all: this node serves the shard (again),
// or it neither leads nor handed over the shard (the leadership moved by an
// election, and NOT_COORDINATOR is the truth), or the deadline passed.
// While this node leads but does not serve yet, and while no leader is
// known, it waits.
func (n *Node) settle(ctx context.Context, gs *groupShard, req proto.Message, timeout time.Duration) (res proto.Message, ok bool) {
	if timeout <= 0 {
		timeout = forwardTimeout
	}
	end := time.Now().Add(timeout)
	if dl, has := ctx.Deadline(); has && dl.Before(end) {
		end = dl
	}
	// The wait for a serving leader is bounded by settleWait (the forwarded
	// request itself may then take its own time, up to end).
	waitUntil := func() time.Time {
		if wait := time.Now().Add(settleWait); wait.Before(end) {
			return wait
		}
		return end
	}
	deadline := waitUntil()
	me := n.raft.ID()
	for {
		if gs.serving() {
			return nil, false
		}
		switch leader := gs.rep.LeaderID(); {
		case leader == me || leader == "":
			// Loading, transferring or electing: wait.
		case !gs.handedOver.Load() || n.remote == nil:
			return nil, false
		default:
			if reg, found := n.raft.FSM.Node(leader); found && reg.GetRemoteAddr() != "" {
				left := time.Until(end)
				if left <= 0 {
					return nil, false
				}
				r, err := n.forward(gs, leader, reg.GetRemoteAddr(), req, left)
				if m, isMsg := r.(proto.Message); err == nil && isMsg && !isNotCoordinator(m) {
					n.metrics.forwarded()
					return m, true
				}
				if errors.Is(err, errLeaderChanged) {
					// In transit again: wait for the next leader afresh.
					deadline = waitUntil()
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// forward sends req to the router of the node at remote, which leads gs's
// shard, and waits up to timeout for its answer. The wait ends early when
// the shard's leader changes (the node it went to crashed or lost an
// election): the caller then sends the request again, to the new leader,
// rather than wait out the bound on an answer that will never come and
// then tell a live member to look for its coordinator. A request sent
// twice is safe: the old leader's answer is discarded, and every group
// request is checked against the group's replicated state where it lands.
func (n *Node) forward(gs *groupShard, leader, remote string, req proto.Message, timeout time.Duration) (any, error) {
	fut := n.system.Root.RequestFuture(actor.NewPID(remote, actors.RouterName), req, timeout)
	type result struct {
		r   any
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := fut.Result()
		done <- result{r, err}
	}()
	tick := time.NewTicker(leaderPoll)
	defer tick.Stop()
	for {
		select {
		case res := <-done:
			return res.r, res.err
		case <-tick.C:
			if gs.rep.LeaderID() != leader {
				return nil, errLeaderChanged
			}
		}
	}
}

// leaderPoll is how often a forwarded request checks that its shard's
// leader is still the node it went to.
const leaderPoll = 20 * time.Millisecond

var errLeaderChanged = errors.New("the shard's leader changed while the request was forwarded")

// settlingAnswerer passes an answer on, unless it is NOT_COORDINATOR for a
// shard in transit: then the request is settled (forwarded, or answered
// locally once this node serves the shard). Every request of a sharded
// node's asynchronous path goes through one, since a request routed while
// the shard was served can be answered after its hand-over began; they are
// pooled, so that costs no allocation.
type settlingAnswerer struct {
	n   *Node
	gs  *groupShard
	req proto.Message
	to  coordinator.Answerer
}

var settlingAnswerers = sync.Pool{New: func() any { return new(settlingAnswerer) }}

func newSettlingAnswerer(n *Node, gs *groupShard, req proto.Message, to coordinator.Answerer) *settlingAnswerer {
	a := settlingAnswerers.Get().(*settlingAnswerer)
	*a = settlingAnswerer{n: n, gs: gs, req: req, to: to}
	return a
}

// ReplyAddress implements actors.Addressed with the address of the answerer
// inside, so that a forwarded request is still seen as one.
func (f *settlingAnswerer) ReplyAddress() string { return actors.ReplyAddress(f.to) }

func (f *settlingAnswerer) Answer(res proto.Message) {
	n, gs, req, to := f.n, f.gs, f.req, f.to
	*f = settlingAnswerer{}
	settlingAnswerers.Put(f)
	if !isNotCoordinator(res) || !gs.inTransit() {
		to.Answer(res)
		return
	}
	// Not on the answering actor's goroutine: settling waits.
	go func() {
		if fwd, ok := n.settle(context.Background(), gs, req, 0); ok {
			to.Answer(fwd)
			return
		}
		if gs.serving() {
			gs.svc.Send(req, to)
			return
		}
		to.Answer(res)
	}()
}
