package coordinator

import (
	"google.golang.org/protobuf/proto"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Absent answers a request for a group that does not exist. When create is
// true there is no answer: the request creates the group (a JoinGroup
// without a member id, or an OffsetCommit with a negative generation) and
// must be given to a New group.
func Absent(cfg *Config, req proto.Message) (resp proto.Message, create bool) {
	switch r := req.(type) {
	case *pb.JoinGroupRequest:
		if r.GetGroupId() == "" {
			return joinError(r.GetMemberId(), ErrInvalidGroupID), false
		}
		if _, _, code := joinTimeouts(cfg, r); code != ErrNone {
			return joinError(r.GetMemberId(), code), false
		}
		if r.GetMemberId() == "" {
			return nil, true
		}
		return joinError(r.GetMemberId(), ErrUnknownMemberID), false
	case *pb.SyncGroupRequest:
		if r.GetGroupId() == "" {
			return syncError(ErrInvalidGroupID), false
		}
		return syncError(ErrUnknownMemberID), false
	case *pb.HeartbeatRequest:
		if r.GetGroupId() == "" {
			return HeartbeatAnswer(ErrInvalidGroupID), false
		}
		return HeartbeatAnswer(ErrUnknownMemberID), false
	case *pb.LeaveGroupRequest:
		if r.GetGroupId() == "" {
			return &pb.LeaveGroupResponse{ErrorCode: ErrInvalidGroupID}, false
		}
		resp := &pb.LeaveGroupResponse{}
		for _, id := range r.GetMembers() {
			resp.Members = append(resp.Members, &pb.LeaveGroupMemberResponse{MemberId: id.GetMemberId(), GroupInstanceId: cloneOpt(id.GroupInstanceId), ErrorCode: ErrUnknownMemberID})
		}
		return resp, false
	case *pb.OffsetCommitRequest:
		if r.GetGenerationId() < 0 {
			return nil, true
		}
		// Kafka's OffsetMetadataManager.validateOffsetCommit: from version 9
		// on, GROUP_ID_NOT_FOUND; before it ILLEGAL_GENERATION, kept for
		// older clients.
		if r.ApiVersion != nil && r.GetApiVersion() >= 9 {
			return commitErrors(r, ErrGroupIDNotFound), false
		}
		return commitErrors(r, ErrIllegalGeneration), false
	case *pb.OffsetFetchRequest:
		return AbsentFetch(r), false
	case *pb.OffsetDeleteRequest:
		return &pb.OffsetDeleteResponse{ErrorCode: ErrGroupIDNotFound}, false
	case *pb.DescribeGroupRequest:
		if r.ApiVersion != nil && r.GetApiVersion() >= 6 {
			return describeNotFound(r.GetGroupId(), "Group "+r.GetGroupId()+" not found."), false
		}
		return &pb.DescribeGroupResponse{GroupId: r.GetGroupId(), State: Dead.String()}, false
	case *pb.DeleteGroupRequest:
		return &pb.DeleteGroupResponse{GroupId: r.GetGroupId(), ErrorCode: ErrGroupIDNotFound}, false
	}
	return nil, false
}

// AbsentFetch answers OffsetFetch for a group with no offsets: -1 for every
// requested partition, nothing for "all topics".
func AbsentFetch(req *pb.OffsetFetchRequest) *pb.OffsetFetchResponse {
	resp := &pb.OffsetFetchResponse{}
	if req.GetAllTopics() {
		return resp
	}
	for _, t := range req.GetTopics() {
		ft := &pb.OffsetFetchTopic{Name: t.GetName()}
		for _, p := range t.GetPartitions() {
			ft.Partitions = append(ft.Partitions, &pb.OffsetFetchPartition{Partition: p, Offset: -1, LeaderEpoch: -1})
		}
		resp.Topics = append(resp.Topics, ft)
	}
	return resp
}

// describeNotFound is the DescribeGroups answer for a group id that has no
// classic group (Kafka's GroupMetadataManager.describeGroups, KIP-1043):
// GROUP_ID_NOT_FOUND with state Dead from version 6 on.
func describeNotFound(id, msg string) *pb.DescribeGroupResponse {
	return &pb.DescribeGroupResponse{GroupId: id, ErrorCode: ErrGroupIDNotFound, ErrorMessage: msg, State: Dead.String()}
}
