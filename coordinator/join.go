package coordinator

import (
	"time"

	"github.com/cohort-coord/cohort/internal/seededbug"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

func joinError(memberID string, code int32) *pb.JoinGroupResponse {
	return &pb.JoinGroupResponse{ErrorCode: code, GenerationId: -1, MemberId: memberID}
}

// joinTimeouts validates and returns the session and rebalance timeouts of a
// JoinGroup (v0 uses the session timeout as rebalance timeout).
func joinTimeouts(cfg *Config, req *pb.JoinGroupRequest) (session, rebalance time.Duration, code int32) {
	session = msDuration(req.GetSessionTimeoutMs())
	if session < cfg.MinSessionTimeout || session > cfg.MaxSessionTimeout {
		return 0, 0, ErrInvalidSessionTimeout
	}
	rebalance = msDuration(req.GetRebalanceTimeoutMs())
	if req.GetApiVersion() == 0 {
		rebalance = session
	}
	if rebalance < 0 {
		// Kafka does not validate it; a negative timeout is nonsense and is
		// refused with the closest code rather than arming a timer in the past.
		return 0, 0, ErrInvalidSessionTimeout
	}
	return session, rebalance, ErrNone
}

// Join handles JoinGroup v0-v9. newID is a fresh unique suffix used when the
// request needs a new member id (clientId-newID or instanceId-newID).
//
// The group keeps req's protocols (their names and metadata) for as long as
// the member lives, without copying them: the caller hands them over and
// must not change them afterwards, and should not let their metadata share
// a buffer much larger than itself (the Kafka listener gives each request
// protocols of their own). A member whose protocols equal another member's
// keeps that member's instead (shareProtocols).
func (g *Group) Join(now time.Time, req *pb.JoinGroupRequest, newID string, to ReplyTo, fx *Effects) {
	g.guardOnJoin(now, req, fx)
	memberID := req.GetMemberId()
	if req.GetGroupId() == "" {
		fx.reply(to, joinError(memberID, ErrInvalidGroupID))
		return
	}
	session, rebalance, code := joinTimeouts(g.cfg, req)
	if code != ErrNone {
		fx.reply(to, joinError(memberID, code))
		return
	}
	if !g.acceptJoining(memberID) {
		if m := g.members.get(memberID); m != nil {
			g.setJoinReply(m, nil, 0)
			g.removeMember(m, fx)
		}
		if _, ok := g.pending[memberID]; ok {
			delete(g.pending, memberID)
			fx.cancel(TimerMember, memberID)
		}
		fx.reply(to, joinError("", ErrGroupMaxSizeReached))
		g.tryCompleteJoin(now, fx)
		return
	}
	if memberID == "" {
		g.joinUnknown(now, req, session, rebalance, newID, to, fx)
	} else {
		g.joinKnown(now, req, session, rebalance, to, fx)
	}
	g.tryCompleteJoin(now, fx)
}

// acceptJoining is Kafka's acceptJoiningMember (group.max.size, KAFKA-9885).
func (g *Group) acceptJoining(memberID string) bool {
	limit := g.cfg.maxSize()
	m := g.members.get(memberID)
	switch g.state {
	case Empty, Dead:
		return true
	case PreparingRebalance:
		return (m != nil && m.joinReply != nil) || g.awaitJoin < limit
	default:
		return m != nil || g.members.len() < limit
	}
}

func (g *Group) joinUnknown(now time.Time, req *pb.JoinGroupRequest, session, rebalance time.Duration, newID string, to ReplyTo, fx *Effects) {
	switch {
	case g.state == Dead:
		fx.reply(to, joinError("", ErrCoordinatorNotAvailable))
	case !g.supportsProtocols(req.GetProtocolType(), req.GetProtocols()):
		fx.reply(to, joinError("", ErrInconsistentGroupProto))
	case req.GroupInstanceId != nil:
		id := req.GetGroupInstanceId() + "-" + newID
		if old, ok := g.static[req.GetGroupInstanceId()]; ok {
			g.replaceStatic(now, req, session, rebalance, old, id, to, fx)
		} else {
			g.addAndRebalance(now, req, session, rebalance, id, to, fx)
		}
	case req.GetApiVersion() >= 4:
		id := req.GetClientId() + "-" + newID
		g.pending[id] = struct{}{}
		fx.arm(TimerMember, id, session)
		fx.reply(to, joinError(id, ErrMemberIDRequired))
	default:
		g.addAndRebalance(now, req, session, rebalance, req.GetClientId()+"-"+newID, to, fx)
	}
}

func (g *Group) joinKnown(now time.Time, req *pb.JoinGroupRequest, session, rebalance time.Duration, to ReplyTo, fx *Effects) {
	memberID := req.GetMemberId()
	if g.state == Dead {
		fx.reply(to, joinError(memberID, ErrCoordinatorNotAvailable))
		return
	}
	if !g.supportsProtocols(req.GetProtocolType(), req.GetProtocols()) {
		fx.reply(to, joinError(memberID, ErrInconsistentGroupProto))
		return
	}
	if _, ok := g.pending[memberID]; ok {
		if req.GroupInstanceId != nil {
			// Pending ids are only handed to dynamic members.
			fx.reply(to, joinError(memberID, ErrUnknownServerError))
			return
		}
		g.addAndRebalance(now, req, session, rebalance, memberID, to, fx)
		return
	}
	m, code := g.validateMember(memberID, req.GroupInstanceId)
	if code != ErrNone {
		fx.reply(to, joinError(memberID, code))
		return
	}
	switch g.state {
	case PreparingRebalance:
		g.updateMember(m, req, session, rebalance, to, fx)
	case CompletingRebalance:
		if m.matches(req.GetProtocols()) {
			fx.reply(to, g.joinResponse(m, m.id == g.leader, false))
			return
		}
		g.updateMember(m, req, session, rebalance, to, fx)
		g.prepareRebalance(now, fx)
	case Stable:
		if g.takeoverRejoin(now, m, req, to, fx) {
			return
		}
		if m.id != g.leader && m.matches(req.GetProtocols()) {
			fx.reply(to, g.joinResponse(m, false, false))
			return
		}
		g.updateMember(m, req, session, rebalance, to, fx)
		g.prepareRebalance(now, fx)
	default: // Empty: no members to match (validateMember fails first)
		fx.reply(to, joinError(memberID, ErrUnknownMemberID))
	}
}

// joinResponse is the successful JoinGroup answer for m in the current
// generation; the member list goes only to the leader.
func (g *Group) joinResponse(m *member, withMembers, skipAssignment bool) *pb.JoinGroupResponse {
	resp := &pb.JoinGroupResponse{
		GenerationId:   g.generation,
		ProtocolType:   g.protocolTypeOpt(),
		ProtocolName:   g.memberProtocolOpt(m),
		Leader:         g.leader,
		MemberId:       m.id,
		SkipAssignment: skipAssignment,
	}
	if withMembers {
		resp.Members = g.currentMemberMetadata()
	}
	return resp
}

func (g *Group) protocolTypeOpt() *string {
	if g.protocolType == "" && g.members.len() == 0 {
		return nil
	}
	t := g.protocolType
	return &t
}

func (g *Group) currentMemberMetadata() []*pb.JoinGroupMember {
	if g.isMixed() {
		return g.mixedLeaderMembers()
	}
	name := g.protocolNameOr("")
	out := make([]*pb.JoinGroupMember, 0, len(g.order))
	for _, m := range g.order {
		out = append(out, &pb.JoinGroupMember{MemberId: m.id, GroupInstanceId: cloneOpt(m.instanceID), Metadata: m.metadata(name)})
	}
	return out
}

func newMember(req *pb.JoinGroupRequest, id string, session, rebalance time.Duration) *member {
	return &member{
		id:          id,
		instanceID:  cloneOpt(req.GroupInstanceId),
		clientID:    req.GetClientId(),
		clientHost:  req.GetClientHost(),
		rebalanceMs: durationMs(rebalance),
		sessionMs:   durationMs(session),
		protocols:   req.GetProtocols(),
		isNew:       true,
	}
}

// addAndRebalance is Kafka's addMemberAndRebalance.
func (g *Group) addAndRebalance(now time.Time, req *pb.JoinGroupRequest, session, rebalance time.Duration, id string, to ReplyTo, fx *Effects) {
	m := newMember(req, id, session, rebalance)
	m.joinReply, m.joinVersion = to, req.GetApiVersion()
	if g.state == PreparingRebalance && g.initial.active {
		g.newMemberAdded = true
	}
	if g.members.len() == 0 {
		g.protocolType = req.GetProtocolType()
	}
	g.addMember(m)
	g.armSession(now, m, g.cfg.NewMemberJoinTimeout, fx)
	if g.canRebalance() {
		g.prepareRebalance(now, fx)
	}
}

// updateMember replaces a member's protocols, timeouts and parked JoinGroup.
// A JoinGroup it supersedes is answered NOT_COORDINATOR so the client
// re-discovers and retries instead of waiting for a reply that never comes.
func (g *Group) updateMember(m *member, req *pb.JoinGroupRequest, session, rebalance time.Duration, to ReplyTo, fx *Effects) {
	if m.joinReply != nil && m.joinReply != to {
		fx.reply(m.joinReply, joinError(m.id, ErrNotCoordinator))
	}
	g.setProtocols(m, req.GetProtocols())
	m.setTimeouts(session, rebalance)
	m.clientID, m.clientHost = req.GetClientId(), req.GetClientHost()
	g.setJoinReply(m, to, req.GetApiVersion())
}

func (g *Group) setProtocols(m *member, protocols []*pb.Protocol) {
	for _, p := range m.protocols {
		g.decProto(p.GetName())
	}
	m.protocols = g.shareProtocols(protocols)
	for _, p := range protocols {
		g.protoCount[p.GetName()]++
	}
}

// prepareRebalance starts a join phase.
func (g *Group) prepareRebalance(now time.Time, fx *Effects) {
	if g.state == CompletingRebalance {
		for _, m := range g.order {
			m.assignment = nil
			if m.syncReply != nil {
				fx.reply(m.syncReply, syncError(ErrRebalanceInProgress))
				m.syncReply = nil
				// Its session timer may have fired while it was parked.
				g.armSession(now, m, m.sessionTimeout(), fx)
			}
		}
	}
	g.pendSync = nil // dropped, not cleared: a map keeps its size
	if g.syncArmed {
		g.syncArmed = false
		fx.cancel(TimerSync, "")
	}
	if g.state == Empty {
		d := g.cfg.InitialRebalanceDelay
		g.initial = initialDelay{active: true, delay: d, remaining: max(g.rebalanceTimeout()-d, 0)}
		g.newMemberAdded = false
		g.armJoin(d, fx)
	} else {
		g.initial = initialDelay{}
		g.armJoin(g.rebalanceTimeout(), fx)
	}
	g.transition(PreparingRebalance, now)
	g.tryCompleteJoin(now, fx)
}

func (g *Group) armJoin(d time.Duration, fx *Effects) {
	g.joinArmed = true
	fx.arm(TimerJoin, "", d)
}

// tryCompleteJoin completes the join phase early when every member (and no
// pending member) has joined, except during the initial delay.
func (g *Group) tryCompleteJoin(now time.Time, fx *Effects) {
	if g.state == PreparingRebalance && !g.initial.active && (g.hasAllMembersJoined() || seededbug.On("early-handout") && g.anyMemberJoined()) {
		g.completeJoin(now, fx)
	}
}

// onJoinTimer is the expiry of the join timer (DelayedJoin or InitialDelayedJoin).
func (g *Group) onJoinTimer(now time.Time, fx *Effects) {
	if !g.joinArmed || g.state != PreparingRebalance {
		return
	}
	g.joinArmed = false
	if g.initial.active {
		if g.newMemberAdded && g.initial.remaining != 0 {
			g.newMemberAdded = false
			next := min(g.cfg.InitialRebalanceDelay, g.initial.remaining)
			g.initial.remaining = max(g.initial.remaining-g.initial.delay, 0)
			g.initial.delay = next
			g.armJoin(next, fx)
			return
		}
		g.initial.active = false
	}
	g.completeJoin(now, fx)
}

// completeJoin is Kafka's onCompleteJoin.
func (g *Group) completeJoin(now time.Time, fx *Effects) {
	if g.joinArmed {
		g.joinArmed = false
		fx.cancel(TimerJoin, "")
	}
	g.initial = initialDelay{}
	for i := 0; i < len(g.order); {
		m := g.order[i]
		if m.joinReply == nil && m.instanceID == nil {
			g.removeMember(m, fx)
			continue
		}
		i++
	}
	if g.state == Dead {
		return
	}
	if !g.electJoinedLeader() && g.members.len() > 0 {
		// Only static members that did not re-join remain: wait another
		// rebalance timeout for them to re-join or expire.
		d := g.rebalanceTimeout()
		if d <= 0 {
			// A zero timeout would re-arm at the same instant forever; their
			// sessions cannot end sooner than the minimum session timeout.
			d = g.cfg.MinSessionTimeout
		}
		g.armJoin(d, fx)
		return
	}
	g.generation = max(g.generation, g.floor) + 1
	g.floor = g.generation
	g.converted = nil
	// Every member is pending until it syncs: sized once, not grown.
	g.pendSync = make(map[string]struct{}, g.members.len())
	if g.members.len() == 0 {
		g.protocolName = nil
		g.subscribed, g.subscribedKnown = nil, false
		g.transition(Empty, now)
		g.persist(fx, &emptyGroupWrite{}, g.groupRecord(now, nil))
		return
	}
	name := g.selectProtocol()
	g.protocolName = &name
	g.computeSubscribed()
	g.transition(CompletingRebalance, now)
	// The answers wait until the new generation is reserved in the store, so
	// a coordinator that takes over never hands it out again.
	op := &generationWrite{generation: g.generation}
	var leaderMembers []*pb.JoinGroupMember
	for _, m := range g.order {
		if m.joinReply != nil {
			resp := g.joinResponse(m, false, false)
			if m.id == g.leader {
				if leaderMembers == nil {
					leaderMembers = g.currentMemberMetadata()
				}
				resp.Members = leaderMembers
			}
			op.replies = append(op.replies, Reply{To: m.joinReply, Msg: resp})
			g.setJoinReply(m, nil, 0)
		}
		g.armSession(now, m, m.sessionTimeout(), fx)
		m.isNew = false
		g.pendSync[m.id] = struct{}{}
	}
	g.persist(fx, op, &pb.Record{Kind: &pb.Record_GenerationReserved{GenerationReserved: &pb.GenerationReserved{GroupId: g.id, Generation: g.generation}}})
	g.syncArmed, g.syncGen = true, g.generation
	fx.arm(TimerSync, "", g.rebalanceTimeout())
}

// electJoinedLeader is Kafka's maybeElectNewJoinedLeader.
func (g *Group) electJoinedLeader() bool {
	l := g.members.get(g.leader)
	if l == nil {
		return false
	}
	if l.joinReply != nil {
		return true
	}
	for _, m := range g.order {
		if m.joinReply != nil {
			g.leader = m.id
			return true
		}
	}
	return false
}

// replaceStatic handles a JoinGroup with an unknown member id and a known
// group instance id: a restarted static member takes over its old identity.
func (g *Group) replaceStatic(now time.Time, req *pb.JoinGroupRequest, session, rebalance time.Duration, oldID, newID string, to ReplyTo, fx *Effects) {
	m := g.members.get(oldID)
	oldLeader := g.leader
	prev := staticSnapshot{protocols: m.protocols, session: m.sessionTimeout(), rebalance: m.rebalanceTimeout(), clientID: m.clientID, clientHost: m.clientHost}
	g.renameMember(m, newID, fx)
	g.armSession(now, m, session, fx)
	g.updateMember(m, req, session, rebalance, to, fx)
	switch g.state {
	case Stable:
		if next := g.selectProtocol(); next == g.protocolNameOr("") {
			op := &staticReplaceWrite{member: m, oldID: oldID, newID: newID, oldLeader: oldLeader, prev: prev, reply: to}
			g.persist(fx, op, g.groupRecord(now, nil))
			return
		}
		g.prepareRebalance(now, fx)
	case CompletingRebalance:
		g.prepareRebalance(now, fx)
	}
	// PreparingRebalance: stays parked until the join phase completes.
}

// renameMember moves m to a new member id, fencing requests parked under the
// old one.
func (g *Group) renameMember(m *member, newID string, fx *Effects) {
	oldID := m.id
	if m.joinReply != nil {
		fx.reply(m.joinReply, joinError(oldID, ErrFencedInstanceID))
		g.setJoinReply(m, nil, 0)
	}
	if m.syncReply != nil {
		fx.reply(m.syncReply, syncError(ErrFencedInstanceID))
		m.syncReply = nil
	}
	g.cancelSession(m, fx)
	g.closeTakeover(oldID)
	g.members.del(oldID)
	m.id = newID
	g.members.put(m)
	if g.leader == oldID {
		g.leader = newID
	}
	if m.instanceID != nil {
		g.static[*m.instanceID] = newID
	}
	if _, ok := g.pendSync[oldID]; ok {
		delete(g.pendSync, oldID)
		g.pendSync[newID] = struct{}{}
	}
}

type staticSnapshot struct {
	protocols            []*pb.Protocol
	session, rebalance   time.Duration
	clientID, clientHost string
}

// staticReplaceWrite completes a static member replacement in a Stable group
// once the group record with the new member id is written.
type staticReplaceWrite struct {
	member                  *member
	oldID, newID, oldLeader string
	prev                    staticSnapshot
	reply                   ReplyTo
}

func (w *staticReplaceWrite) done(g *Group, now time.Time, err error, fx *Effects) {
	m := w.member
	if g.members.get(w.newID) != m {
		return // removed or renamed again meanwhile; its requests were answered then
	}
	if m.joinReply != w.reply {
		// Answered meanwhile (a join phase completed, or a later JoinGroup
		// superseded it): the member carries on under its new id.
		return
	}
	if err != nil {
		// Revert: the old member id keeps working.
		g.setJoinReply(m, nil, 0)
		g.setProtocols(m, w.prev.protocols)
		m.setTimeouts(w.prev.session, w.prev.rebalance)
		m.clientID, m.clientHost = w.prev.clientID, w.prev.clientHost
		g.renameMember(m, w.oldID, fx)
		g.armSession(now, m, m.sessionTimeout(), fx)
		fx.reply(w.reply, &pb.JoinGroupResponse{
			ErrorCode:    groupWriteError(err),
			GenerationId: g.generation,
			ProtocolType: g.protocolTypeOpt(),
			ProtocolName: cloneOpt(g.protocolName),
			Leader:       w.oldLeader,
		})
		return
	}
	if g.state != Stable {
		// A rebalance started meanwhile: the request waits for that join phase.
		return
	}
	var resp *pb.JoinGroupResponse
	if m.joinVersion >= 9 {
		isLeader := m.id == g.leader
		resp = g.joinResponse(m, isLeader, isLeader)
	} else {
		resp = g.joinResponse(m, false, false)
		// Pre-v9 members must not see themselves as leader: a stable group
		// does not propagate a new assignment from the leader's next sync.
		resp.Leader = w.oldLeader
	}
	fx.reply(m.joinReply, resp)
	g.setJoinReply(m, nil, 0)
	// Its session timer may have fired while it waited for the write.
	g.armSession(now, m, m.sessionTimeout(), fx)
}

// generationWrite sends the JoinGroup answers of a completed join phase once
// its generation is reserved. If the reservation fails, the members get the
// write's error and, if the group is still in that generation, a new join
// phase starts.
type generationWrite struct {
	generation int32
	replies    []Reply
}

func (w *generationWrite) done(g *Group, now time.Time, err error, fx *Effects) {
	if err == nil {
		for _, r := range w.replies {
			fx.reply(r.To, r.Msg)
		}
		return
	}
	code := groupWriteError(err)
	for _, r := range w.replies {
		fx.reply(r.To, joinError(r.Msg.(*pb.JoinGroupResponse).GetMemberId(), code))
	}
	if g.state == CompletingRebalance && g.generation == w.generation {
		g.prepareRebalance(now, fx)
	}
}

func (w *generationWrite) abandon(fx *Effects) {
	for _, r := range w.replies {
		fx.reply(r.To, joinError(r.Msg.(*pb.JoinGroupResponse).GetMemberId(), ErrNotCoordinator))
	}
}
