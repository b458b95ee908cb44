package coordinator

import (
	"google.golang.org/protobuf/proto"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// NotCoordinator answers a request that reached a node which does not
// coordinate groups right now (a Raft follower, or a leader still loading):
// code is NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS, placed where Kafka
// puts a coordinator pre-check error. Kafka's per-API overrides apply while
// loading: Heartbeat answers NONE and SyncGroup REBALANCE_IN_PROGRESS.
func NotCoordinator(req proto.Message, code int32) proto.Message {
	loading := code == ErrCoordinatorLoadInProgress
	switch r := req.(type) {
	case *pb.JoinGroupRequest:
		return joinError(r.GetMemberId(), code)
	case *pb.SyncGroupRequest:
		if loading {
			return syncError(ErrRebalanceInProgress)
		}
		return syncError(code)
	case *pb.HeartbeatRequest:
		if loading {
			return HeartbeatAnswer(ErrNone)
		}
		return HeartbeatAnswer(code)
	case *pb.LeaveGroupRequest:
		return &pb.LeaveGroupResponse{ErrorCode: code}
	case *pb.OffsetCommitRequest:
		return commitErrors(r, code)
	case *pb.OffsetFetchRequest:
		return &pb.OffsetFetchResponse{ErrorCode: code}
	case *pb.OffsetDeleteRequest:
		return &pb.OffsetDeleteResponse{ErrorCode: code}
	case *pb.DescribeGroupRequest:
		return &pb.DescribeGroupResponse{ErrorCode: code, GroupId: r.GetGroupId()}
	case *pb.DeleteGroupRequest:
		return &pb.DeleteGroupResponse{ErrorCode: code, GroupId: r.GetGroupId()}
	case *pb.ListGroupsRequest:
		return &pb.ListGroupsResponse{ErrorCode: code}
	case *pb.ConsumerGroupHeartbeatRequest:
		return &pb.ConsumerGroupHeartbeatResponse{ErrorCode: code}
	case *pb.ConsumerGroupDescribeRequest:
		return &pb.ConsumerGroupDescribeResponse{ErrorCode: code, GroupId: r.GetGroupId()}
	}
	return nil
}
