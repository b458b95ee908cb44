package member

import (
	"cmp"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// consumerHeartbeatKey is ConsumerGroupHeartbeat's API key (KIP-848).
const consumerHeartbeatKey = 68

// servesConsumerProtocol reports whether an ApiVersions answer lists
// ConsumerGroupHeartbeat at v1 (Kafka 4.0's, with client-generated member
// ids), which the member needs; franz-go asks the same.
func servesConsumerProtocol(r *kmsg.ApiVersionsResponse) bool {
	for _, k := range r.ApiKeys {
		if k.ApiKey == consumerHeartbeatKey {
			return k.MinVersion <= 1 && k.MaxVersion >= 1
		}
	}
	return false
}

// topicIDs maps topic names to the topic ids of Metadata (v10+) and back:
// ConsumerGroupHeartbeat names topics by id on Kafka's wire, the member
// machine by name.
type topicIDs struct {
	mu     sync.Mutex
	byName map[string][16]byte
	byID   map[[16]byte]string
}

func (m *topicIDs) id(name string) ([16]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.byName[name]
	return id, ok
}

func (m *topicIDs) name(id [16]byte) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name, ok := m.byID[id]
	return name, ok
}

// learn takes the topic ids of a Metadata answer.
func (m *topicIDs) learn(r *kmsg.MetadataResponse) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byName == nil {
		m.byName, m.byID = map[string][16]byte{}, map[[16]byte]string{}
	}
	for _, t := range r.Topics {
		if t.ErrorCode != 0 || t.Topic == nil || t.TopicID == ([16]byte{}) {
			continue
		}
		if old, ok := m.byName[*t.Topic]; ok && old != t.TopicID {
			delete(m.byID, old) // deleted and created again
		}
		m.byName[*t.Topic], m.byID[t.TopicID] = t.TopicID, *t.Topic
	}
}

// consumerHeartbeatToKafka converts a native heartbeat; missing lists the
// owned topics whose ids are not known.
func consumerHeartbeatToKafka(r *pb.ConsumerGroupHeartbeatRequest, ids *topicIDs) (k *kmsg.ConsumerGroupHeartbeatRequest, missing []string) {
	k = kmsg.NewPtrConsumerGroupHeartbeatRequest()
	k.Group, k.MemberID, k.MemberEpoch = r.GetGroupId(), r.GetMemberId(), r.GetMemberEpoch()
	k.InstanceID, k.RackID, k.ServerAssignor, k.SubscribedTopicRegex = r.InstanceId, r.RackId, r.ServerAssignor, r.SubscribedTopicRegex
	k.RebalanceTimeoutMillis = r.GetRebalanceTimeoutMs()
	if r.GetSubscribedTopicNamesSet() {
		k.SubscribedTopicNames = append([]string{}, r.GetSubscribedTopicNames()...)
	}
	if r.GetTopicsSet() {
		k.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		for _, tp := range r.GetTopics() {
			id, ok := ids.id(tp.GetName())
			if !ok {
				missing = append(missing, tp.GetName())
				continue
			}
			kt := kmsg.NewConsumerGroupHeartbeatRequestTopic()
			kt.TopicID, kt.Partitions = id, append([]int32(nil), tp.GetPartitions()...)
			k.Topics = append(k.Topics, kt)
		}
		slices.SortFunc(k.Topics, func(a, b kmsg.ConsumerGroupHeartbeatRequestTopic) int {
			return slices.Compare(a.TopicID[:], b.TopicID[:])
		})
	}
	return k, missing
}

// consumerHeartbeatFromKafka converts an answer; unknown lists the
// assigned topic ids whose names are not known (left out of the answer).
func consumerHeartbeatFromKafka(k *kmsg.ConsumerGroupHeartbeatResponse, ids *topicIDs) (r *pb.ConsumerGroupHeartbeatResponse, unknown int) {
	r = &pb.ConsumerGroupHeartbeatResponse{ErrorCode: int32(k.ErrorCode), MemberEpoch: k.MemberEpoch, HeartbeatIntervalMs: k.HeartbeatIntervalMillis}
	if k.ErrorMessage != nil {
		r.ErrorMessage = *k.ErrorMessage
	}
	if k.MemberID != nil {
		r.MemberId = *k.MemberID
	}
	if k.Assignment != nil {
		r.HasAssignment = true
		for _, t := range k.Assignment.Topics {
			name, ok := ids.name(t.TopicID)
			if !ok {
				unknown++
				continue
			}
			r.Assignment = append(r.Assignment, &pb.TopicPartitions{Name: name, Partitions: append([]int32(nil), t.Partitions...)})
		}
		slices.SortFunc(r.Assignment, func(a, b *pb.TopicPartitions) int { return cmp.Compare(a.Name, b.Name) })
	}
	return r, unknown
}

// consumerHeartbeat sends a ConsumerGroupHeartbeat to the coordinator at
// addr. A coordinator that does not list the API at v1 is answered
// UNSUPPORTED_VERSION here, on which the member falls back to the classic
// protocol. Topic ids come from Metadata, asked again when a name or an id
// is not known; an assigned topic whose name stays unknown is left out of
// the answer (the member does not take it, and reports it unowned).
func (t *kafkaTransport) consumerHeartbeat(addr string, r *pb.ConsumerGroupHeartbeatRequest) (any, error) {
	t.mu.Lock()
	serves := t.consumerProto
	t.mu.Unlock()
	if !serves {
		return &pb.ConsumerGroupHeartbeatResponse{ErrorCode: int32(kerr.UnsupportedVersion.Code),
			ErrorMessage: "the coordinator does not list ConsumerGroupHeartbeat v1 in its ApiVersions"}, nil
	}
	k, missing := consumerHeartbeatToKafka(r, &t.ids)
	if len(missing) > 0 {
		if err := t.refreshTopicIDs(addr); err != nil {
			return nil, err
		}
		k, _ = consumerHeartbeatToKafka(r, &t.ids) // a topic still unknown was deleted: not reported
	}
	res, err := t.request(addr, k, true)
	if err != nil {
		return nil, err
	}
	kr := res.(*kmsg.ConsumerGroupHeartbeatResponse)
	out, unknown := consumerHeartbeatFromKafka(kr, &t.ids)
	if unknown > 0 {
		if err := t.refreshTopicIDs(addr); err == nil {
			out, _ = consumerHeartbeatFromKafka(kr, &t.ids)
		}
	}
	return out, nil
}

// refreshTopicIDs learns the ids of every topic from the broker at addr.
func (t *kafkaTransport) refreshTopicIDs(addr string) error {
	req := kmsg.NewPtrMetadataRequest() // no topics: all of them
	res, err := t.request(addr, req, true)
	if err != nil {
		return err
	}
	t.ids.learn(res.(*kmsg.MetadataResponse))
	return nil
}
