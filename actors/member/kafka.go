package member

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/cohort-coord/cohort/membership"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// ExclusiveOwnershipFeature is the feature a cohort coordinator lists in its
// ApiVersions (v3+) SupportedFeatures, with versions 1..1, when it enforces
// exclusive ownership.
const ExclusiveOwnershipFeature = "cohort.exclusive-ownership"

// Kafka returns the Kafka protocol transport: seeds are Kafka listener
// addresses (cohortd's --kafka-addr, or any Kafka broker). Requests are
// franz-go kmsg messages over TCP, one connection per broker, sent to the
// coordinator FindCoordinator names. Versions are capped at Kafka 3.9's
// (JoinGroup v9, with reasons), ConsumerGroupHeartbeat at v1 (Kafka 4.0):
// under the consumer protocol, topic ids come from Metadata.
func Kafka(seeds ...string) TransportFactory { return KafkaWithOptions(seeds) }

// KafkaTLS is Kafka over TLS with cfg (e.g. tlsconfig.ClientConfig, or a
// tlsconfig.Source's Client("") to follow certificate rotations).
func KafkaTLS(cfg *tls.Config, seeds ...string) TransportFactory {
	return KafkaWithOptions(seeds, kgo.DialTLSConfig(cfg))
}

// KafkaWithOptions is Kafka with further franz-go options for every
// connection (TLS, SASL, dialer).
func KafkaWithOptions(seeds []string, opts ...kgo.Opt) TransportFactory {
	return func(env TransportEnv) (Transport, error) {
		if len(seeds) == 0 {
			return nil, fmt.Errorf("%w: Kafka transport without seed brokers", membership.ErrConfig)
		}
		return &kafkaTransport{env: env, seeds: append([]string(nil), seeds...), opts: append([]kgo.Opt(nil), opts...), conns: map[string]*kgo.Client{}}, nil
	}
}

type kafkaTransport struct {
	env   TransportEnv
	seeds []string
	opts  []kgo.Opt

	mu    sync.Mutex
	conns map[string]*kgo.Client
	coord string
	// consumerProto: the coordinator lists ConsumerGroupHeartbeat v1.
	consumerProto bool
	next          int
	closed        bool

	ids topicIDs // for ConsumerGroupHeartbeat, which names topics by id
}

// maxVersions caps requests at Kafka 3.9's versions (JoinGroup v9, with
// reasons; OffsetCommit v9, which carries a consumer member's epoch), with
// ConsumerGroupHeartbeat at v1 (Kafka 4.0's).
func maxVersions() *kversion.Versions {
	v := kversion.V3_9_0()
	v.SetMaxKeyVersion(consumerHeartbeatKey, 1)
	return v
}

func (t *kafkaTransport) Send(req any, done func(any, error)) {
	go func() { done(t.do(req)) }()
}

func (t *kafkaTransport) Close() {
	t.mu.Lock()
	conns := t.conns
	t.conns = map[string]*kgo.Client{}
	t.closed = true
	t.mu.Unlock()
	for _, cl := range conns {
		cl.Close()
	}
}

func (t *kafkaTransport) client(addr string) (*kgo.Client, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errors.New("kafka transport closed")
	}
	if cl, ok := t.conns[addr]; ok {
		return cl, nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), t.opts...),
		kgo.SeedBrokers(addr),
		kgo.ClientID(t.env.ClientID),
		kgo.MaxVersions(maxVersions()),
		kgo.RequestRetries(0),
		kgo.DialTimeout(t.env.RequestTimeout),
		kgo.RequestTimeoutOverhead(t.env.RequestTimeout),
	)...)
	if err != nil {
		return nil, err
	}
	t.conns[addr] = cl
	return cl, nil
}

func (t *kafkaTransport) drop(addr string) {
	t.mu.Lock()
	cl := t.conns[addr]
	delete(t.conns, addr)
	if t.coord == addr {
		t.coord = ""
	}
	t.mu.Unlock()
	if cl != nil {
		go cl.Close()
	}
}

// request sends req to the broker at addr.
func (t *kafkaTransport) request(addr string, req kmsg.Request, timeout bool) (kmsg.Response, error) {
	cl, err := t.client(addr)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	if timeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.env.RequestTimeout)
		defer cancel()
	}
	res, err := cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		t.drop(addr)
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	return res, nil
}

func (t *kafkaTransport) coordinator() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.coord
}

func (t *kafkaTransport) do(req any) (any, error) {
	switch r := req.(type) {
	case *membership.FindCoordinator:
		return t.find(r.Group)
	}
	addr := t.coordinator()
	if addr == "" {
		return nil, ErrNoCoordinator
	}
	switch r := req.(type) {
	case *membership.MetadataRequest:
		return t.metadata(addr, r)
	case *pb.JoinGroupRequest:
		res, err := t.request(addr, joinToKafka(r), false) // bounded by the rebalance timeout
		if err != nil {
			return nil, err
		}
		return joinFromKafka(res.(*kmsg.JoinGroupResponse)), nil
	case *pb.SyncGroupRequest:
		res, err := t.request(addr, syncToKafka(r), false)
		if err != nil {
			return nil, err
		}
		s := res.(*kmsg.SyncGroupResponse)
		return &pb.SyncGroupResponse{ErrorCode: int32(s.ErrorCode), ProtocolType: s.ProtocolType, ProtocolName: s.Protocol, Assignment: s.MemberAssignment}, nil
	case *pb.HeartbeatRequest:
		k := kmsg.NewPtrHeartbeatRequest()
		k.Group, k.Generation, k.MemberID, k.InstanceID = r.GetGroupId(), r.GetGenerationId(), r.GetMemberId(), r.GroupInstanceId
		res, err := t.request(addr, k, true)
		if err != nil {
			return nil, err
		}
		return &pb.HeartbeatResponse{ErrorCode: int32(res.(*kmsg.HeartbeatResponse).ErrorCode)}, nil
	case *pb.OffsetCommitRequest:
		res, err := t.request(addr, commitToKafka(r), true)
		if err != nil {
			return nil, err
		}
		return commitFromKafka(res.(*kmsg.OffsetCommitResponse)), nil
	case *pb.ConsumerGroupHeartbeatRequest:
		return t.consumerHeartbeat(addr, r)
	case *pb.LeaveGroupRequest:
		k := kmsg.NewPtrLeaveGroupRequest()
		k.Group = r.GetGroupId()
		for _, m := range r.GetMembers() {
			lm := kmsg.NewLeaveGroupRequestMember()
			lm.MemberID, lm.InstanceID, lm.Reason = m.GetMemberId(), m.GroupInstanceId, m.Reason
			k.Members = append(k.Members, lm)
			if k.MemberID == "" {
				k.MemberID = m.GetMemberId() // v0-v2 carry one member
			}
		}
		res, err := t.request(addr, k, true)
		if err != nil {
			return nil, err
		}
		return &pb.LeaveGroupResponse{ErrorCode: int32(res.(*kmsg.LeaveGroupResponse).ErrorCode)}, nil
	}
	return nil, fmt.Errorf("kafka transport: unexpected request %T", req)
}

// find asks the seeds in turn for the group's coordinator, then asks the
// coordinator (ApiVersions) whether it enforces exclusive ownership and
// whether it serves the consumer protocol.
func (t *kafkaTransport) find(group string) (any, error) {
	var errs []error
	for range t.seeds {
		t.mu.Lock()
		seed := t.seeds[t.next%len(t.seeds)]
		t.next++
		t.mu.Unlock()
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey = group
		req.CoordinatorKeys = []string{group}
		res, err := t.request(seed, req, true)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r := res.(*kmsg.FindCoordinatorResponse)
		code, host, port := r.ErrorCode, r.Host, r.Port
		if len(r.Coordinators) > 0 {
			c := r.Coordinators[0]
			code, host, port = c.ErrorCode, c.Host, c.Port
		}
		if code != 0 {
			errs = append(errs, fmt.Errorf("%s: %w", seed, kerr.ErrorForCode(code)))
			continue
		}
		addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
		versions, err := t.apiVersions(addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		t.mu.Lock()
		t.coord, t.consumerProto = addr, servesConsumerProtocol(versions)
		t.mu.Unlock()
		return &membership.CoordinatorFound{Exclusive: HasExclusiveOwnership(versions)}, nil
	}
	return nil, fmt.Errorf("%w for %q: %w", ErrNoCoordinator, group, errors.Join(errs...))
}

// apiVersions asks the coordinator at addr for its ApiVersions.
func (t *kafkaTransport) apiVersions(addr string) (*kmsg.ApiVersionsResponse, error) {
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "cohort-member", "1"
	res, err := t.request(addr, req, true)
	if err != nil {
		return nil, err
	}
	return res.(*kmsg.ApiVersionsResponse), nil
}

// HasExclusiveOwnership reports whether an ApiVersions answer advertises
// ExclusiveOwnershipFeature at version 1.
func HasExclusiveOwnership(r *kmsg.ApiVersionsResponse) bool {
	for _, f := range r.SupportedFeatures {
		if f.Name == ExclusiveOwnershipFeature && f.MinVersion <= 1 && f.MaxVersion >= 1 {
			return true
		}
	}
	return false
}

func (t *kafkaTransport) metadata(addr string, r *membership.MetadataRequest) (any, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, name := range r.Topics {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, mt)
	}
	res, err := t.request(addr, req, true)
	if err != nil {
		return nil, err
	}
	out := &membership.MetadataResponse{Partitions: map[string]int32{}}
	for _, mt := range res.(*kmsg.MetadataResponse).Topics {
		if mt.ErrorCode == 0 && mt.Topic != nil && len(mt.Partitions) > 0 {
			out.Partitions[*mt.Topic] = int32(len(mt.Partitions))
		}
	}
	return out, nil
}

func joinToKafka(r *pb.JoinGroupRequest) *kmsg.JoinGroupRequest {
	k := kmsg.NewPtrJoinGroupRequest()
	k.Group = r.GetGroupId()
	k.SessionTimeoutMillis = r.GetSessionTimeoutMs()
	k.RebalanceTimeoutMillis = r.GetRebalanceTimeoutMs()
	k.MemberID = r.GetMemberId()
	k.InstanceID = r.GroupInstanceId
	k.ProtocolType = r.GetProtocolType()
	k.Reason = r.Reason
	for _, p := range r.GetProtocols() {
		kp := kmsg.NewJoinGroupRequestProtocol()
		kp.Name, kp.Metadata = p.GetName(), p.GetMetadata()
		k.Protocols = append(k.Protocols, kp)
	}
	return k
}

func joinFromKafka(k *kmsg.JoinGroupResponse) *pb.JoinGroupResponse {
	r := &pb.JoinGroupResponse{
		ErrorCode:      int32(k.ErrorCode),
		GenerationId:   k.Generation,
		ProtocolType:   k.ProtocolType,
		ProtocolName:   k.Protocol,
		Leader:         k.LeaderID,
		SkipAssignment: k.SkipAssignment,
		MemberId:       k.MemberID,
	}
	for _, m := range k.Members {
		r.Members = append(r.Members, &pb.JoinGroupMember{MemberId: m.MemberID, GroupInstanceId: m.InstanceID, Metadata: m.ProtocolMetadata})
	}
	return r
}

func syncToKafka(r *pb.SyncGroupRequest) *kmsg.SyncGroupRequest {
	k := kmsg.NewPtrSyncGroupRequest()
	k.Group, k.Generation, k.MemberID, k.InstanceID = r.GetGroupId(), r.GetGenerationId(), r.GetMemberId(), r.GroupInstanceId
	k.ProtocolType, k.Protocol = r.ProtocolType, r.ProtocolName
	for _, a := range r.GetAssignments() {
		ka := kmsg.NewSyncGroupRequestGroupAssignment()
		ka.MemberID, ka.MemberAssignment = a.GetMemberId(), a.GetAssignment()
		k.GroupAssignment = append(k.GroupAssignment, ka)
	}
	return k
}

func commitToKafka(r *pb.OffsetCommitRequest) *kmsg.OffsetCommitRequest {
	k := kmsg.NewPtrOffsetCommitRequest()
	k.Group, k.Generation, k.MemberID, k.InstanceID = r.GetGroupId(), r.GetGenerationId(), r.GetMemberId(), r.GroupInstanceId
	k.RetentionTimeMillis = r.GetRetentionTimeMs()
	for _, t := range r.GetTopics() {
		kt := kmsg.NewOffsetCommitRequestTopic()
		kt.Topic = t.GetName()
		for _, p := range t.GetPartitions() {
			kp := kmsg.NewOffsetCommitRequestTopicPartition()
			kp.Partition, kp.Offset, kp.LeaderEpoch, kp.Metadata = p.GetPartition(), p.GetOffset(), p.GetLeaderEpoch(), p.Metadata
			kt.Partitions = append(kt.Partitions, kp)
		}
		k.Topics = append(k.Topics, kt)
	}
	return k
}

func commitFromKafka(k *kmsg.OffsetCommitResponse) *pb.OffsetCommitResponse {
	r := &pb.OffsetCommitResponse{}
	for _, t := range k.Topics {
		rt := &pb.TopicPartitionErrors{Name: t.Topic}
		for _, p := range t.Partitions {
			rt.Partitions = append(rt.Partitions, &pb.PartitionError{Partition: p.Partition, ErrorCode: int32(p.ErrorCode)})
		}
		r.Topics = append(r.Topics, rt)
	}
	return r
}
