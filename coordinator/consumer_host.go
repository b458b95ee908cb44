package coordinator

import (
	"errors"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// A group id has one type at a time. Its Group keeps the committed offsets
// whatever the type; a consumer group (KIP-848) lives inside it (attached
// and detached by consumer_migrate.go), and then the Group checks commits
// and fetches against the consumer group's member epochs (Kafka's
// OffsetMetadataManager is likewise shared by both group types).

// Consumer returns the group's consumer-protocol machine; nil for a classic
// group.
func (g *Group) Consumer() *ConsumerGroup { return g.consumer }

// refuseClassic is the answer to a classic request that a consumer group
// does not serve when its migration policy is disabled; nil when the group
// is classic or the request is served (offsets, deletion). A JoinGroup gets
// INCONSISTENT_GROUP_PROTOCOL, the other membership requests
// UNKNOWN_MEMBER_ID, and DescribeGroups describeNotClassic's answer
// (ConsumerGroupDescribe describes it), as Kafka answers them.
func (g *Group) refuseClassic(req proto.Message) proto.Message {
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
		return g.describeNotClassic(r)
	}
	return nil
}

// describeNotClassic is the DescribeGroups answer for a group id that holds
// a consumer group (Kafka's GroupMetadataManager.describeGroups, KIP-1043):
// state Dead, GROUP_ID_NOT_FOUND from version 6 on and no error below it.
// A request without a version (the node's own) is answered as version 6.
func (g *Group) describeNotClassic(r *pb.DescribeGroupRequest) *pb.DescribeGroupResponse {
	if r.ApiVersion != nil && r.GetApiVersion() < 6 {
		return &pb.DescribeGroupResponse{GroupId: g.id, State: Dead.String()}
	}
	return describeNotFound(g.id, "Group "+g.id+" is not a classic group.")
}

// consumerHeld reports whether a consumer group with members lives in g:
// its offsets do not expire and the group cannot be deleted.
func (g *Group) consumerHeld() bool { return g.consumer != nil && len(g.consumer.members) > 0 }

// validateConsumerCommit checks an OffsetCommit to a consumer group
// (Kafka 4.0's ConsumerGroup.validateOffsetCommit): a commit without a
// member (negative epoch, no member id) is accepted only while the group
// has no members; otherwise the member must exist (UNKNOWN_MEMBER_ID), a
// consumer-protocol member must commit with version 9 or later
// (UNSUPPORTED_VERSION; a commit without a version is the member library's
// native one, which carries the epoch) and the epoch must be its current
// one (STALE_MEMBER_EPOCH, ILLEGAL_GENERATION for a classic member).
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
	if m.classic == nil && req.ApiVersion != nil && req.GetApiVersion() < 9 {
		return ErrUnsupportedVersion
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
// (STALE_MEMBER_EPOCH); a fetch that names no member (an admin's, or an
// older version's) is not checked, nor is any fetch of a classic group.
func (g *Group) validateConsumerFetch(req *pb.OffsetFetchRequest) int32 {
	c := g.consumer
	if c == nil || req.MemberId == nil {
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
	case ConsumerTimerRegex:
		k = TimerConsumerRegex
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
	case TimerConsumerRegex:
		return ConsumerTimerRegex, true
	}
	return 0, false
}

// ReplaceConsumer swaps in the consumer group rebuilt from the store after
// a write of its records failed (nil when the store holds none: the failed
// write was the group's first).
func (g *Group) ReplaceConsumer(cg *ConsumerGroup) { g.consumer = cg }

// WriteFailed is the answer to a request of a consumer group whose records,
// or records written before them, could not be written (err; Kafka's
// CoordinatorOperationExceptionHelper mapping): NOT_COORDINATOR when this
// node may no longer write, COORDINATOR_NOT_AVAILABLE otherwise; both make
// the client find its coordinator and send its request (a full heartbeat)
// again.
func WriteFailed(req proto.Message, err error) proto.Message {
	code := ErrCoordinatorNotAvailable
	if errors.Is(err, ErrStoreNotLeader) {
		code = ErrNotCoordinator
	}
	if _, ok := req.(*pb.ConsumerGroupHeartbeatRequest); ok {
		return &pb.ConsumerGroupHeartbeatResponse{ErrorCode: code, ErrorMessage: "The group's state could not be written: " + err.Error()}
	}
	return NotCoordinator(req, code)
}
