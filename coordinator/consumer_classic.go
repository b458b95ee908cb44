package coordinator

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Classic members inside a consumer group (the reference's section 4): a
// member that speaks JoinGroup, SyncGroup, Heartbeat and LeaveGroup is a
// member like the others, reconciled by the same rules, so that no
// partition is ever held by two members whatever protocol each speaks. Its
// JoinGroup carries its subscription and the partitions it owns (the
// ConsumerProtocol metadata of its first protocol) and is answered at once
// with its member epoch as generation, no leader and no member list: every
// classic client is a follower and sends an empty SyncGroup, which answers
// its current assignment. Its heartbeats answer REBALANCE_IN_PROGRESS when
// it must rejoin to move on (Kafka's classicGroupHeartbeatToConsumerGroup).

// consumerProtocolType is the protocol type of the consumer embedded
// protocol, the only one a consumer group serves.
const consumerProtocolType = "consumer"

func (c *ClassicMemberMetadata) clone() *ClassicMemberMetadata {
	if c == nil {
		return nil
	}
	out := &ClassicMemberMetadata{ProtocolType: c.ProtocolType, SessionTimeout: c.SessionTimeout, Protocols: make([]ClassicProtocol, len(c.Protocols))}
	for i, p := range c.Protocols {
		out.Protocols[i] = ClassicProtocol{Name: p.Name, Metadata: slices.Clone(p.Metadata)}
	}
	return out
}

func (c *ClassicMemberMetadata) record() *ClassicMemberMetadata { return c.clone() }

func classicFromRecord(c *ClassicMemberMetadata) *ClassicMemberMetadata { return c.clone() }

// firstProtocol is the protocol a classic member is told it uses: the first
// it listed (Kafka's choice).
func (c *ClassicMemberMetadata) firstProtocol() ClassicProtocol {
	if c == nil || len(c.Protocols) == 0 {
		return ClassicProtocol{}
	}
	return c.Protocols[0]
}

func (c *ClassicMemberMetadata) hasProtocol(name string) bool {
	return slices.ContainsFunc(c.Protocols, func(p ClassicProtocol) bool { return p.Name == name })
}

// protocolVersion is the ConsumerProtocol version of metadata, clamped to
// the versions this package writes (Kafka's checkAssignmentVersion).
func protocolVersion(metadata []byte) int16 {
	if len(metadata) < 2 {
		return 0
	}
	return min(max(int16(binary.BigEndian.Uint16(metadata)), 0), assignor.MaxConsumerProtocolVersion)
}

// serializeAssignment is s as a ConsumerProtocol assignment of version v.
func serializeAssignment(s tpSet, v int16) []byte {
	a := assignor.Assignment{Version: v, Topics: s.list()}
	return a.AppendTo(nil)
}

func classicProtocols(protocols []*pb.Protocol) []ClassicProtocol {
	out := make([]ClassicProtocol, len(protocols))
	for i, p := range protocols {
		out[i] = ClassicProtocol{Name: p.GetName(), Metadata: slices.Clone(p.GetMetadata())}
	}
	return out
}

// sessionTimeout is m's session timeout: its JoinGroup's for a classic
// member, the group's otherwise.
func (g *ConsumerGroup) sessionTimeout(m *consumerMember) time.Duration {
	if m.classic != nil {
		return m.classic.SessionTimeout
	}
	return g.cfg.SessionTimeout
}

// numConsumerProtocol is the number of members that use the consumer
// protocol (ConsumerGroupHeartbeat).
func (g *ConsumerGroup) numConsumerProtocol() int {
	n := 0
	for _, m := range g.members {
		if m.classic == nil {
			n++
		}
	}
	return n
}

// supportsClassic is Kafka's supportsClassicProtocols: the consumer
// protocol type, at least one protocol, and one name every other classic
// member lists too.
func (g *ConsumerGroup) supportsClassic(memberID, protocolType string, protocols []*pb.Protocol) bool {
	if protocolType != consumerProtocolType || len(protocols) == 0 {
		return false
	}
	for _, p := range protocols {
		ok := true
		for _, o := range g.members {
			if o.classic != nil && o.id != memberID && !o.classic.hasProtocol(p.GetName()) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// ClassicJoin handles a JoinGroup of a classic member (Kafka's
// classicGroupJoinToConsumerGroup). newID is a fresh unique suffix for a
// member without an id (clientId-newID, or instanceId-newID for a static
// member), as Group.Join takes it. The caller has checked the group id and
// the session timeout (Group.ServeClassic). The owner writes fx.Records
// before it sends the answer.
func (g *ConsumerGroup) ClassicJoin(req *pb.JoinGroupRequest, newID string, now time.Time, fx *ConsumerEffects) *pb.JoinGroupResponse {
	memberID := req.GetMemberId()
	unknown := memberID == ""
	var m, replaced *consumerMember
	if req.GroupInstanceId == nil {
		if unknown {
			memberID = req.GetClientId() + "-" + newID
			if req.GetApiVersion() >= 4 {
				return joinError(memberID, ErrMemberIDRequired)
			}
		}
		m = g.members[memberID]
	} else {
		inst := req.GetGroupInstanceId()
		holder := g.members[g.static[inst]]
		switch {
		case unknown:
			memberID = inst + "-" + newID
			replaced = holder
		case holder == nil:
			return joinError(memberID, ErrUnknownMemberID)
		case holder.id != memberID:
			return joinError(memberID, ErrFencedInstanceID)
		default:
			m = holder
		}
	}
	if m != nil && m.classic == nil {
		// A consumer-protocol member does not send JoinGroup.
		return joinError(memberID, ErrUnknownMemberID)
	}
	if g.full(m, replaced) {
		return joinError(memberID, ErrGroupMaxSizeReached)
	}
	if !g.supportsClassic(memberID, req.GetProtocolType(), req.GetProtocols()) {
		return joinError(memberID, ErrInconsistentGroupProto)
	}
	sub, err := assignor.DecodeSubscription(req.GetProtocols()[0].GetMetadata())
	if err != nil {
		return joinError(memberID, ErrInconsistentGroupProto)
	}

	upd := updateFrom(m, replaced, memberID)
	upd.instanceID = ""
	if req.GroupInstanceId != nil {
		upd.instanceID = req.GetGroupInstanceId()
	}
	upd.rackID = sub.Rack
	upd.rebalanceTimeout = msDuration(req.GetRebalanceTimeoutMs())
	if req.GetApiVersion() == 0 {
		upd.rebalanceTimeout = msDuration(req.GetSessionTimeoutMs())
	}
	names := slices.Clone(sub.Topics)
	slices.Sort(names)
	upd.topics = slices.Compact(names)
	if len(upd.topics) == 0 {
		upd.topics = nil
	}
	upd.regex, upd.assignor = "", ""
	upd.clientID, upd.clientHost = req.GetClientId(), req.GetClientHost()
	upd.classic = &ClassicMemberMetadata{
		ProtocolType:   req.GetProtocolType(),
		SessionTimeout: msDuration(req.GetSessionTimeoutMs()),
		Protocols:      classicProtocols(req.GetProtocols()),
	}

	// Committed from here on.
	m, before := g.putMember(m, replaced, upd, fx)
	g.dropUnusedRegex(before.regex)
	newMember := before.id == "" && replaced == nil
	subChanged := newMember || !slices.Equal(before.topics, m.topics) || before.regex != m.regex || before.assignor != m.assignor
	if replaced != nil {
		subChanged = !slices.Equal(replaced.topics, m.topics) || replaced.regex != m.regex || replaced.assignor != m.assignor
	}
	if newMember || replaced != nil || subChanged || m.rackID != before.rackID || m.rebalanceTimeout != before.rebalanceTimeout ||
		m.clientID != before.clientID || m.clientHost != before.clientHost || !classicEqual(before.classic, m.classic) {
		g.writeMember(m, fx)
	}
	if g.epoch == 0 || newMember || subChanged {
		g.bump(fx)
	}
	g.maybeAssign(fx)

	oldAssigned, oldEpoch, oldState := m.assigned, m.epoch, m.state
	g.reconcile(m, newTPSet(sub.OwnedPartitions), now, fx)
	if !oldAssigned.equal(m.assigned) || oldEpoch != m.epoch || oldState != m.state || newMember || replaced != nil {
		g.writeCurrent(m, fx)
	}
	g.touchSession(m, now, fx)
	if !m.joinBefore.IsZero() {
		m.joinBefore = time.Time{}
		fx.cancel(ConsumerTimerJoin, m.id)
	}
	m.syncBefore = now.Add(m.rebalanceTimeout)
	fx.arm(ConsumerTimerSync, m.id, m.rebalanceTimeout)

	pt, name := consumerProtocolType, m.classic.firstProtocol().Name
	return &pb.JoinGroupResponse{GenerationId: m.epoch, ProtocolType: &pt, ProtocolName: &name, MemberId: m.id, Members: []*pb.JoinGroupMember{}}
}

func classicEqual(a, b *ClassicMemberMetadata) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ProtocolType == b.ProtocolType && a.SessionTimeout == b.SessionTimeout &&
		slices.EqualFunc(a.Protocols, b.Protocols, func(x, y ClassicProtocol) bool { return x.Name == y.Name && string(x.Metadata) == string(y.Metadata) })
}

// classicMember is Kafka's validation of a classic member's SyncGroup,
// Heartbeat and LeaveGroup: it exists and uses the classic protocol
// (UNKNOWN_MEMBER_ID), and its instance id is its own (FENCED_INSTANCE_ID).
func (g *ConsumerGroup) classicMember(memberID string, instanceID *string) (*consumerMember, int32) {
	m := g.members[memberID]
	if m == nil || m.classic == nil {
		return nil, ErrUnknownMemberID
	}
	if instanceID != nil && *instanceID != m.instanceID {
		return nil, ErrFencedInstanceID
	}
	return m, ErrNone
}

// ClassicSync handles a classic member's SyncGroup (Kafka's
// classicGroupSyncToConsumerGroup): the answer is the member's current
// assignment, serialized with the ConsumerProtocol version of the protocol
// it uses. It writes no record.
func (g *ConsumerGroup) ClassicSync(req *pb.SyncGroupRequest, now time.Time, fx *ConsumerEffects) *pb.SyncGroupResponse {
	m, code := g.classicMember(req.GetMemberId(), req.GroupInstanceId)
	if code != ErrNone {
		return syncError(code)
	}
	if req.GetGenerationId() != m.epoch {
		return syncError(ErrIllegalGeneration)
	}
	first := m.classic.firstProtocol()
	if req.ProtocolType != nil && req.GetProtocolType() != consumerProtocolType ||
		req.ProtocolName != nil && req.GetProtocolName() != first.Name {
		return syncError(ErrInconsistentGroupProto)
	}
	if m.state != MemberUnrevokedPartitions && m.epoch < g.assignmentEpoch {
		// The target moved on since the member joined: it must rejoin.
		return syncError(ErrRebalanceInProgress)
	}
	if !m.syncBefore.IsZero() {
		m.syncBefore = time.Time{}
		fx.cancel(ConsumerTimerSync, m.id)
	}
	g.touchSession(m, now, fx)
	pt, name := consumerProtocolType, first.Name
	return &pb.SyncGroupResponse{ProtocolType: &pt, ProtocolName: &name, Assignment: serializeAssignment(m.assigned, protocolVersion(first.Metadata))}
}

// ClassicHeartbeat handles a classic member's Heartbeat and returns its
// error code: REBALANCE_IN_PROGRESS when the member must rejoin to move on
// (the group epoch is ahead of it, it must revoke, or the partitions it
// waits for are free), and then its rebalance timeout runs until it rejoins.
func (g *ConsumerGroup) ClassicHeartbeat(req *pb.HeartbeatRequest, now time.Time, fx *ConsumerEffects) int32 {
	m, code := g.classicMember(req.GetMemberId(), req.GroupInstanceId)
	if code != ErrNone {
		return code
	}
	if req.GetGenerationId() != m.epoch {
		return ErrIllegalGeneration
	}
	g.touchSession(m, now, fx)
	if m.epoch < g.epoch || m.state == MemberUnrevokedPartitions ||
		m.state == MemberUnreleasedPartitions && !g.waitingOnUnreleased(m) {
		if m.joinBefore.IsZero() {
			m.joinBefore = now.Add(m.rebalanceTimeout)
			fx.arm(ConsumerTimerJoin, m.id, m.rebalanceTimeout)
		}
		return ErrRebalanceInProgress
	}
	return ErrNone
}

// waitingOnUnreleased reports whether a partition of m's target that m
// does not hold is still held by another member.
func (g *ConsumerGroup) waitingOnUnreleased(m *consumerMember) bool {
	waiting := false
	m.target.each(func(k tpKey) {
		if o, ok := g.owners[k]; ok && o.member != m.id {
			waiting = true
		}
	})
	return waiting
}

// ClassicLeave handles a LeaveGroup of classic members (Kafka's
// classicGroupLeaveToConsumerGroup): each listed member that is a classic
// member of the group is removed; the others get their own error.
func (g *ConsumerGroup) ClassicLeave(req *pb.LeaveGroupRequest, fx *ConsumerEffects) *pb.LeaveGroupResponse {
	resp := &pb.LeaveGroupResponse{Members: make([]*pb.LeaveGroupMemberResponse, 0, len(req.GetMembers()))}
	for _, id := range req.GetMembers() {
		code := ErrNone
		var m *consumerMember
		if id.GroupInstanceId == nil {
			m, code = g.classicMember(id.GetMemberId(), nil)
		} else {
			holder := g.members[g.static[id.GetGroupInstanceId()]]
			switch {
			case holder == nil || holder.classic == nil:
				code = ErrUnknownMemberID
			case id.GetMemberId() != "" && id.GetMemberId() != holder.id:
				code = ErrFencedInstanceID
			default:
				m = holder
			}
		}
		if m != nil {
			g.remove(m, fx)
		}
		resp.Members = append(resp.Members, &pb.LeaveGroupMemberResponse{MemberId: id.GetMemberId(), GroupInstanceId: cloneOpt(id.GroupInstanceId), ErrorCode: code})
	}
	return resp
}

// String describes a classic member's metadata, for test failures.
func (c *ClassicMemberMetadata) String() string {
	if c == nil {
		return "<consumer protocol>"
	}
	return fmt.Sprintf("classic{%s %v %d protocols}", c.ProtocolType, c.SessionTimeout, len(c.Protocols))
}
