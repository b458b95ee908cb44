package kafka

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	grouppb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// The consumer group protocol (KIP-848) on the wire: ConsumerGroupHeartbeat
// and ConsumerGroupDescribe. Kafka names topics by id in both; the native
// requests name them, so the listener maps ids to names through the topic
// catalog on the way in and names to ids on the way out. A topic the
// catalog does not know (deleted) is left out both ways, as Kafka leaves
// out of its answers a topic missing from its metadata image.

// Messages of the answers the listener gives by itself.
const (
	consumerProtocolOffMsg  = "The consumer group protocol (KIP-848) is not enabled on this coordinator."
	joinOwnsTopicsMsg       = "TopicPartitions must be empty when (re-)joining."
	describeTopicsDeniedMsg = "The group has described topic(s) that the client is not authorized to describe."
)

// ConsumerGroupDescribe's MemberType (v1+, KIP-1099) of a member that
// speaks the consumer protocol, and of a classic member inside a consumer
// group (online migration).
const (
	consumerMemberType int8 = 1
	classicMemberType  int8 = 0
)

// consumerGroupHeartbeat answers a ConsumerGroupHeartbeat. The checks are
// Kafka's broker checks, in its order: the protocol is on, GROUP READ, and
// TOPIC DESCRIBE on every subscribed name (one denial refuses the request).
// The rest of the request's validation is the group machine's.
//
// The reader sends it to the groups without waiting (sentKey, prepare), as
// it does the calls that wait on a Raft write: a member's heartbeat may.
// This handler is the same request answered by a worker that waits.
func (l *Listener) consumerGroupHeartbeat(ctx context.Context, r *request, req *kmsg.ConsumerGroupHeartbeatRequest) kmsg.Response {
	n, resp := l.prepareConsumerHeartbeat(r, req)
	if resp != nil {
		return resp
	}
	m, err := l.groups.CallWithin(ctx, n, callTimeout)
	return (*consumerHeartbeatAnswer)(req).answer(l, n, m, err)
}

// prepareConsumerHeartbeat checks a ConsumerGroupHeartbeat and builds its
// native request; or it returns the answer when the request goes no
// further.
func (l *Listener) prepareConsumerHeartbeat(r *request, req *kmsg.ConsumerGroupHeartbeatRequest) (*grouppb.ConsumerGroupHeartbeatRequest, kmsg.Response) {
	refuse := func(code int16, msg *string) (*grouppb.ConsumerGroupHeartbeatRequest, kmsg.Response) {
		resp := kmsg.NewPtrConsumerGroupHeartbeatResponse()
		resp.ErrorCode, resp.ErrorMessage = code, msg
		return nil, resp
	}
	if !l.cfg.ConsumerProtocol {
		return refuse(kerr.UnsupportedVersion.Code, kmsg.StringPtr(consumerProtocolOffMsg))
	}
	if !r.groupAllowed(kmsg.ACLOperationRead, req.Group) {
		return refuse(groupDenied, nil)
	}
	if !r.topicsDescribable(req.SubscribedTopicNames) {
		return refuse(topicDenied, nil)
	}
	if field := notUTF8(req); field != "" {
		// Native strings are UTF-8 (they cross protoactor remote and
		// Raft as protobuf): such a request cannot be passed on.
		return refuse(kerr.InvalidRequest.Code, kmsg.StringPtr(field+" is not valid UTF-8."))
	}
	n, dropped := l.heartbeatRequest(r, req)
	if dropped > 0 && n.MemberEpoch == 0 {
		// The owned topics the catalog does not know cannot be passed on,
		// and a join must own none: refused here as the group would have.
		return refuse(kerr.InvalidRequest.Code, kmsg.StringPtr(joinOwnsTopicsMsg))
	}
	return n, nil
}

// consumerHeartbeatAnswer is a ConsumerGroupHeartbeat that builds its Kafka
// answer from the native one (asyncCall).
type consumerHeartbeatAnswer kmsg.ConsumerGroupHeartbeatRequest

func (*consumerHeartbeatAnswer) answer(l *Listener, n, m proto.Message, err error) kmsg.Response {
	resp := kmsg.NewPtrConsumerGroupHeartbeatResponse()
	out, err := expect[*grouppb.ConsumerGroupHeartbeatResponse](l, n, m, err)
	if err != nil {
		resp.ErrorCode = callErrorCode(err)
		return resp
	}
	l.heartbeatAnswer(out, resp)
	return resp
}

// heartbeatRequest builds the native request of a ConsumerGroupHeartbeat.
// Kafka's nulls ("unchanged since my last heartbeat") stay unset. Owned
// topics are named through the catalog; dropped counts those it does not
// know, which are left out.
func (l *Listener) heartbeatRequest(r *request, req *kmsg.ConsumerGroupHeartbeatRequest) (n *grouppb.ConsumerGroupHeartbeatRequest, dropped int) {
	n = &grouppb.ConsumerGroupHeartbeatRequest{
		GroupId:                 req.Group,
		MemberId:                req.MemberID,
		MemberEpoch:             req.MemberEpoch,
		InstanceId:              req.InstanceID,
		RackId:                  req.RackID,
		RebalanceTimeoutMs:      req.RebalanceTimeoutMillis,
		SubscribedTopicNamesSet: req.SubscribedTopicNames != nil,
		SubscribedTopicNames:    req.SubscribedTopicNames,
		ServerAssignor:          req.ServerAssignor,
		TopicsSet:               req.Topics != nil,
		ClientId:                strings.ToValidUTF8(r.clientID, "\uFFFD"), // as Java decodes it; it is only shown
		ClientHost:              r.c.host,
		ApiVersion:              int32(r.version),
	}
	if r.version >= 1 {
		n.SubscribedTopicRegex = req.SubscribedTopicRegex
	}
	if len(req.Topics) > 0 {
		n.Topics = make([]*grouppb.TopicPartitions, 0, len(req.Topics))
	}
	for _, t := range req.Topics {
		name, ok := l.topicName(t.TopicID)
		if !ok {
			dropped++
			continue
		}
		n.Topics = append(n.Topics, &grouppb.TopicPartitions{Name: name, Partitions: t.Partitions})
	}
	return n, dropped
}

// notUTF8 names the first string field of req that is not valid UTF-8,
// or returns "".
func notUTF8(req *kmsg.ConsumerGroupHeartbeatRequest) string {
	valid := func(s *string) bool { return s == nil || utf8.ValidString(*s) }
	switch {
	case !utf8.ValidString(req.Group):
		return "GroupId"
	case !utf8.ValidString(req.MemberID):
		return "MemberId"
	case !valid(req.InstanceID):
		return "InstanceId"
	case !valid(req.RackID):
		return "RackId"
	case !valid(req.SubscribedTopicRegex):
		return "SubscribedTopicRegex"
	case !valid(req.ServerAssignor):
		return "ServerAssignor"
	}
	for _, name := range req.SubscribedTopicNames {
		if !utf8.ValidString(name) {
			return "SubscribedTopicNames"
		}
	}
	return ""
}

// heartbeatAnswer fills the Kafka answer from the native one. An error
// answer carries its code and message only, as Kafka's does.
func (l *Listener) heartbeatAnswer(out *grouppb.ConsumerGroupHeartbeatResponse, resp *kmsg.ConsumerGroupHeartbeatResponse) {
	resp.ErrorCode = int16(out.ErrorCode)
	if out.ErrorMessage != "" {
		resp.ErrorMessage = kmsg.StringPtr(out.ErrorMessage)
	}
	if resp.ErrorCode != errNone {
		return
	}
	if out.MemberId != "" {
		resp.MemberID = kmsg.StringPtr(out.MemberId)
	}
	resp.MemberEpoch = out.MemberEpoch
	resp.HeartbeatIntervalMillis = out.HeartbeatIntervalMs
	if !out.HasAssignment {
		return
	}
	a := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
	a.Topics = make([]kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic, 0, len(out.Assignment))
	for _, t := range out.Assignment {
		id, ok := l.topicID(t.Name)
		if !ok {
			continue
		}
		kt := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
		kt.TopicID, kt.Partitions = id, t.Partitions
		if kt.Partitions == nil {
			kt.Partitions = []int32{}
		}
		a.Topics = append(a.Topics, kt)
	}
	resp.Assignment = &a
}

// consumerGroupDescribe answers a ConsumerGroupDescribe: one native call
// per group, describeParallel at once. As Kafka: GROUP DESCRIBE per group,
// "" is INVALID_GROUP_ID, and a group whose members hold or are assigned a
// topic the caller may not describe is answered TOPIC_AUTHORIZATION_FAILED.
func (l *Listener) consumerGroupDescribe(ctx context.Context, r *request, req *kmsg.ConsumerGroupDescribeRequest) kmsg.Response {
	resp := kmsg.NewPtrConsumerGroupDescribeResponse()
	resp.Groups = make([]kmsg.ConsumerGroupDescribeResponseGroup, len(req.Groups))
	if !l.cfg.ConsumerProtocol {
		for i, id := range req.Groups {
			g := kmsg.NewConsumerGroupDescribeResponseGroup()
			g.Group, g.ErrorCode, g.ErrorMessage = id, kerr.UnsupportedVersion.Code, kmsg.StringPtr(consumerProtocolOffMsg)
			resp.Groups[i] = g
		}
		return resp
	}
	parallel(len(req.Groups), func(i int) {
		g := kmsg.NewConsumerGroupDescribeResponseGroup()
		g.Group = req.Groups[i]
		switch {
		case !r.groupAllowed(kmsg.ACLOperationDescribe, g.Group):
			g.ErrorCode = groupDenied
		case g.Group == "" || !utf8.ValidString(g.Group): // no group has such an id
			g.ErrorCode = kerr.InvalidGroupID.Code
		default:
			out, err := call[*grouppb.ConsumerGroupDescribeResponse](ctx, l, callTimeout, &grouppb.ConsumerGroupDescribeRequest{GroupId: g.Group})
			if err != nil {
				g.ErrorCode = callErrorCode(err)
				break
			}
			l.describedGroup(r, out, &g)
			if g.ErrorCode == errNone && !r.memberTopicsDescribable(g.Members) {
				g = kmsg.NewConsumerGroupDescribeResponseGroup()
				g.Group, g.ErrorCode, g.ErrorMessage = req.Groups[i], topicDenied, kmsg.StringPtr(describeTopicsDeniedMsg)
			}
			if g.ErrorCode == errNone && req.IncludeAuthorizedOperations {
				g.AuthorizedOperations = r.groupOperations(g.Group)
			}
		}
		resp.Groups[i] = g
	})
	return resp
}

// describedGroup fills g from the native description of one group.
func (l *Listener) describedGroup(r *request, out *grouppb.ConsumerGroupDescribeResponse, g *kmsg.ConsumerGroupDescribeResponseGroup) {
	g.ErrorCode = int16(out.ErrorCode)
	if out.ErrorMessage != "" {
		g.ErrorMessage = kmsg.StringPtr(out.ErrorMessage)
	}
	if g.ErrorCode != errNone {
		return
	}
	g.State, g.Epoch, g.AssignmentEpoch, g.AssignorName = out.State, out.GroupEpoch, out.AssignmentEpoch, out.AssignorName
	g.Members = make([]kmsg.ConsumerGroupDescribeResponseGroupMember, 0, len(out.Members))
	for _, m := range out.Members {
		km := kmsg.NewConsumerGroupDescribeResponseGroupMember()
		km.MemberID, km.InstanceID, km.RackID, km.MemberEpoch = m.MemberId, m.InstanceId, m.RackId, m.MemberEpoch
		km.ClientID, km.ClientHost = m.ClientId, m.ClientHost
		km.SubscribedTopics = m.SubscribedTopicNames
		if km.SubscribedTopics == nil {
			km.SubscribedTopics = []string{}
		}
		km.SubscribedTopicRegex = m.SubscribedTopicRegex
		km.Assignment.TopicPartitions = l.describedTopics(m.Assignment)
		km.TargetAssignment.TopicPartitions = l.describedTopics(m.TargetAssignment)
		if r.version >= 1 {
			km.MemberType = consumerMemberType
			if m.Classic {
				km.MemberType = classicMemberType
			}
		}
		g.Members = append(g.Members, km)
	}
}

// describedTopics names a described assignment's topics by id and name.
func (l *Listener) describedTopics(ts []*grouppb.TopicPartitions) []kmsg.AssignmentTopicPartition {
	out := make([]kmsg.AssignmentTopicPartition, 0, len(ts))
	for _, t := range ts {
		id, ok := l.topicID(t.Name)
		if !ok {
			continue
		}
		kt := kmsg.NewAssignmentTopicPartition()
		kt.TopicID, kt.Topic, kt.Partitions = id, t.Name, t.Partitions
		if kt.Partitions == nil {
			kt.Partitions = []int32{}
		}
		out = append(out, kt)
	}
	return out
}

// topicName is the name of the topic with id in the catalog. The zero id
// names no topic (Kafka's Uuid.ZERO_UUID), whatever the catalog holds.
func (l *Listener) topicName(id [16]byte) (string, bool) {
	if id == ([16]byte{}) {
		return "", false
	}
	t, ok := l.topics.GetByID(id)
	return t.Name, ok
}

// topicID is the id of the topic named name in the catalog.
func (l *Listener) topicID(name string) ([16]byte, bool) {
	t, ok := l.topics.Get(name)
	if !ok || t.ID == ([16]byte{}) {
		return [16]byte{}, false
	}
	return t.ID, true
}

// topicsDescribable reports whether the caller may describe every topic
// named, each denial counted and logged once.
func (r *request) topicsDescribable(names []string) bool {
	if r.c.l.authz == nil || len(names) == 0 {
		return true
	}
	ok := true
	seen := make(map[string]struct{}, len(names))
	for _, name := range names {
		if _, dup := seen[name]; dup {
			continue
		}
		seen[name] = struct{}{}
		if !r.topicAllowed(kmsg.ACLOperationDescribe, name) {
			ok = false
		}
	}
	return ok
}

// memberTopicsDescribable reports whether the caller may describe every
// topic the described members hold or are assigned.
func (r *request) memberTopicsDescribable(members []kmsg.ConsumerGroupDescribeResponseGroupMember) bool {
	if r.c.l.authz == nil {
		return true
	}
	var names []string
	for _, m := range members {
		for _, t := range m.Assignment.TopicPartitions {
			names = append(names, t.Topic)
		}
		for _, t := range m.TargetAssignment.TopicPartitions {
			names = append(names, t.Topic)
		}
	}
	return r.topicsDescribable(names)
}
