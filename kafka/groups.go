package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	case *kmsg.ConsumerGroupHeartbeatRequest:
		n, resp := l.prepareConsumerHeartbeat(r, req)
		if resp != nil {
			return nil, 0, nil, resp
		}
		return n, callTimeout, (*consumerHeartbeatAnswer)(req), nil
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
