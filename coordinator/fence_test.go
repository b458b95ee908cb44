package coordinator

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Commits of a generation are written with a fence on that generation and
// member; a fenced write answers ILLEGAL_GENERATION. Commits without a
// generation are not fenced.
func TestCommitWriteFence(t *testing.T) {
	h := newHarness(t)
	ids := h.stableGroup(2)
	var fx Effects
	h.g.Commit(h.now, commitOne(1, ids[1], nil), 1, &fx)
	if len(fx.Persists) != 1 {
		t.Fatalf("persists %v", fx.Persists)
	}
	checkMsg(t, "fence", &pb.WriteFence{Generation: 1, MemberId: ids[1]}, fx.Persists[0].Fence)
	fx.Reset()
	h.g.OnPersisted(h.now, h.g.nextToken, ErrStoreFenced, &fx)
	checkMsg(t, "fenced answer", &pb.OffsetCommitResponse{Topics: []*pb.TopicPartitionErrors{{Name: "t", Partitions: []*pb.PartitionError{{Partition: 0, ErrorCode: ErrIllegalGeneration}}}}}, fx.Replies[0].Msg)
	if o := h.fetchOne("t", 0, false); o.Offset != -1 {
		t.Fatalf("fenced commit stored: %v", o)
	}

	g := New("s", &h.cfg, h.now)
	fx.Reset()
	g.Commit(h.now, commitOne(-1, "", nil), 2, &fx)
	if len(fx.Persists) != 1 || fx.Persists[0].Fence != nil {
		t.Fatalf("generation -1 commit fenced: %v", fx.Persists)
	}
}

// NotCoordinator answers requests on a node that does not coordinate (§2.3
// pre-checks), with Kafka's overrides while loading: Heartbeat NONE and
// SyncGroup REBALANCE_IN_PROGRESS.
func TestNotCoordinatorAnswers(t *testing.T) {
	commit := &pb.OffsetCommitRequest{GroupId: "g", Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 2}}}}}
	for _, code := range []int32{ErrNotCoordinator, ErrCoordinatorLoadInProgress} {
		loading := code == ErrCoordinatorLoadInProgress
		hbWant, syncWant := code, code
		if loading {
			hbWant, syncWant = ErrNone, ErrRebalanceInProgress
		}
		cases := []struct {
			req  proto.Message
			want proto.Message
		}{
			{&pb.JoinGroupRequest{GroupId: "g", MemberId: "m"}, &pb.JoinGroupResponse{ErrorCode: code, GenerationId: -1, MemberId: "m"}},
			{&pb.SyncGroupRequest{GroupId: "g", MemberId: "m"}, syncError(syncWant)},
			{&pb.HeartbeatRequest{GroupId: "g", MemberId: "m"}, &pb.HeartbeatResponse{ErrorCode: hbWant}},
			{&pb.LeaveGroupRequest{GroupId: "g", Members: []*pb.MemberIdentity{{MemberId: "m"}}}, &pb.LeaveGroupResponse{ErrorCode: code}},
			{commit, &pb.OffsetCommitResponse{Topics: []*pb.TopicPartitionErrors{{Name: "t", Partitions: []*pb.PartitionError{{Partition: 2, ErrorCode: code}}}}}},
			{&pb.OffsetFetchRequest{GroupId: "g", AllTopics: true}, &pb.OffsetFetchResponse{ErrorCode: code}},
			{&pb.OffsetDeleteRequest{GroupId: "g"}, &pb.OffsetDeleteResponse{ErrorCode: code}},
			{&pb.DescribeGroupRequest{GroupId: "g"}, &pb.DescribeGroupResponse{ErrorCode: code, GroupId: "g"}},
			{&pb.DeleteGroupRequest{GroupId: "g"}, &pb.DeleteGroupResponse{ErrorCode: code, GroupId: "g"}},
			{&pb.ListGroupsRequest{}, &pb.ListGroupsResponse{ErrorCode: code}},
			{&pb.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "m"}, &pb.ConsumerGroupHeartbeatResponse{ErrorCode: code}},
			{&pb.ConsumerGroupDescribeRequest{GroupId: "g"}, &pb.ConsumerGroupDescribeResponse{ErrorCode: code, GroupId: "g"}},
		}
		for _, tc := range cases {
			checkMsg(t, string(tc.req.ProtoReflect().Descriptor().Name()), tc.want, NotCoordinator(tc.req, code))
		}
	}
}

// Every native request of a group has a NOT_COORDINATOR answer: one without
// is answered nil, which its caller takes for a failed call.
func TestNotCoordinatorAnswersEveryRequest(t *testing.T) {
	msgs := pb.File_cohort_group_v1_api_proto.Messages()
	for i := range msgs.Len() {
		d := msgs.Get(i)
		name := string(d.Name())
		if !strings.HasSuffix(name, "Request") || name == "CoordinatorFeaturesRequest" {
			continue
		}
		mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
		if err != nil {
			t.Fatal(err)
		}
		if NotCoordinator(mt.New().Interface(), ErrNotCoordinator) == nil {
			t.Errorf("%s has no NOT_COORDINATOR answer", name)
		}
	}
}
