package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	grouppb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

const (
	// callTimeout bounds group calls that do not park.
	callTimeout = 15 * time.Second
	// parkMargin is added to the rebalance timeout for calls that may park
	// (JoinGroup, SyncGroup). Java clients wait rebalance timeout + 5 s, so
	// the listener answers (with a retriable error) before they give up.
	parkMargin = 3 * time.Second
	// defaultRebalanceTimeout bounds a SyncGroup whose connection never sent
	// a JoinGroup (Kafka's default max.poll.interval.ms).
	defaultRebalanceTimeout = 5 * time.Minute
	// describeParallel bounds concurrent calls of one multi-group request.
	describeParallel = 8

	// GenerationTag is a tagged field (flexible DescribeGroups, v5+) in which
	// the listener reports a group's generation; Kafka clients skip unknown
	// tags, cohortctl reads it.
	GenerationTag = 0x636f
)

// errBadResponse is returned when Groups answers with the wrong type.
var errBadResponse = errors.New("unexpected native response type")

// call runs one native request within timeout (see Groups) and checks the
// answer's type.
func call[Resp proto.Message](ctx context.Context, l *Listener, timeout time.Duration, req proto.Message) (Resp, error) {
	m, err := l.groups.CallWithin(ctx, req, timeout)
	return expect[Resp](l, req, m, err)
}

// expect checks a call's answer: of type Resp, or the call failed (counted
// and logged).
func expect[Resp proto.Message](l *Listener, req, m proto.Message, err error) (Resp, error) {
	var zero Resp
	if err == nil {
		r, ok := m.(Resp)
		if ok && m != nil {
			return r, nil
		}
		err = fmt.Errorf("%w: %T", errBadResponse, m)
	}
	l.callErrors.Add(1)
	l.log.Debug("group call failed", "request", fmt.Sprintf("%T", req), "err", err)
	return zero, err
}

// callErrorCode is the Kafka error code answered when a group call fails
// (deadline, coordinator unavailable): retriable for every group API, and
// makes clients look the coordinator up again.
func callErrorCode(error) int16 { return kerr.CoordinatorNotAvailable.Code }

func parkTimeout(rebalanceMs int32) time.Duration {
	if rebalanceMs <= 0 {
		return defaultRebalanceTimeout + parkMargin
	}
	return time.Duration(rebalanceMs)*time.Millisecond + parkMargin
}

// prepare checks a waiting call's request and builds its native request,
// the call's bound and what turns the native answer into the Kafka one; or
// it returns the answer when the request goes no further.
func (l *Listener) prepare(r *request, kreq kmsg.Request, one *commitOne) (proto.Message, time.Duration, asyncCall, kmsg.Response) {
	switch req := kreq.(type) {
	case *kmsg.OffsetCommitRequest:
		b := l.prepareCommit(r, req, one)
		if len(b.req.Topics) == 0 { // only partitions the listener refused itself
			return nil, 0, nil, b.answer(l, nil, nil, nil)
		}
		return b.req, callTimeout, b, nil
	case *kmsg.JoinGroupRequest:
		n, timeout, resp := l.prepareJoin(r, req)
		return n, timeout, (*joinAnswer)(req), resp
	case *kmsg.SyncGroupRequest:
		n, timeout, resp := l.prepareSync(r, req)
		return n, timeout, (*syncAnswer)(req), resp
	}
	panic(fmt.Sprintf("kafka: %T is not a waiting call", kreq))
}

// prepareJoin checks a JoinGroup and builds its native request and the
// call's bound; or it returns the answer when the request goes no further.
func (l *Listener) prepareJoin(r *request, req *kmsg.JoinGroupRequest) (*grouppb.JoinGroupRequest, time.Duration, kmsg.Response) {
	if l.onJoin != nil {
		l.onJoin(r.clientID, r.version)
	}
	if l.log.Enabled(context.Background(), slog.LevelDebug) { // boxing the values costs allocations on every join
		l.log.Debug("join group", "group", req.Group, "version", r.version, "client_id", r.clientID, "member_id", req.MemberID)
	}
	rebalance := req.RebalanceTimeoutMillis
	if r.version == 0 {
		rebalance = req.SessionTimeoutMillis
	}
	r.c.rebalanceHint.Store(rebalance)
	if !r.groupAllowed(kmsg.ACLOperationRead, req.Group) {
		resp := kmsg.NewPtrJoinGroupResponse()
		resp.ErrorCode, resp.Generation, resp.MemberID = groupDenied, -1, req.MemberID
		return nil, 0, resp
	}
	n := &grouppb.JoinGroupRequest{
		GroupId:            req.Group,
		SessionTimeoutMs:   req.SessionTimeoutMillis,
		RebalanceTimeoutMs: req.RebalanceTimeoutMillis,
		MemberId:           req.MemberID,
		ProtocolType:       req.ProtocolType,
		ApiVersion:         int32(r.version),
		ClientId:           r.clientID,
		ClientHost:         r.c.host,
	}
	if r.version >= 5 {
		n.GroupInstanceId = req.InstanceID
	}
	if r.version >= 8 {
		n.Reason = req.Reason
	}
	n.Protocols = joinProtocols(req.Protocols)
	return n, parkTimeout(rebalance), nil
}

// joinAnswer is a JoinGroup request that builds its Kafka answer from the
// native one (asyncCall).
type joinAnswer kmsg.JoinGroupRequest

func (a *joinAnswer) answer(l *Listener, n, m proto.Message, err error) kmsg.Response {
	req := (*kmsg.JoinGroupRequest)(a)
	resp := kmsg.NewPtrJoinGroupResponse()
	out, err := expect[*grouppb.JoinGroupResponse](l, n, m, err)
	if err != nil {
		resp.ErrorCode = callErrorCode(err)
		resp.Generation = -1
		resp.MemberID = req.MemberID
		return resp
	}
	resp.ErrorCode = int16(out.ErrorCode)
	resp.Generation = out.GenerationId
	resp.ProtocolType = out.ProtocolType
	resp.Protocol = out.ProtocolName
	if resp.Protocol != nil && *resp.Protocol == "" && req.Version >= 7 {
		resp.Protocol = nil
	}
	resp.LeaderID = out.Leader
	resp.SkipAssignment = out.SkipAssignment
	resp.MemberID = out.MemberId
	for _, m := range out.Members {
		km := kmsg.NewJoinGroupResponseMember()
		km.MemberID = m.MemberId
		km.InstanceID = m.GroupInstanceId
		km.ProtocolMetadata = m.Metadata
		resp.Members = append(resp.Members, km)
	}
	return resp
}

// prepareSync checks a SyncGroup and builds its native request and the
// call's bound; or it returns the answer when the request goes no further.
func (l *Listener) prepareSync(r *request, req *kmsg.SyncGroupRequest) (*grouppb.SyncGroupRequest, time.Duration, kmsg.Response) {
	if !r.groupAllowed(kmsg.ACLOperationRead, req.Group) {
		resp := kmsg.NewPtrSyncGroupResponse()
		resp.ErrorCode = groupDenied
		return nil, 0, resp
	}
	if r.version >= 5 && (req.ProtocolType == nil || req.Protocol == nil) {
		resp := kmsg.NewPtrSyncGroupResponse()
		resp.ErrorCode = kerr.InconsistentGroupProtocol.Code
		return nil, 0, resp
	}
	n := &grouppb.SyncGroupRequest{
		GroupId:      req.Group,
		GenerationId: req.Generation,
		MemberId:     req.MemberID,
		ApiVersion:   int32(r.version),
	}
	if r.version >= 3 {
		n.GroupInstanceId = req.InstanceID
	}
	if r.version >= 5 {
		n.ProtocolType, n.ProtocolName = req.ProtocolType, req.Protocol
	}
	for _, a := range req.GroupAssignment {
		n.Assignments = append(n.Assignments, &grouppb.SyncGroupAssignment{MemberId: a.MemberID, Assignment: a.MemberAssignment})
	}
	return n, parkTimeout(r.c.rebalanceHint.Load()), nil
}

// syncAnswer is a SyncGroup request that builds its Kafka answer from the
// native one (asyncCall).
type syncAnswer kmsg.SyncGroupRequest

func (a *syncAnswer) answer(l *Listener, n, m proto.Message, err error) kmsg.Response {
	resp := kmsg.NewPtrSyncGroupResponse()
	out, err := expect[*grouppb.SyncGroupResponse](l, n, m, err)
	if err != nil {
		resp.ErrorCode = callErrorCode(err)
		return resp
	}
	resp.ErrorCode = int16(out.ErrorCode)
	resp.ProtocolType, resp.Protocol = out.ProtocolType, out.ProtocolName
	resp.MemberAssignment = out.Assignment
	return resp
}

// heartbeat answers a Heartbeat on the connection's reader (answerInline):
// the reader's scratch messages are its to use.
func (l *Listener) heartbeat(ctx context.Context, r *request, req *kmsg.HeartbeatRequest) kmsg.Response {
	r.c.hbAnswer = kmsg.HeartbeatResponse{}
	resp := &r.c.hbAnswer
	if !r.groupAllowed(kmsg.ACLOperationRead, req.Group) {
		resp.ErrorCode = groupDenied
		return resp
	}
	// The group actor is done with the native request once it has
	// answered; one that did not answer in time may still be queued there,
	// so only an answered one is kept for the next heartbeat.
	n := r.c.hbNative
	r.c.hbNative = nil
	if n == nil {
		n = &grouppb.HeartbeatRequest{}
	}
	n.GroupId, n.GenerationId, n.MemberId, n.GroupInstanceId = req.Group, req.Generation, req.MemberID, nil
	if r.version >= 3 {
		n.GroupInstanceId = req.InstanceID
	}
	out, err := call[*grouppb.HeartbeatResponse](ctx, l, 0, n)
	if err != nil {
		resp.ErrorCode = callErrorCode(err)
		return resp
	}
	r.c.hbNative = n
	resp.ErrorCode = int16(out.ErrorCode)
	return resp
}

func (l *Listener) leaveGroup(ctx context.Context, r *request, req *kmsg.LeaveGroupRequest) kmsg.Response {
	resp := kmsg.NewPtrLeaveGroupResponse()
	if !r.groupAllowed(kmsg.ACLOperationRead, req.Group) {
		resp.ErrorCode = groupDenied
		return resp
	}
	n := &grouppb.LeaveGroupRequest{GroupId: req.Group}
	if r.version < 3 {
		n.Members = []*grouppb.MemberIdentity{{MemberId: req.MemberID}}
	} else {
		for _, m := range req.Members {
			id := &grouppb.MemberIdentity{MemberId: m.MemberID, GroupInstanceId: m.InstanceID}
			if r.version >= 5 {
				id.Reason = m.Reason
			}
			n.Members = append(n.Members, id)
		}
	}
	out, err := call[*grouppb.LeaveGroupResponse](ctx, l, callTimeout, n)
	if err != nil {
		resp.ErrorCode = callErrorCode(err)
		return resp
	}
	resp.ErrorCode = int16(out.ErrorCode)
	if r.version < 3 {
		// v0-2 carry one member: its error is the answer unless the whole
		// request failed.
		if resp.ErrorCode == errNone && len(out.Members) > 0 {
			resp.ErrorCode = int16(out.Members[0].ErrorCode)
		}
		return resp
	}
	for _, m := range out.Members {
		km := kmsg.NewLeaveGroupResponseMember()
		km.MemberID, km.InstanceID, km.ErrorCode = m.MemberId, m.GroupInstanceId, int16(m.ErrorCode)
		resp.Members = append(resp.Members, km)
	}
	return resp
}

type tp struct {
	topic     string
	partition int32
}

// prepareCommit checks an OffsetCommit's group, topics and partitions and
// builds the native request of the partitions that pass; the others have
// their error codes kept for the answer.
func (l *Listener) prepareCommit(r *request, req *kmsg.OffsetCommitRequest, one *commitOne) *commitBlocks {
	total := 0
	for _, t := range req.Topics {
		total += len(t.Partitions)
	}
	b := newCommitBlocks(len(req.Topics), total, one)
	b.kreq = req
	n := b.req
	n.GroupId, n.GenerationId, n.MemberId, n.RetentionTimeMs = req.Group, req.Generation, req.MemberID, -1
	if r.version < 1 {
		n.GenerationId = -1
		n.MemberId = ""
	}
	if r.version >= 2 && r.version <= 4 {
		n.RetentionTimeMs = req.RetentionTimeMillis
	}
	if r.version >= 7 {
		n.GroupInstanceId = req.InstanceID
	}
	// KafkaApis answers unknown topics and partitions itself; only known
	// ones reach the coordinator. A node that does not coordinate now lets
	// the coordinator answer (NOT_COORDINATOR): its catalog may still be
	// catching up, and clients must look the coordinator up again.
	check := l.coordinating()
	groupOK := r.groupAllowed(kmsg.ACLOperationRead, req.Group)
	for _, t := range req.Topics {
		denied := errNone
		if !groupOK {
			denied = groupDenied
		} else if !r.topicAllowed(kmsg.ACLOperationRead, t.Topic) {
			denied = topicDenied
		}
		first := len(b.partPtrs)
		for _, p := range t.Partitions {
			if denied != errNone {
				b.refuse(t.Topic, p.Partition, denied)
				continue
			}
			if check && !l.topics.HasPartition(t.Topic, p.Partition) {
				b.refuse(t.Topic, p.Partition, kerr.UnknownTopicOrPartition.Code)
				continue
			}
			np := b.partition()
			np.Partition, np.Offset, np.LeaderEpoch, np.Metadata, np.CommitTimestampMs = p.Partition, p.Offset, -1, p.Metadata, -1
			if r.version >= 6 {
				np.LeaderEpoch = p.LeaderEpoch
			}
			if r.version == 1 {
				np.CommitTimestampMs = p.Timestamp
			}
		}
		if len(b.partPtrs) > first {
			b.topic(t.Topic, b.partPtrs[first:len(b.partPtrs):len(b.partPtrs)])
		}
	}
	return b
}

// answer is the Kafka answer to the OffsetCommit b was prepared for, given
// the coordinator's answer m to its native request n (or the call's error;
// n is nil when no call was made). It is an asyncCall.
func (b *commitBlocks) answer(l *Listener, n, m proto.Message, err error) kmsg.Response {
	req := b.kreq
	var out *grouppb.OffsetCommitResponse
	if n != nil {
		out, err = expect[*grouppb.OffsetCommitResponse](l, n, m, err)
	}
	code := func(topic string, partition int32) int16 {
		if c, ok := b.refused[tp{topic, partition}]; ok {
			return c
		}
		if err != nil {
			return callErrorCode(err)
		}
		if c, ok := b.answered(out, topic, partition); ok {
			return c
		}
		return kerr.UnknownServerError.Code
	}
	resp := b.resp
	resp.Topics = b.respTopics[:0:len(req.Topics)]
	for _, t := range req.Topics {
		resp.Topics = resp.Topics[:len(resp.Topics)+1]
		rt := &resp.Topics[len(resp.Topics)-1]
		rt.Default()
		rt.Topic = t.Topic
		rt.Partitions = b.respParts[:len(t.Partitions):len(t.Partitions)]
		b.respParts = b.respParts[len(t.Partitions):]
		for i, p := range t.Partitions {
			rp := &rt.Partitions[i]
			rp.Default()
			rp.Partition = p.Partition
			rp.ErrorCode = code(t.Topic, p.Partition)
		}
	}
	return resp
}

// answered is the coordinator's code for one partition. Its answer lists the
// native request's partitions in order, so the next one is tried first.
func (b *commitBlocks) answered(out *grouppb.OffsetCommitResponse, topic string, partition int32) (int16, bool) {
	ts := out.GetTopics()
	for range 2 {
		for ; b.at.topic < len(ts); b.at.topic, b.at.partition = b.at.topic+1, 0 {
			t := ts[b.at.topic]
			if t.GetName() != topic {
				continue
			}
			for ; b.at.partition < len(t.GetPartitions()); b.at.partition++ {
				if p := t.GetPartitions()[b.at.partition]; p.GetPartition() == partition {
					b.at.partition++
					return int16(p.GetErrorCode()), true
				}
			}
		}
		b.at.topic, b.at.partition = 0, 0 // out of order: look from the start
	}
	return 0, false
}

// refuse keeps the code of a partition that does not reach the coordinator.
func (b *commitBlocks) refuse(topic string, partition int32, code int16) {
	if b.refused == nil {
		b.refused = make(map[tp]int16)
	}
	b.refused[tp{topic, partition}] = code
}

// commitBlocks holds the messages of one OffsetCommit: the native request
// and the Kafka answer, allocated together (in one block for the usual
// commit of one partition, an array per kind otherwise) rather than one
// allocation per topic and partition.
type commitBlocks struct {
	kreq       *kmsg.OffsetCommitRequest
	refused    map[tp]int16 // partitions that do not reach the coordinator
	at         struct{ topic, partition int }
	req        *grouppb.OffsetCommitRequest
	topics     []grouppb.OffsetCommitTopic
	parts      []grouppb.OffsetCommitPartition
	partPtrs   []*grouppb.OffsetCommitPartition
	resp       *kmsg.OffsetCommitResponse
	respTopics []kmsg.OffsetCommitResponseTopic
	respParts  []kmsg.OffsetCommitResponseTopicPartition
}

// commitOne holds every message of the usual commit of one partition in one
// block.
type commitOne struct {
	b         commitBlocks
	req       grouppb.OffsetCommitRequest
	topic     [1]grouppb.OffsetCommitTopic
	topicPtr  [1]*grouppb.OffsetCommitTopic
	part      [1]grouppb.OffsetCommitPartition
	partPtr   [1]*grouppb.OffsetCommitPartition
	resp      kmsg.OffsetCommitResponse
	respTopic [1]kmsg.OffsetCommitResponseTopic
	respPart  [1]kmsg.OffsetCommitResponseTopicPartition
}

// blocks empties one (it may have held an earlier commit) and returns its
// commitBlocks.
func (one *commitOne) blocks() *commitBlocks {
	*one = commitOne{}
	one.req.Topics = one.topicPtr[:0]
	one.resp.Default()
	one.b = commitBlocks{req: &one.req, topics: one.topic[:0], parts: one.part[:0], partPtrs: one.partPtr[:0],
		resp: &one.resp, respTopics: one.respTopic[:], respParts: one.respPart[:]}
	return &one.b
}

// newCommitBlocks returns the blocks of a commit of partitions partitions
// in topics topics; one, when not nil, is used for a commit of one.
func newCommitBlocks(topics, partitions int, one *commitOne) *commitBlocks {
	if topics == 1 && partitions == 1 {
		if one == nil {
			one = new(commitOne)
		}
		return one.blocks()
	}
	resp := kmsg.NewPtrOffsetCommitResponse()
	return &commitBlocks{
		req:        &grouppb.OffsetCommitRequest{Topics: make([]*grouppb.OffsetCommitTopic, 0, topics)},
		topics:     make([]grouppb.OffsetCommitTopic, 0, topics),
		parts:      make([]grouppb.OffsetCommitPartition, 0, partitions),
		partPtrs:   make([]*grouppb.OffsetCommitPartition, 0, partitions),
		resp:       resp,
		respTopics: make([]kmsg.OffsetCommitResponseTopic, topics),
		respParts:  make([]kmsg.OffsetCommitResponseTopicPartition, partitions),
	}
}

// partition returns the next partition of the native request (the arrays
// were sized for every partition, so no pointer taken moves).
func (b *commitBlocks) partition() *grouppb.OffsetCommitPartition {
	b.parts = b.parts[:len(b.parts)+1]
	p := &b.parts[len(b.parts)-1]
	b.partPtrs = append(b.partPtrs, p)
	return p
}

// topic adds a topic with the given partitions to the native request.
func (b *commitBlocks) topic(name string, parts []*grouppb.OffsetCommitPartition) {
	b.topics = b.topics[:len(b.topics)+1]
	t := &b.topics[len(b.topics)-1]
	t.Name, t.Partitions = name, parts
	b.req.Topics = append(b.req.Topics, t)
}

// fetchOffsets runs one native OffsetFetch; on failure it reports the error
// as the top-level code.
func (l *Listener) fetchOffsets(ctx context.Context, n *grouppb.OffsetFetchRequest) *grouppb.OffsetFetchResponse {
	out, err := call[*grouppb.OffsetFetchResponse](ctx, l, callTimeout, n)
	if err != nil {
		return &grouppb.OffsetFetchResponse{ErrorCode: int32(callErrorCode(err))}
	}
	return out
}

func (l *Listener) offsetFetch(ctx context.Context, r *request, req *kmsg.OffsetFetchRequest) kmsg.Response {
	resp := kmsg.NewPtrOffsetFetchResponse()
	if r.version >= 8 {
		resp.Groups = make([]kmsg.OffsetFetchResponseGroup, len(req.Groups))
		parallel(len(req.Groups), func(i int) {
			g := req.Groups[i]
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group = g.Group
			if !r.groupAllowed(kmsg.ACLOperationDescribe, g.Group) {
				rg.ErrorCode = groupDenied
				resp.Groups[i] = rg
				return
			}
			n := &grouppb.OffsetFetchRequest{GroupId: g.Group, AllTopics: g.Topics == nil, RequireStable: req.RequireStable}
			for _, t := range g.Topics {
				n.Topics = append(n.Topics, &grouppb.TopicPartitions{Name: t.Topic, Partitions: t.Partitions})
			}
			out := r.filterOffsets(l.fetchOffsets(ctx, n))
			rg.ErrorCode = int16(out.ErrorCode)
			for _, t := range out.Topics {
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.Topic = t.Name
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					rp.Partition, rp.Offset, rp.LeaderEpoch, rp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, int16(p.ErrorCode)
					rp.Metadata = kmsg.StringPtr(p.Metadata)
					rt.Partitions = append(rt.Partitions, rp)
				}
				rg.Topics = append(rg.Topics, rt)
			}
			resp.Groups[i] = rg
		})
		return resp
	}
	all := r.version >= 2 && req.Topics == nil
	n := &grouppb.OffsetFetchRequest{GroupId: req.Group, AllTopics: all}
	if r.version >= 7 {
		n.RequireStable = req.RequireStable
	}
	for _, t := range req.Topics {
		n.Topics = append(n.Topics, &grouppb.TopicPartitions{Name: t.Topic, Partitions: t.Partitions})
	}
	var out *grouppb.OffsetFetchResponse
	if r.groupAllowed(kmsg.ACLOperationDescribe, req.Group) {
		out = r.filterOffsets(l.fetchOffsets(ctx, n))
	} else {
		out = &grouppb.OffsetFetchResponse{ErrorCode: int32(groupDenied)}
	}
	top := int16(out.ErrorCode)
	if r.version >= 2 {
		resp.ErrorCode = top
	}
	if top != errNone && r.version < 2 {
		// v0-1 have no top-level error: every requested partition carries it.
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.ErrorCode = p, -1, top
				rp.Metadata = kmsg.StringPtr("")
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	for _, t := range out.Topics {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.Name
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch, rp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, int16(p.ErrorCode)
			rp.Metadata = kmsg.StringPtr(p.Metadata)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (l *Listener) offsetDelete(ctx context.Context, r *request, req *kmsg.OffsetDeleteRequest) kmsg.Response {
	resp := kmsg.NewPtrOffsetDeleteResponse()
	if !r.groupAllowed(kmsg.ACLOperationDelete, req.Group) {
		resp.ErrorCode = groupDenied
		return resp
	}
	n := &grouppb.OffsetDeleteRequest{GroupId: req.Group}
	check := l.coordinating()
	codes := make(map[tp]int16)
	for _, t := range req.Topics {
		var nt *grouppb.TopicPartitions
		readOK := r.topicAllowed(kmsg.ACLOperationRead, t.Topic)
		for _, p := range t.Partitions {
			if !readOK {
				codes[tp{t.Topic, p.Partition}] = topicDenied
				continue
			}
			if check && !l.topics.HasPartition(t.Topic, p.Partition) {
				codes[tp{t.Topic, p.Partition}] = kerr.UnknownTopicOrPartition.Code
				continue
			}
			if nt == nil {
				nt = &grouppb.TopicPartitions{Name: t.Topic}
				n.Topics = append(n.Topics, nt)
			}
			nt.Partitions = append(nt.Partitions, p.Partition)
		}
	}
	out, err := call[*grouppb.OffsetDeleteResponse](ctx, l, callTimeout, n)
	if err != nil {
		resp.ErrorCode = callErrorCode(err)
		return resp
	}
	resp.ErrorCode = int16(out.ErrorCode)
	for _, t := range out.Topics {
		for _, p := range t.Partitions {
			codes[tp{t.Name, p.Partition}] = int16(p.ErrorCode)
		}
	}
	if resp.ErrorCode != errNone {
		return resp
	}
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = codes[tp{t.Topic, p.Partition}]
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (l *Listener) describeGroups(ctx context.Context, r *request, req *kmsg.DescribeGroupsRequest) kmsg.Response {
	resp := kmsg.NewPtrDescribeGroupsResponse()
	resp.Groups = make([]kmsg.DescribeGroupsResponseGroup, len(req.Groups))
	parallel(len(req.Groups), func(i int) {
		g := kmsg.NewDescribeGroupsResponseGroup()
		g.Group = req.Groups[i]
		if !r.groupAllowed(kmsg.ACLOperationDescribe, g.Group) {
			g.ErrorCode = groupDenied
			resp.Groups[i] = g
			return
		}
		if r.version >= 3 && req.IncludeAuthorizedOperations {
			g.AuthorizedOperations = r.groupOperations(g.Group)
		}
		out, err := call[*grouppb.DescribeGroupResponse](ctx, l, callTimeout, &grouppb.DescribeGroupRequest{GroupId: req.Groups[i]})
		if err != nil {
			g.ErrorCode = callErrorCode(err)
			resp.Groups[i] = g
			return
		}
		g.ErrorCode = int16(out.ErrorCode)
		g.State, g.ProtocolType, g.Protocol = out.State, out.ProtocolType, out.ProtocolData
		for _, m := range out.Members {
			km := kmsg.NewDescribeGroupsResponseGroupMember()
			km.MemberID, km.InstanceID, km.ClientID, km.ClientHost = m.MemberId, m.GroupInstanceId, m.ClientId, m.ClientHost
			km.ProtocolMetadata, km.MemberAssignment = m.Metadata, m.Assignment
			g.Members = append(g.Members, km)
		}
		if out.ErrorCode == 0 {
			g.UnknownTags.Set(GenerationTag, appendGeneration(nil, out.GenerationId))
		}
		resp.Groups[i] = g
	})
	return resp
}

func (l *Listener) listGroups(ctx context.Context, r *request, req *kmsg.ListGroupsRequest) kmsg.Response {
	resp := kmsg.NewPtrListGroupsResponse()
	n := &grouppb.ListGroupsRequest{}
	if r.version >= 4 {
		n.StatesFilter = req.StatesFilter
	}
	if r.version >= 5 {
		n.TypesFilter = req.TypesFilter
	}
	out, err := call[*grouppb.ListGroupsResponse](ctx, l, callTimeout, n)
	if err != nil {
		resp.ErrorCode = callErrorCode(err)
		return resp
	}
	resp.ErrorCode = int16(out.ErrorCode)
	all := r.clusterAllowed(kmsg.ACLOperationDescribe)
	for _, g := range out.Groups {
		if !all && !r.groupAllowed(kmsg.ACLOperationDescribe, g.GroupId) {
			continue // Kafka leaves out what the caller may not describe
		}
		kg := kmsg.NewListGroupsResponseGroup()
		kg.Group, kg.ProtocolType, kg.GroupState, kg.GroupType = g.GroupId, g.ProtocolType, g.State, g.GroupType
		resp.Groups = append(resp.Groups, kg)
	}
	return resp
}

func (l *Listener) deleteGroups(ctx context.Context, r *request, req *kmsg.DeleteGroupsRequest) kmsg.Response {
	resp := kmsg.NewPtrDeleteGroupsResponse()
	resp.Groups = make([]kmsg.DeleteGroupsResponseGroup, len(req.Groups))
	parallel(len(req.Groups), func(i int) {
		g := kmsg.NewDeleteGroupsResponseGroup()
		g.Group = req.Groups[i]
		if !r.groupAllowed(kmsg.ACLOperationDelete, g.Group) {
			g.ErrorCode = groupDenied
			resp.Groups[i] = g
			return
		}
		out, err := call[*grouppb.DeleteGroupResponse](ctx, l, callTimeout, &grouppb.DeleteGroupRequest{GroupId: req.Groups[i]})
		if err != nil {
			g.ErrorCode = callErrorCode(err)
		} else {
			g.ErrorCode = int16(out.ErrorCode)
		}
		resp.Groups[i] = g
	})
	return resp
}

// parallel runs fn(0..n-1) with at most describeParallel at once.
func parallel(n int, fn func(i int)) {
	if n == 1 {
		fn(0)
		return
	}
	sem := make(chan struct{}, describeParallel)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}()
	}
	wg.Wait()
}

// appendGeneration encodes a generation as the GenerationTag payload: a
// big-endian int32.
func appendGeneration(dst []byte, gen int32) []byte {
	return append(dst, byte(gen>>24), byte(gen>>16), byte(gen>>8), byte(gen))
}

// GenerationFromTags decodes the generation a cohort listener reports in a
// DescribeGroups v5+ group entry; ok is false for other brokers.
func GenerationFromTags(tags kmsg.Tags) (gen int32, ok bool) {
	tags.Each(func(key uint32, val []byte) {
		if key == GenerationTag && len(val) == 4 {
			gen = int32(uint32(val[0])<<24 | uint32(val[1])<<16 | uint32(val[2])<<8 | uint32(val[3]))
			ok = true
		}
	})
	return gen, ok
}

// joinProtocols copies a JoinGroup's protocols out of the request body, whose
// buffer their decoded metadata shares, into memory of their own: the
// coordinator keeps them as long as the member lives. The one or two
// protocols clients send take two allocations, the protocols and their
// metadata.
func joinProtocols(ps []kmsg.JoinGroupRequestProtocol) []*grouppb.Protocol {
	var vals []grouppb.Protocol
	var out []*grouppb.Protocol
	switch len(ps) {
	case 0:
		return nil
	case 1:
		b := new(struct {
			ptr [1]*grouppb.Protocol
			val [1]grouppb.Protocol
		})
		out, vals = b.ptr[:], b.val[:]
	case 2:
		b := new(struct {
			ptr [2]*grouppb.Protocol
			val [2]grouppb.Protocol
		})
		out, vals = b.ptr[:], b.val[:]
	default:
		out, vals = make([]*grouppb.Protocol, len(ps)), make([]grouppb.Protocol, len(ps))
	}
	size := 0
	for _, p := range ps {
		size += len(p.Metadata)
	}
	buf := make([]byte, 0, size)
	for i, p := range ps {
		vals[i].Name = p.Name
		if p.Metadata != nil {
			start := len(buf)
			buf = append(buf, p.Metadata...)
			vals[i].Metadata = buf[start:len(buf):len(buf)]
		}
		out[i] = &vals[i]
	}
	return out
}
