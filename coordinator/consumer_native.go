package coordinator

import (
	"slices"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// ConsumerHeartbeatFromProto is the machine's request for a native
// ConsumerGroupHeartbeat (nullable fields keep their presence).
func ConsumerHeartbeatFromProto(r *pb.ConsumerGroupHeartbeatRequest) *ConsumerHeartbeatRequest {
	req := &ConsumerHeartbeatRequest{
		Version:              int16(r.GetApiVersion()),
		GroupID:              r.GetGroupId(),
		MemberID:             r.GetMemberId(),
		MemberEpoch:          r.GetMemberEpoch(),
		InstanceID:           cloneOpt(r.InstanceId),
		RackID:               cloneOpt(r.RackId),
		RebalanceTimeoutMs:   r.GetRebalanceTimeoutMs(),
		SubscribedTopicRegex: cloneOpt(r.SubscribedTopicRegex),
		ServerAssignor:       cloneOpt(r.ServerAssignor),
		ClientID:             r.GetClientId(),
		ClientHost:           r.GetClientHost(),
	}
	if r.GetSubscribedTopicNamesSet() {
		req.SubscribedTopicNames = append([]string{}, r.GetSubscribedTopicNames()...)
	}
	if r.GetTopicsSet() {
		req.Topics = make([]assignor.TopicPartitions, 0, len(r.GetTopics()))
		for _, t := range r.GetTopics() {
			req.Topics = append(req.Topics, assignor.TopicPartitions{Topic: t.GetName(), Partitions: slices.Clone(t.GetPartitions())})
		}
	}
	return req
}

// Proto is the native ConsumerGroupHeartbeat response.
func (r ConsumerHeartbeatResponse) Proto() *pb.ConsumerGroupHeartbeatResponse {
	out := &pb.ConsumerGroupHeartbeatResponse{
		ErrorCode:           r.ErrorCode,
		ErrorMessage:        r.ErrorMessage,
		MemberId:            r.MemberID,
		MemberEpoch:         r.MemberEpoch,
		HeartbeatIntervalMs: r.HeartbeatIntervalMs,
		HasAssignment:       r.HasAssignment,
	}
	if r.HasAssignment {
		out.Assignment = topicPartitionsToNative(r.Assignment)
	}
	return out
}

func topicPartitionsToNative(l []assignor.TopicPartitions) []*pb.TopicPartitions {
	out := make([]*pb.TopicPartitions, 0, len(l))
	for _, tp := range l {
		out = append(out, &pb.TopicPartitions{Name: tp.Topic, Partitions: slices.Clone(tp.Partitions)})
	}
	return out
}

// optString is nil for "", a pointer to s otherwise.
func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Describe answers ConsumerGroupDescribe for this group. A member's
// assignment is what it holds: assigned and pending revocation.
func (g *ConsumerGroup) Describe() *pb.ConsumerGroupDescribeResponse {
	if g.epoch == 0 {
		return ConsumerDescribeAbsent(g.id)
	}
	resp := &pb.ConsumerGroupDescribeResponse{
		GroupId:         g.id,
		State:           g.State(),
		GroupEpoch:      g.epoch,
		AssignmentEpoch: g.assignmentEpoch,
		AssignorName:    g.AssignorName(),
	}
	for _, m := range g.Members() {
		held := newTPSet(m.Assigned)
		for _, tp := range m.PendingRevocation {
			for _, p := range tp.Partitions {
				held.add(tp.Topic, p)
			}
		}
		d := &pb.ConsumerGroupDescribedMember{
			MemberId:             m.MemberID,
			InstanceId:           optString(m.InstanceID),
			RackId:               optString(m.RackID),
			MemberEpoch:          m.MemberEpoch,
			ClientId:             m.ClientID,
			ClientHost:           m.ClientHost,
			SubscribedTopicNames: m.SubscribedTopicNames,
			Assignment:           topicPartitionsToNative(held.list()),
			TargetAssignment:     topicPartitionsToNative(m.Target),
			State:                m.State.String(),
			Classic:              m.Classic != nil,
		}
		if m.SubscribedTopicRegex != "" {
			d.SubscribedTopicRegex = optString(m.SubscribedTopicRegex)
		}
		resp.Members = append(resp.Members, d)
	}
	return resp
}

// ConsumerDescribeAbsent answers ConsumerGroupDescribe for a group id that
// is not a consumer group (none, or a classic one).
func ConsumerDescribeAbsent(id string) *pb.ConsumerGroupDescribeResponse {
	if id == "" {
		return &pb.ConsumerGroupDescribeResponse{ErrorCode: ErrInvalidGroupID, ErrorMessage: "The group id can't be empty."}
	}
	return &pb.ConsumerGroupDescribeResponse{GroupId: id, ErrorCode: ErrGroupIDNotFound, ErrorMessage: "Group " + id + " is not a consumer group."}
}
