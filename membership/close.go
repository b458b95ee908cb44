package membership

import (
	"time"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Close revokes what the member owns, commits the marked offsets, and leaves
// the group (a static member does not leave, so that it can come back within
// its session timeout). The machine reports Stopped when done.
func (m *Machine) Close(now time.Time, fx *Effects) {
	m.now = now
	switch m.phase {
	case Stopped, Closing:
		return
	case Idle:
		m.stop(fx, nil)
		return
	}
	m.phase = Closing
	// A join or sync in flight is answered still: the coordinator counts the
	// member in the generation it forms, and the member heartbeats in it
	// until it leaves (onClosingAnswer).
	m.closingJoinID, m.closingSyncID = m.joinID, m.syncID
	m.joinID, m.syncID, m.metaID, m.findID = 0, 0, 0, 0
	// Heartbeats go on while the revoke callback runs, so that the session
	// does not expire (and the partitions move) before it returned.
	fx.cancel(TimerRetry)
	fx.cancel(TimerSession)
	m.closeStage = closeRevoke
	if m.waitToken != 0 {
		m.waitThen = afterClose // the running callback finishes first
		return
	}
	m.closeStep(fx)
}

// onClosingAnswer takes the answer to a JoinGroup or SyncGroup that was in
// flight when Close began: a successful one puts the member in the
// generation the coordinator formed, so that its heartbeats, which keep
// what it revokes from being handed out, are accepted until it leaves. It
// takes nothing that was assigned: the member leaves.
func (m *Machine) onClosingAnswer(code int32, memberID string, generation int32, err error, fx *Effects) {
	if err != nil || code != 0 || m.generation < 0 && len(m.owned) == 0 && m.revoking == nil {
		return
	}
	m.moveTo(generation)
	m.memberID = memberID
	if m.closeStage != closeDone && m.heartbeats() && m.hbID == 0 {
		m.armHeartbeat(fx)
	}
}

// closeStage is how far Close got.
type closeStage uint8

const (
	closeRevoke closeStage = iota
	closeCommit
	closeLeave
	closeDone
)

// closeStep runs the next step of Close: revoke, commit the marks, leave.
func (m *Machine) closeStep(fx *Effects) {
	switch m.closeStage {
	case closeRevoke:
		m.closeStage = closeCommit
		if len(m.owned) > 0 {
			kind := Revoked
			if m.generation < 0 {
				kind = Lost // the generation is gone: they may be someone else's
			}
			owned := m.owned
			m.owned = set{}
			if kind == Revoked {
				m.revoke(fx, owned, afterClose)
			} else {
				m.wait(m.callback(fx, kind, owned, true), afterClose)
			}
			return
		}
		fallthrough
	case closeCommit:
		m.closeStage = closeLeave
		if m.generation >= 0 && m.memberID != "" && len(m.marks) > 0 {
			id := m.send(fx, m.commitRequest(m.markedOffsets()))
			m.commits[id] = commitInFlight{generation: m.generation, closing: true}
			return
		}
		fallthrough
	case closeLeave:
		m.closeStage = closeDone
		fx.cancel(TimerHeartbeat)
		m.hbID = 0
		if m.cfg.InstanceID == "" && m.memberID != "" {
			reason := "member closed"
			m.leaveID = m.send(fx, &pb.LeaveGroupRequest{GroupId: m.cfg.Group, Members: []*pb.MemberIdentity{{MemberId: m.memberID, Reason: &reason}}})
			return
		}
		fallthrough
	default:
		m.stop(fx, nil)
	}
}
