package coordinator

import (
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

func syncError(code int32) *pb.SyncGroupResponse {
	return &pb.SyncGroupResponse{ErrorCode: code, Assignment: []byte{}}
}

// Sync handles SyncGroup v0-v5.
func (g *Group) Sync(now time.Time, req *pb.SyncGroupRequest, to ReplyTo, fx *Effects) {
	if req.GetGroupId() == "" {
		fx.reply(to, syncError(ErrInvalidGroupID))
		return
	}
	if g.state == Dead {
		fx.reply(to, syncError(ErrCoordinatorNotAvailable))
		return
	}
	m, code := g.validateMember(req.GetMemberId(), req.GroupInstanceId)
	if code != ErrNone {
		fx.reply(to, syncError(code))
		return
	}
	if !g.isGeneration(m.id, req.GetGenerationId()) {
		fx.reply(to, syncError(ErrIllegalGeneration))
		return
	}
	if req.ProtocolType != nil && (g.members.len() == 0 || req.GetProtocolType() != g.protocolType) {
		fx.reply(to, syncError(ErrInconsistentGroupProto))
		return
	}
	if req.ProtocolName != nil && (g.protocolName == nil || req.GetProtocolName() != g.memberProtocol(m)) {
		fx.reply(to, syncError(ErrInconsistentGroupProto))
		return
	}
	switch g.state {
	case PreparingRebalance:
		fx.reply(to, syncError(ErrRebalanceInProgress))
	case CompletingRebalance:
		if m.syncReply != nil && m.syncReply != to {
			fx.reply(m.syncReply, syncError(ErrNotCoordinator))
		}
		m.syncReply = to
		g.removePendingSync(m.id, fx)
		if g.isMixed() {
			g.mixedAssign(now, fx)
		} else if m.id == g.leader {
			g.storeAssignment(now, req.GetAssignments(), fx)
		}
	case Stable:
		g.removePendingSync(m.id, fx)
		g.closeTakeover(m.id)
		g.armSession(now, m, m.sessionTimeout(), fx)
		fx.reply(to, g.syncResponse(m))
		g.guardAnswered(m)
	default: // Empty (unreachable: the member check fails first)
		fx.reply(to, syncError(ErrUnknownMemberID))
	}
}

func (g *Group) syncResponse(m *member) *pb.SyncGroupResponse {
	a := m.assignment
	if a == nil {
		a = []byte{}
	}
	return &pb.SyncGroupResponse{ProtocolType: g.protocolTypeOpt(), ProtocolName: g.memberProtocolOpt(m), Assignment: a}
}

// storeAssignment writes the leader's assignment (entries for non-members are
// ignored, members it misses get an empty assignment); the parked SyncGroups
// are answered only once the write has succeeded.
func (g *Group) storeAssignment(now time.Time, assignments []*pb.SyncGroupAssignment, fx *Effects) {
	byMember := make(map[string][]byte, len(assignments))
	for _, a := range assignments {
		if g.members.get(a.GetMemberId()) != nil {
			// An empty assignment decodes as nil; keep it empty, not absent.
			byMember[a.GetMemberId()] = append([]byte{}, a.GetAssignment()...)
		}
	}
	for _, m := range g.order {
		if _, ok := byMember[m.id]; !ok {
			byMember[m.id] = []byte{}
		}
	}
	g.guardAssignments(byMember, fx)
	rec := g.groupRecord(now, byMember)
	op := &assignmentWrite{generation: g.generation, assignments: byMember}
	if proto.Size(rec) > g.cfg.MaxRecordBytes {
		op.done(g, now, ErrRecordTooLarge, fx)
		return
	}
	g.persist(fx, op, rec)
}

// assignmentWrite completes the leader's SyncGroup.
type assignmentWrite struct {
	generation  int32
	assignments map[string][]byte
}

func (w *assignmentWrite) done(g *Group, now time.Time, err error, fx *Effects) {
	if g.state != CompletingRebalance || g.generation != w.generation {
		return
	}
	if err != nil {
		code := groupWriteError(err)
		for _, m := range g.order {
			m.assignment = nil
			if m.syncReply != nil {
				fx.reply(m.syncReply, syncError(code))
				m.syncReply = nil
				g.armSession(now, m, m.sessionTimeout(), fx)
			}
		}
		g.prepareRebalance(now, fx)
		return
	}
	for _, m := range g.order {
		m.assignment = w.assignments[m.id]
		if m.syncReply != nil {
			fx.reply(m.syncReply, g.syncResponse(m))
			g.guardAnswered(m)
			m.syncReply = nil
			g.armSession(now, m, m.sessionTimeout(), fx)
		}
	}
	g.transition(Stable, now)
}

// onSyncTimer is the pending-sync expiry: members that joined this
// generation but never sent SyncGroup are removed and the group rebalances.
func (g *Group) onSyncTimer(now time.Time, fx *Effects) {
	if !g.syncArmed || g.syncGen != g.generation {
		return
	}
	g.syncArmed = false
	if g.state != CompletingRebalance && g.state != Stable {
		return
	}
	for i := 0; i < len(g.order); {
		m := g.order[i]
		if _, ok := g.pendSync[m.id]; ok {
			if m.joinReply != nil {
				// A static replacement waiting for its write.
				fx.reply(m.joinReply, joinError("", ErrUnknownMemberID))
				g.setJoinReply(m, nil, 0)
			}
			g.removeMember(m, fx)
			continue
		}
		i++
	}
	g.pendSync = nil // dropped, not cleared: a map keeps its size
	g.prepareRebalance(now, fx)
	g.persistMembership(now, fx, &emptyGroupWrite{})
}

// Heartbeat handles Heartbeat v0-v4 and returns its error code. It does not
// allocate.
func (g *Group) Heartbeat(now time.Time, req *pb.HeartbeatRequest, fx *Effects) int32 {
	if req.GetGroupId() == "" {
		return ErrInvalidGroupID
	}
	if g.state == Dead {
		return ErrCoordinatorNotAvailable
	}
	m, code := g.validateMember(req.GetMemberId(), req.GroupInstanceId)
	if code != ErrNone {
		return code
	}
	if !g.isGeneration(m.id, req.GetGenerationId()) {
		return ErrIllegalGeneration
	}
	switch g.state {
	case PreparingRebalance:
		g.extendSession(now, m, fx)
		return ErrRebalanceInProgress
	case CompletingRebalance, Stable:
		g.closeTakeover(m.id)
		g.extendSession(now, m, fx)
		if g.guard.gen != 0 && g.guardRelease(now, m, fx) {
			return ErrRebalanceInProgress
		}
		return ErrNone
	default:
		return ErrUnknownMemberID
	}
}

// heartbeatAnswers holds one answer per error code in [0, 128).
var heartbeatAnswers = func() (a [128]*pb.HeartbeatResponse) {
	for i := range a {
		a[i] = &pb.HeartbeatResponse{ErrorCode: int32(i)}
	}
	return a
}()

// HeartbeatAnswer is the Heartbeat answer carrying code. Answers of the
// common codes are shared, so a heartbeat allocates none: they are read-only
// (reading and marshalling a message from many goroutines is safe).
func HeartbeatAnswer(code int32) *pb.HeartbeatResponse {
	if code >= 0 && int(code) < len(heartbeatAnswers) {
		return heartbeatAnswers[code]
	}
	return &pb.HeartbeatResponse{ErrorCode: code}
}
