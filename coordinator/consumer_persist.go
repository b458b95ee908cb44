package coordinator

import (
	"slices"
	"time"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// A consumer group's records as the store keeps them: each ConsumerRecord
// is one protobuf Record of the kind of Kafka's record of the same job
// (records.proto), carrying the group id. The owner of a ConsumerGroup
// writes ConsumerRecordsToProto(fx.Records) in one write, in order, and on
// a takeover passes what the store read back through ConsumerRecordsFromProto
// to RestoreConsumerGroup.

// ConsumerRecordsToProto returns recs as the protobuf records of group id,
// in the same order.
func ConsumerRecordsToProto(groupID string, recs []ConsumerRecord) []*pb.Record {
	out := make([]*pb.Record, len(recs))
	for i, r := range recs {
		out[i] = ConsumerRecordToProto(groupID, r)
	}
	return out
}

// ConsumerRecordToProto returns r as a protobuf record of group id.
func ConsumerRecordToProto(groupID string, r ConsumerRecord) *pb.Record {
	switch r := r.(type) {
	case ConsumerGroupEpochRecord:
		return &pb.Record{Kind: &pb.Record_ConsumerGroupMetadata{ConsumerGroupMetadata: &pb.ConsumerGroupMetadata{
			GroupId: groupID, Epoch: r.Epoch, Deleted: r.Deleted,
		}}}
	case ConsumerTargetEpochRecord:
		return &pb.Record{Kind: &pb.Record_ConsumerTargetAssignmentMetadata{ConsumerTargetAssignmentMetadata: &pb.ConsumerGroupTargetAssignmentMetadata{
			GroupId: groupID, AssignmentEpoch: r.Epoch, Deleted: r.Deleted,
		}}}
	case ClassicRecord:
		return r.Record
	case ConsumerMemberRecord:
		return &pb.Record{Kind: &pb.Record_ConsumerMemberMetadata{ConsumerMemberMetadata: &pb.ConsumerGroupMemberMetadata{
			GroupId: groupID, MemberId: r.MemberID, Deleted: r.Deleted,
			InstanceId: r.InstanceID, RackId: r.RackID, ClientId: r.ClientID, ClientHost: r.ClientHost,
			RebalanceTimeoutMs: durationMs(r.RebalanceTimeout), SubscribedTopicNames: slices.Clone(r.SubscribedTopicNames),
			SubscribedTopicRegex: r.SubscribedTopicRegex, ServerAssignor: r.ServerAssignor,
			Classic: classicToProto(r.Classic),
		}}}
	case ConsumerTargetRecord:
		return &pb.Record{Kind: &pb.Record_ConsumerTargetAssignment{ConsumerTargetAssignment: &pb.ConsumerGroupTargetAssignmentMember{
			GroupId: groupID, MemberId: r.MemberID, Deleted: r.Deleted, Partitions: partitionsToProto(r.Partitions),
		}}}
	case ConsumerCurrentRecord:
		return &pb.Record{Kind: &pb.Record_ConsumerCurrentAssignment{ConsumerCurrentAssignment: &pb.ConsumerGroupCurrentMemberAssignment{
			GroupId: groupID, MemberId: r.MemberID, Deleted: r.Deleted,
			MemberEpoch: r.MemberEpoch, PreviousMemberEpoch: r.PrevEpoch, State: pb.ConsumerMemberState(r.State),
			AssignedPartitions: partitionsToProto(r.Assigned), PartitionsPendingRevocation: partitionsToProto(r.PendingRevoked),
		}}}
	}
	panic("coordinator: unknown consumer record type")
}

// ConsumerRecordsFromProto returns the consumer records among recs, in
// order; records of other kinds are left out.
func ConsumerRecordsFromProto(recs []*pb.Record) []ConsumerRecord {
	out := make([]ConsumerRecord, 0, len(recs))
	for _, r := range recs {
		if c, ok := ConsumerRecordFromProto(r); ok {
			out = append(out, c)
		}
	}
	return out
}

// ConsumerRecordFromProto returns the consumer record r holds; false when r
// holds another kind. The group id is the caller's to check.
func ConsumerRecordFromProto(r *pb.Record) (ConsumerRecord, bool) {
	switch k := r.GetKind().(type) {
	case *pb.Record_ConsumerGroupMetadata:
		return ConsumerGroupEpochRecord{Epoch: k.ConsumerGroupMetadata.GetEpoch(), Deleted: k.ConsumerGroupMetadata.GetDeleted()}, true
	case *pb.Record_ConsumerTargetAssignmentMetadata:
		t := k.ConsumerTargetAssignmentMetadata
		return ConsumerTargetEpochRecord{Epoch: t.GetAssignmentEpoch(), Deleted: t.GetDeleted()}, true
	case *pb.Record_ConsumerMemberMetadata:
		m := k.ConsumerMemberMetadata
		return ConsumerMemberRecord{
			MemberID: m.GetMemberId(), Deleted: m.GetDeleted(),
			InstanceID: m.GetInstanceId(), RackID: m.GetRackId(), ClientID: m.GetClientId(), ClientHost: m.GetClientHost(),
			RebalanceTimeout: time.Duration(m.GetRebalanceTimeoutMs()) * time.Millisecond, SubscribedTopicNames: slices.Clone(m.GetSubscribedTopicNames()),
			SubscribedTopicRegex: m.GetSubscribedTopicRegex(), ServerAssignor: m.GetServerAssignor(),
			Classic: classicFromProto(m.GetClassic()),
		}, true
	case *pb.Record_ConsumerTargetAssignment:
		t := k.ConsumerTargetAssignment
		return ConsumerTargetRecord{MemberID: t.GetMemberId(), Deleted: t.GetDeleted(), Partitions: partitionsFromProto(t.GetPartitions())}, true
	case *pb.Record_ConsumerCurrentAssignment:
		c := k.ConsumerCurrentAssignment
		return ConsumerCurrentRecord{
			MemberID: c.GetMemberId(), Deleted: c.GetDeleted(),
			MemberEpoch: c.GetMemberEpoch(), PrevEpoch: c.GetPreviousMemberEpoch(), State: ConsumerMemberState(c.GetState()),
			Assigned: partitionsFromProto(c.GetAssignedPartitions()), PendingRevoked: partitionsFromProto(c.GetPartitionsPendingRevocation()),
		}, true
	}
	return nil, false
}

func partitionsToProto(l []assignor.TopicPartitions) []*pb.ConsumerTopicPartitions {
	if len(l) == 0 {
		return nil
	}
	out := make([]*pb.ConsumerTopicPartitions, len(l))
	for i, tp := range l {
		out[i] = &pb.ConsumerTopicPartitions{Topic: tp.Topic, Partitions: slices.Clone(tp.Partitions)}
	}
	return out
}

func partitionsFromProto(l []*pb.ConsumerTopicPartitions) []assignor.TopicPartitions {
	out := make([]assignor.TopicPartitions, len(l))
	for i, tp := range l {
		out[i] = assignor.TopicPartitions{Topic: tp.GetTopic(), Partitions: slices.Clone(tp.GetPartitions())}
	}
	return out
}

func classicToProto(c *ClassicMemberMetadata) *pb.ConsumerGroupMemberMetadata_ClassicMemberMetadata {
	if c == nil {
		return nil
	}
	out := &pb.ConsumerGroupMemberMetadata_ClassicMemberMetadata{ProtocolType: c.ProtocolType, SessionTimeoutMs: durationMs(c.SessionTimeout)}
	for _, p := range c.Protocols {
		out.Protocols = append(out.Protocols, &pb.ConsumerGroupMemberMetadata_ClassicProtocol{Name: p.Name, Metadata: slices.Clone(p.Metadata)})
	}
	return out
}

func classicFromProto(c *pb.ConsumerGroupMemberMetadata_ClassicMemberMetadata) *ClassicMemberMetadata {
	if c == nil {
		return nil
	}
	out := &ClassicMemberMetadata{ProtocolType: c.GetProtocolType(), SessionTimeout: msDuration(c.GetSessionTimeoutMs())}
	for _, p := range c.GetProtocols() {
		out.Protocols = append(out.Protocols, ClassicProtocol{Name: p.GetName(), Metadata: slices.Clone(p.GetMetadata())})
	}
	return out
}
