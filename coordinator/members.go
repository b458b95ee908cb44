package coordinator

import (
	"time"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// removeAndUpdate is Kafka's removeMemberAndUpdateGroup: a parked JoinGroup
// is answered UNKNOWN_MEMBER_ID, the member is removed and the group reacts.
func (g *Group) removeAndUpdate(now time.Time, m *member, fx *Effects) {
	if m.joinReply != nil {
		fx.reply(m.joinReply, joinError("", ErrUnknownMemberID))
		g.setJoinReply(m, nil, 0)
	}
	g.removeMember(m, fx)
	switch g.state {
	case Stable, CompletingRebalance:
		g.prepareRebalance(now, fx)
	case PreparingRebalance:
		g.tryCompleteJoin(now, fx)
	}
}

// onMemberTimer is the expiry of a member's (or pending member id's) liveness
// timer. The decision depends only on the member's current state.
func (g *Group) onMemberTimer(now time.Time, id string, fx *Effects) {
	if g.state == Dead {
		return
	}
	if _, ok := g.pending[id]; ok {
		delete(g.pending, id)
		g.tryCompleteJoin(now, fx)
		return
	}
	m := g.members.get(id)
	if m != nil && g.sessionGoesOn(now, m, fx) {
		return
	}
	switch {
	case m == nil:
		return
	case m.isNew:
		// The new-member join timeout: the member never completed a join
		// phase, so no durable record names it.
		g.removeAndUpdate(now, m, fx)
	case m.joinReply != nil || m.syncReply != nil:
		// Parked in a rebalance: the join and sync timers govern it, and join
		// completion or assignment propagation arms a fresh session timer.
	default:
		g.removeAndUpdate(now, m, fx)
		g.persistMembership(now, fx, &emptyGroupWrite{})
	}
}

// Leave handles LeaveGroup v0-v5 (v0-v2 are sent as one identity). When
// members were removed, the answer waits until the group without them is
// written.
func (g *Group) Leave(now time.Time, req *pb.LeaveGroupRequest, to ReplyTo, fx *Effects) {
	if req.GetGroupId() == "" {
		fx.reply(to, &pb.LeaveGroupResponse{ErrorCode: ErrInvalidGroupID})
		return
	}
	if g.state == Dead {
		fx.reply(to, &pb.LeaveGroupResponse{ErrorCode: ErrCoordinatorNotAvailable})
		return
	}
	resp := &pb.LeaveGroupResponse{Members: make([]*pb.LeaveGroupMemberResponse, 0, len(req.GetMembers()))}
	before := g.members.len()
	for _, id := range req.GetMembers() {
		resp.Members = append(resp.Members, &pb.LeaveGroupMemberResponse{
			MemberId:        id.GetMemberId(),
			GroupInstanceId: cloneOpt(id.GroupInstanceId),
			ErrorCode:       g.leaveOne(now, id, fx),
		})
	}
	if g.members.len() < before {
		op := &replyWrite{reply: to, msg: resp, onError: func(code int32) { resp.ErrorCode = retriableWriteError(code) }}
		op.groupWrite = true
		if g.persistMembership(now, fx, op) {
			return
		}
	}
	fx.reply(to, resp)
}

// retriableWriteError turns a failed group write into a retriable
// coordinator error for APIs whose clients do not re-join on
// REBALANCE_IN_PROGRESS (LeaveGroup, DeleteGroups).
func retriableWriteError(code int32) int32 {
	if code == ErrRebalanceInProgress || code == ErrUnknownServerError || code == ErrRequestTimedOut {
		return ErrCoordinatorNotAvailable
	}
	return code
}

func (g *Group) leaveOne(now time.Time, id *pb.MemberIdentity, fx *Effects) int32 {
	memberID := id.GetMemberId()
	if memberID == "" {
		mapped, ok := "", false
		if id.GroupInstanceId != nil {
			mapped, ok = g.static[id.GetGroupInstanceId()]
		}
		if !ok {
			return ErrUnknownMemberID
		}
		g.removeAndUpdate(now, g.members.get(mapped), fx)
		return ErrNone
	}
	if _, ok := g.pending[memberID]; ok {
		delete(g.pending, memberID)
		fx.cancel(TimerMember, memberID)
		g.tryCompleteJoin(now, fx)
		return ErrNone
	}
	m, code := g.validateMember(memberID, id.GroupInstanceId)
	if code != ErrNone {
		return code
	}
	g.removeAndUpdate(now, m, fx)
	return ErrNone
}

// OnTimer handles the expiry of a timer the group armed. Owners drop fires of
// timers that were re-armed or cancelled since; the machine re-checks its
// state anyway.
func (g *Group) OnTimer(now time.Time, key TimerKey, fx *Effects) {
	switch key.Kind {
	case TimerMember:
		g.onMemberTimer(now, key.Member, fx)
	case TimerJoin:
		g.onJoinTimer(now, fx)
	case TimerSync:
		g.onSyncTimer(now, fx)
	case TimerOffsetExpiry:
		g.expireOffsets(now, fx)
		if g.state != Dead {
			fx.arm(TimerOffsetExpiry, "", g.cfg.OffsetsRetentionCheckInterval)
		}
	case TimerSessions:
		g.checkSessions(now, fx)
	}
}

// Unload is leadership loss (Kafka's onGroupUnloaded): the group goes Dead
// here and every parked request is answered NOT_COORDINATOR. The durable
// state is untouched; the new coordinator loads it.
func (g *Group) Unload(now time.Time, fx *Effects) {
	for _, m := range g.order {
		if m.joinReply != nil {
			fx.reply(m.joinReply, joinError(m.id, ErrNotCoordinator))
			g.setJoinReply(m, nil, 0)
		}
		if m.syncReply != nil {
			fx.reply(m.syncReply, syncError(ErrNotCoordinator))
			m.syncReply = nil
		}
	}
	for _, op := range g.inflight {
		if a, ok := op.(abandoner); ok {
			a.abandon(fx)
		}
	}
	clear(g.inflight)
	g.cancelAllTimers(fx)
	g.transition(Dead, now)
}

func (g *Group) cancelAllTimers(fx *Effects) {
	for _, m := range g.order {
		g.cancelSession(m, fx)
	}
	for id := range g.pending {
		fx.cancel(TimerMember, id)
	}
	fx.cancel(TimerJoin, "")
	fx.cancel(TimerSync, "")
	fx.cancel(TimerOffsetExpiry, "")
	if g.sessionsArmed {
		fx.cancel(TimerSessions, "")
		g.sessionsArmed = false
	}
	g.joinArmed, g.syncArmed = false, false
}

// Describe handles DescribeGroups for this group.
func (g *Group) Describe() *pb.DescribeGroupResponse {
	resp := &pb.DescribeGroupResponse{
		GroupId:      g.id,
		State:        g.state.String(),
		ProtocolType: g.protocolType,
		GenerationId: g.generation,
	}
	if g.state == Dead {
		resp.ProtocolType = ""
		return resp
	}
	stable := g.state == Stable
	if stable {
		resp.ProtocolData = g.protocolNameOr("")
	}
	for _, m := range g.order {
		d := &pb.DescribedMember{
			MemberId:        m.id,
			GroupInstanceId: cloneOpt(m.instanceID),
			ClientId:        m.clientID,
			ClientHost:      m.clientHost,
			Metadata:        []byte{},
			Assignment:      []byte{},
		}
		if stable {
			d.Metadata = g.memberMetadata(m)
			d.Assignment = m.assignment
		}
		resp.Members = append(resp.Members, d)
	}
	return resp
}

// Delete handles DeleteGroups for this group. A deletable (Empty) group goes
// Dead at once; the answer and Effects.Gone follow once the tombstones are
// written.
func (g *Group) Delete(now time.Time, to ReplyTo, fx *Effects) {
	switch g.state {
	case Dead:
		fx.reply(to, &pb.DeleteGroupResponse{GroupId: g.id, ErrorCode: ErrGroupIDNotFound})
	case Empty:
		if g.consumerHeld() {
			fx.reply(to, &pb.DeleteGroupResponse{GroupId: g.id, ErrorCode: ErrNonEmptyGroup})
			return
		}
		recs := g.offsetTombstones(func(topicPartition) bool { return true })
		recs = append(recs, &pb.Record{Kind: &pb.Record_GroupTombstone{GroupTombstone: &pb.GroupTombstone{GroupId: g.id}}})
		clear(g.offsets)
		g.die(now, fx)
		g.persist(fx, &deleteWrite{reply: to}, recs...)
	default:
		fx.reply(to, &pb.DeleteGroupResponse{GroupId: g.id, ErrorCode: ErrNonEmptyGroup})
	}
}

// die moves an Empty group to Dead (deletion or expiry).
func (g *Group) die(now time.Time, fx *Effects) {
	g.cancelAllTimers(fx)
	clear(g.pending)
	g.transition(Dead, now)
	g.deleting = true
}

type deleteWrite struct{ reply ReplyTo }

func (w *deleteWrite) abandon(fx *Effects) {
	fx.reply(w.reply, &pb.DeleteGroupResponse{ErrorCode: ErrNotCoordinator})
}

func (w *deleteWrite) done(g *Group, now time.Time, err error, fx *Effects) {
	code := ErrNone
	if err != nil {
		code = retriableWriteError(groupWriteError(err))
	}
	fx.reply(w.reply, &pb.DeleteGroupResponse{GroupId: g.id, ErrorCode: code})
}
