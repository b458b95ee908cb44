package node

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/actors"
	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/shard"
)

// groupRouter is the node's group service as the listeners see it: every
// request for a group goes to the service of the group's shard, which
// answers NOT_COORDINATOR when this node does not lead that shard.
// ListGroups gathers the shards this node leads. With one shard it is not
// used: the listeners talk to that shard's service directly.
type groupRouter struct {
	n      *Node
	shards []*groupShard
}

type groupRequest interface {
	proto.Message
	GetGroupId() string
}

func (r *groupRouter) of(id string) *groupShard { return r.shards[shard.Of(id, len(r.shards))] }

// CallWithin implements kafka.Groups.
func (r *groupRouter) CallWithin(ctx context.Context, req proto.Message, timeout time.Duration) (proto.Message, error) {
	switch m := req.(type) {
	case groupRequest:
		gs := r.of(m.GetGroupId())
		res, err := gs.svc.CallWithin(ctx, req, timeout)
		if err == nil && isNotCoordinator(res) && gs.inTransit() {
			if fwd, ok := r.n.settle(ctx, gs, req, timeout); ok {
				return fwd, nil
			}
			if gs.serving() {
				return gs.svc.CallWithin(ctx, req, timeout)
			}
		}
		return res, err
	case *pb.ListGroupsRequest:
		return r.listGroups(ctx, m, timeout)
	}
	return r.shards[0].svc.CallWithin(ctx, req, timeout)
}

// Send implements kafka.Groups.
func (r *groupRouter) Send(req proto.Message, to coordinator.Answerer) {
	if m, ok := req.(groupRequest); ok {
		gs := r.of(m.GetGroupId())
		gs.svc.Send(req, newSettlingAnswerer(r.n, gs, req, to))
		return
	}
	r.shards[0].svc.Send(req, to)
}

// GroupID implements kafka.GroupIDs.
func (r *groupRouter) GroupID(b []byte) (string, bool) {
	return r.shards[shard.OfBytes(b, len(r.shards))].svc.GroupID(b)
}

// Coordinating implements kafka.Coordinating: whether this node
// coordinates any shard now.
func (r *groupRouter) Coordinating() bool {
	return slices.ContainsFunc(r.shards, func(s *groupShard) bool { return s.svc.Coordinating() })
}

// CoordinatingGroup implements kafka.GroupCoordinating.
func (r *groupRouter) CoordinatingGroup(id string) bool { return r.of(id).svc.Coordinating() }

// Describe is actors.Service.Describe routed by shard.
func (r *groupRouter) Describe(id string) *pb.DescribeGroupResponse { return r.of(id).svc.Describe(id) }

// DescribeConsumer describes a consumer group through its shard's service.
func (r *groupRouter) DescribeConsumer(id string) *pb.ConsumerGroupDescribeResponse {
	return r.of(id).svc.DescribeConsumer(id)
}

// listGroups answers ListGroups with the groups of every shard this node
// coordinates. Like Kafka's, the list is per node: clients ask every node.
// A shard that is changing hands here (this node leads it but has not
// loaded its groups yet) or that has no leader known makes the answer
// COORDINATOR_LOAD_IN_PROGRESS, which clients retry: a list that left a
// moving shard's groups out would say they do not exist.
func (r *groupRouter) listGroups(ctx context.Context, req *pb.ListGroupsRequest, timeout time.Duration) (proto.Message, error) {
	out := &pb.ListGroupsResponse{}
	for _, s := range r.shards {
		switch {
		case s.svc.Coordinating():
			res, err := s.svc.CallWithin(ctx, req, timeout)
			if err != nil {
				return nil, err
			}
			l, ok := res.(*pb.ListGroupsResponse)
			if !ok {
				return res, nil
			}
			if l.GetErrorCode() == coordinator.ErrNotCoordinator {
				return &pb.ListGroupsResponse{ErrorCode: coordinator.ErrCoordinatorLoadInProgress}, nil
			}
			if l.GetErrorCode() != coordinator.ErrNone {
				return l, nil
			}
			out.Groups = append(out.Groups, l.Groups...)
		case s.rep.IsLeader(), s.rep.LeaderID() == "":
			return &pb.ListGroupsResponse{ErrorCode: coordinator.ErrCoordinatorLoadInProgress}, nil
		}
	}
	slices.SortFunc(out.Groups, func(a, b *pb.ListedGroup) int { return strings.Compare(a.GetGroupId(), b.GetGroupId()) })
	return out, nil
}

// pidAnswerer answers a native API request to the actor that sent it.
type pidAnswerer struct {
	root *actor.RootContext
	to   *actor.PID
}

func (a pidAnswerer) Answer(res proto.Message) { a.root.Send(a.to, res) }

// ReplyAddress implements actors.Addressed: a request another node
// forwarded is answered to that node, and the group keeps its member's
// takeover window open (coordinator.Group.HeardThroughPeer).
func (a pidAnswerer) ReplyAddress() string { return a.to.GetAddress() }

// routerActor is the native API's groups actor on a node with several
// shards: it forwards each request to the groups actor of the request's
// shard (the sender is kept, so that actor answers the client), and
// answers ListGroups from the shards this node leads.
type routerActor struct{ r *groupRouter }

func (a *routerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case groupRequest:
		sender := ctx.Sender()
		if sender == nil {
			ctx.Forward(a.r.of(m.GetGroupId()).svc.Router())
			return
		}
		// As for a Kafka client: a request for a shard in transit is
		// forwarded to its new leader rather than answered
		// NOT_COORDINATOR, so that a member sees no move.
		a.r.Send(m, pidAnswerer{root: ctx.ActorSystem().Root, to: sender})
	case *pb.ListGroupsRequest:
		sender, root := ctx.Sender(), ctx.ActorSystem().Root
		if sender == nil {
			return
		}
		go func() {
			res, err := a.r.listGroups(context.Background(), m, actors.DefaultCallTimeout)
			if err != nil {
				res = &pb.ListGroupsResponse{ErrorCode: coordinator.ErrCoordinatorNotAvailable}
			}
			root.Send(sender, res)
		}()
	case proto.Message:
		ctx.Forward(a.r.shards[0].svc.Router())
	}
}
