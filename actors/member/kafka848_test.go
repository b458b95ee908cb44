package member

import (
	"reflect"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

func metadataWith(topics map[string][16]byte) *kmsg.MetadataResponse {
	r := kmsg.NewPtrMetadataResponse()
	for name, id := range topics {
		t := kmsg.NewMetadataResponseTopic()
		t.Topic, t.TopicID = kmsg.StringPtr(name), id
		r.Topics = append(r.Topics, t)
	}
	return r
}

// Names map to Metadata's topic ids and back; owned topics whose id is not
// known are listed, assigned ids whose name is not known are counted and
// left out; nullable fields keep "unchanged" apart from "empty".
func TestConsumerHeartbeatKafkaMapping(t *testing.T) {
	var ids topicIDs
	idA, idB, idC := [16]byte{1}, [16]byte{2}, [16]byte{3}
	ids.learn(metadataWith(map[string][16]byte{"a": idA, "b": idB}))
	instance, rack, assignor := "i-1", "r-1", "range"
	full := &pb.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "m", MemberEpoch: 3, InstanceId: &instance, RackId: &rack,
		RebalanceTimeoutMs: 60_000, SubscribedTopicNamesSet: true, SubscribedTopicNames: []string{"a", "b"}, ServerAssignor: &assignor,
		TopicsSet: true, Topics: []*pb.TopicPartitions{{Name: "b", Partitions: []int32{2}}, {Name: "a", Partitions: []int32{0, 1}}}}
	k, missing := consumerHeartbeatToKafka(full, &ids)
	if len(missing) != 0 || k.Group != "g" || k.MemberID != "m" || k.MemberEpoch != 3 || *k.InstanceID != "i-1" || *k.RackID != "r-1" ||
		*k.ServerAssignor != "range" || k.RebalanceTimeoutMillis != 60_000 || !slices.Equal(k.SubscribedTopicNames, []string{"a", "b"}) ||
		len(k.Topics) != 2 || k.Topics[0].TopicID != idA || !slices.Equal(k.Topics[0].Partitions, []int32{0, 1}) || k.Topics[1].TopicID != idB {
		t.Fatalf("full request %+v (missing %v)", k, missing)
	}
	keep, _ := consumerHeartbeatToKafka(&pb.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "m", MemberEpoch: 3, RebalanceTimeoutMs: -1}, &ids)
	if keep.Topics != nil || keep.SubscribedTopicNames != nil || keep.InstanceID != nil || keep.RebalanceTimeoutMillis != -1 {
		t.Fatalf("keepalive %+v", keep)
	}
	join, _ := consumerHeartbeatToKafka(&pb.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "m", TopicsSet: true, SubscribedTopicNamesSet: true}, &ids)
	if join.Topics == nil || len(join.Topics) != 0 || join.SubscribedTopicNames == nil {
		t.Fatalf("join: owned %v subscribed %v, want empty, not null", join.Topics, join.SubscribedTopicNames)
	}
	_, missing = consumerHeartbeatToKafka(&pb.ConsumerGroupHeartbeatRequest{TopicsSet: true, Topics: []*pb.TopicPartitions{{Name: "c", Partitions: []int32{0}}}}, &ids)
	if !slices.Equal(missing, []string{"c"}) {
		t.Fatalf("missing %v", missing)
	}

	res := kmsg.NewPtrConsumerGroupHeartbeatResponse()
	res.MemberID, res.MemberEpoch, res.HeartbeatIntervalMillis = kmsg.StringPtr("m"), 4, 5000
	res.Assignment = &kmsg.ConsumerGroupHeartbeatResponseAssignment{Topics: []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{
		{TopicID: idB, Partitions: []int32{2}}, {TopicID: idA, Partitions: []int32{1}}, {TopicID: idC, Partitions: []int32{0}}}}
	r, unknown := consumerHeartbeatFromKafka(res, &ids)
	if unknown != 1 || r.GetMemberId() != "m" || r.GetMemberEpoch() != 4 || r.GetHeartbeatIntervalMs() != 5000 || !r.GetHasAssignment() ||
		len(r.GetAssignment()) != 2 || r.GetAssignment()[0].GetName() != "a" || r.GetAssignment()[1].GetName() != "b" {
		t.Fatalf("answer %v (unknown %d)", r, unknown)
	}
	ids.learn(metadataWith(map[string][16]byte{"c": idC}))
	if r, unknown = consumerHeartbeatFromKafka(res, &ids); unknown != 0 || len(r.GetAssignment()) != 3 {
		t.Fatalf("after learning c: %v (unknown %d)", r, unknown)
	}
	// A topic deleted and created again under its name gets a new id.
	idA2 := [16]byte{9}
	ids.learn(metadataWith(map[string][16]byte{"a": idA2}))
	if id, _ := ids.id("a"); id != idA2 {
		t.Fatalf("id of a %v", id)
	}
	if _, ok := ids.name(idA); ok {
		t.Fatal("the old id of a still resolves")
	}
	empty := kmsg.NewPtrConsumerGroupHeartbeatResponse()
	empty.ErrorCode, empty.ErrorMessage = 110, kmsg.StringPtr("fenced")
	if r, _ := consumerHeartbeatFromKafka(empty, &ids); r.GetHasAssignment() || r.GetErrorCode() != 110 || r.GetErrorMessage() != "fenced" {
		t.Fatalf("error answer %v", r)
	}
}

// Tripwire: the mapping handles every field of Kafka's ConsumerGroupHeartbeat
// (kmsg) and of the native messages; a new one fails here until the mapping
// says what becomes of it.
func TestConsumerHeartbeatKafkaMappingTripwire(t *testing.T) {
	handled := map[string][]string{
		"kmsg request":  {"Version", "Group", "MemberID", "MemberEpoch", "InstanceID", "RackID", "RebalanceTimeoutMillis", "SubscribedTopicNames", "SubscribedTopicRegex", "ServerAssignor", "Topics", "UnknownTags"},
		"kmsg response": {"Version", "ThrottleMillis", "ErrorCode", "ErrorMessage", "MemberID", "MemberEpoch", "HeartbeatIntervalMillis", "Assignment", "UnknownTags"},
		// client_id goes with every Kafka request; client_host is the
		// listener's; api_version is the one kgo negotiates.
		"native request":  {"group_id", "member_id", "member_epoch", "instance_id", "rack_id", "rebalance_timeout_ms", "subscribed_topic_names_set", "subscribed_topic_names", "subscribed_topic_regex", "server_assignor", "topics_set", "topics", "client_id", "client_host", "api_version"},
		"native response": {"error_code", "error_message", "member_id", "member_epoch", "heartbeat_interval_ms", "has_assignment", "assignment"},
	}
	check := func(what string, fields []string) {
		for _, f := range fields {
			if !slices.Contains(handled[what], f) {
				t.Errorf("%s field %s is not mapped", what, f)
			}
		}
	}
	structFields := func(v any) (out []string) {
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			out = append(out, rt.Field(i).Name)
		}
		return out
	}
	protoFields := func(m protoreflect.ProtoMessage) (out []string) {
		fs := m.ProtoReflect().Descriptor().Fields()
		for i := range fs.Len() {
			out = append(out, string(fs.Get(i).Name()))
		}
		return out
	}
	check("kmsg request", structFields(kmsg.ConsumerGroupHeartbeatRequest{}))
	check("kmsg response", structFields(kmsg.ConsumerGroupHeartbeatResponse{}))
	check("native request", protoFields(&pb.ConsumerGroupHeartbeatRequest{}))
	check("native response", protoFields(&pb.ConsumerGroupHeartbeatResponse{}))
}
