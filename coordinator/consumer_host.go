package coordinator

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// A group id has one type at a time. Its Group keeps the committed offsets
// whatever the type; a consumer group (KIP-848) lives inside it, attached
// while its classic side has no members, and from then on the Group refuses
// classic membership requests and checks commits against the consumer
// group's member epochs (Kafka's OffsetMetadataManager is likewise shared by
// both group types).

// Consumer returns the group's consumer-protocol machine; nil for a classic
// group.
func (g *Group) Consumer() *ConsumerGroup { return g.consumer }

// AttachConsumer makes the group a consumer group served by cg. Only a
// classic group without members or pending member ids may become one (an
// empty classic group, a group of offsets only, is converted as Kafka
// converts it); it reports whether it did.
func (g *Group) AttachConsumer(cg *ConsumerGroup) bool {
	if g.consumer != nil || g.state == Dead || g.members.len() > 0 || len(g.pending) > 0 {
		return false
	}
	g.consumer = cg
	return true
}

// RefuseConsumerHeartbeat is the answer to a ConsumerGroupHeartbeat that a
// classic group with members cannot take (no online migration yet): Kafka's
// GROUP_ID_NOT_FOUND with the reason. ok is false when the heartbeat may go
// to the consumer group (attached, or attachable).
func (g *Group) RefuseConsumerHeartbeat() (resp ConsumerHeartbeatResponse, ok bool) {
	if g.consumer != nil {
		return resp, false
	}
	if g.state == Dead || g.members.len() > 0 || len(g.pending) > 0 {
		return consumerError(ErrGroupIDNotFound, fmt.Sprintf("Group %s is a classic group with members: it cannot be converted to a consumer group.", g.id)), true
	}
	return resp, false
}

// RefuseClassic is the answer to a classic request that a consumer group
// does not serve; nil when the group is classic or the request is served
// (offsets, deletion). A JoinGroup gets INCONSISTENT_GROUP_PROTOCOL, the
// other membership requests UNKNOWN_MEMBER_ID, and DescribeGroups
// GROUP_ID_NOT_FOUND (ConsumerGroupDescribe describes it), as Kafka answers
// them when migration is disabled.
func (g *Group) RefuseClassic(req proto.Message) proto.Message {
	if g.consumer == nil {
		return nil
	}
	switch r := req.(type) {
	case *pb.JoinGroupRequest:
		return joinError(r.GetMemberId(), ErrInconsistentGroupProto)
	case *pb.SyncGroupRequest:
		return syncError(ErrUnknownMemberID)
	case *pb.HeartbeatRequest:
		return HeartbeatAnswer(ErrUnknownMemberID)
	case *pb.LeaveGroupRequest:
		resp := &pb.LeaveGroupResponse{}
		for _, id := range r.GetMembers() {
			resp.Members = append(resp.Members, &pb.LeaveGroupMemberResponse{MemberId: id.GetMemberId(), GroupInstanceId: cloneOpt(id.GroupInstanceId), ErrorCode: ErrUnknownMemberID})
		}
		return resp
	case *pb.DescribeGroupRequest:
		return &pb.DescribeGroupResponse{GroupId: g.id, ErrorCode: ErrGroupIDNotFound, State: Dead.String()}
	}
	return nil
}

// consumerHeld reports whether a consumer group with members lives in g:
// its offsets do not expire and the group cannot be deleted.
func (g *Group) consumerHeld() bool { return g.consumer != nil && len(g.consumer.members) > 0 }

// validateConsumerCommit checks an OffsetCommit to a consumer group
// (Kafka 4.0's rules): a commit without a member (negative epoch, no member
// id) is accepted only while the group has no members; otherwise the member
// must exist (UNKNOWN_MEMBER_ID) and the epoch must be its current one
// (STALE_MEMBER_EPOCH).
func (g *Group) validateConsumerCommit(req *pb.OffsetCommitRequest) int32 {
	c := g.consumer
	epoch, id := req.GetGenerationId(), req.GetMemberId()
	if epoch < 0 && id == "" && req.GroupInstanceId == nil && len(c.members) == 0 {
		return ErrNone
	}
	m := c.members[id]
	if m == nil {
		return ErrUnknownMemberID
	}
	if epoch != m.epoch {
		if m.classic != nil {
			// A classic member knows its epoch as a generation.
			return ErrIllegalGeneration
		}
		return ErrStaleMemberEpoch
	}
	return ErrNone
}

// validateConsumerFetch checks an OffsetFetch v9+ that names a member of a
// consumer group (Kafka's ConsumerGroup.validateOffsetFetch): the member
// must exist (UNKNOWN_MEMBER_ID) and the epoch be its current one
// (STALE_MEMBER_EPOCH); a fetch without a member and with a negative epoch
// (an admin's, or an older version's) is not checked, nor is any fetch of a
// classic group.
func (g *Group) validateConsumerFetch(req *pb.OffsetFetchRequest) int32 {
	c := g.consumer
	if c == nil || (req.MemberId == nil && req.GetMemberEpoch() < 0) {
		return ErrNone
	}
	m := c.members[req.GetMemberId()]
	if m == nil {
		return ErrUnknownMemberID
	}
	if req.GetMemberEpoch() != m.epoch {
		return ErrStaleMemberEpoch
	}
	return ErrNone
}

// ConsumerAbsent answers a ConsumerGroupHeartbeat for a group id that has no
// group: a valid join (epoch 0) creates the group (create true, no answer);
// anything else is answered as a group that does not exist answers it.
func ConsumerAbsent(cfg *ConsumerConfig, req *ConsumerHeartbeatRequest) (resp ConsumerHeartbeatResponse, create bool) {
	g := NewConsumerGroup(req.GroupID, cfg, nil)
	if code, msg := g.validate(req); code != ErrNone {
		return consumerError(code, msg), false
	}
	if req.MemberEpoch == EpochJoin {
		return resp, true
	}
	var fx ConsumerEffects
	return g.Heartbeat(req, time.Time{}, &fx), false
}

// NumMembers returns the number of members.
func (g *ConsumerGroup) NumMembers() int { return len(g.members) }

// Key is the timer's key among its group's timers.
func (t ConsumerTimer) Key() TimerKey {
	k := TimerConsumerSession
	switch t.Kind {
	case ConsumerTimerRebalance:
		k = TimerConsumerRebalance
	case ConsumerTimerJoin:
		k = TimerConsumerJoin
	case ConsumerTimerSync:
		k = TimerConsumerSync
	}
	return TimerKey{Kind: k, Member: t.Member}
}

// ConsumerKind is the consumer timer a key names; ok is false for a classic
// group's timer.
func (k TimerKey) ConsumerKind() (kind ConsumerTimerKind, ok bool) {
	switch k.Kind {
	case TimerConsumerSession:
		return ConsumerTimerSession, true
	case TimerConsumerRebalance:
		return ConsumerTimerRebalance, true
	case TimerConsumerJoin:
		return ConsumerTimerJoin, true
	case TimerConsumerSync:
		return ConsumerTimerSync, true
	}
	return 0, false
}

// ReplaceConsumer swaps in the consumer group rebuilt from the store after
// a write of its records failed (nil when the store holds none: the failed
// write was the group's first).
func (g *Group) ReplaceConsumer(cg *ConsumerGroup) { g.consumer = cg }

// ConsumerWriteFailed is the answer to a ConsumerGroupHeartbeat whose
// records, or records written before them, could not be written (Kafka's
// CoordinatorOperationExceptionHelper mapping): NOT_COORDINATOR when this
// node may no longer write, COORDINATOR_NOT_AVAILABLE otherwise; both make
// the client find its coordinator and send a full heartbeat again.
func ConsumerWriteFailed(err error) *pb.ConsumerGroupHeartbeatResponse {
	code := ErrCoordinatorNotAvailable
	if errors.Is(err, ErrStoreNotLeader) {
		code = ErrNotCoordinator
	}
	return &pb.ConsumerGroupHeartbeatResponse{ErrorCode: code, ErrorMessage: "The group's state could not be written: " + err.Error()}
}
