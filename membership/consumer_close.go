package membership

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Close revokes what the member owns (heartbeating meanwhile, so that
// nobody else gets it before the Revoked callback returned), commits the
// marked offsets, and leaves: member epoch -1, or -2 with the instance id
// for a static member, which keeps its place and partitions until its
// session timeout. The member reports Stopped once the leave is answered.
func (m *Consumer) Close(now time.Time, fx *Effects) {
	if m.classic != nil {
		m.classic.Close(now, fx)
		return
	}
	m.now = now
	switch m.phase {
	case Stopped, Closing:
		return
	case Idle:
		m.stop(fx, nil)
		return
	}
	m.phase = Closing
	fx.cancel(TimerRetry)
	fx.cancel(TimerSession)
	m.retryWhat = retryNone
	m.closeStage = closeRevoke
	if m.epoch > 0 && m.hbID == 0 {
		fx.arm(TimerHeartbeat, m.interval)
	}
	if m.waitToken != 0 {
		m.waitThen = afterClose // the running callback returns first
		return
	}
	m.closeStep(fx)
}

// closeStep runs the next step of Close: revoke, commit the marks, leave.
func (m *Consumer) closeStep(fx *Effects) {
	switch m.closeStage {
	case closeRevoke:
		m.closeStage = closeCommit
		if len(m.owned) > 0 {
			if m.epoch > 0 {
				m.revoking = m.owned.clone() // given up once the callback returned
				m.wait(m.callback(fx, Revoked, m.revoking, true), afterClose)
				return
			}
			// Not in the group (fenced, rejoining): they may be another's.
			lost := m.owned
			m.owned = set{}
			m.wait(m.callback(fx, Lost, lost, true), afterClose)
			return
		}
		fallthrough
	case closeCommit:
		m.closeStage = closeLeave
		if m.epoch > 0 && len(m.marks) > 0 {
			if m.sendCommit(fx, &consumerCommit{offsets: m.markedOffsets(), closing: true}) != 0 {
				return
			}
		}
		fallthrough
	case closeLeave:
		m.closeStage = closeDone
		fx.cancel(TimerHeartbeat)
		if m.hbID != 0 {
			m.leavePending = true // after its answer: a leave must not overtake a join
			return
		}
		m.sendLeave(fx)
	}
}

// sendLeave sends the leave heartbeat; any answer stops the member.
func (m *Consumer) sendLeave(fx *Effects) {
	m.leavePending = false
	if !m.sent {
		m.stop(fx, nil) // the coordinator never heard of the member
		return
	}
	req := &pb.ConsumerGroupHeartbeatRequest{GroupId: m.cfg.Group, MemberId: m.memberID, MemberEpoch: EpochLeave,
		RebalanceTimeoutMs: -1, ClientId: m.cfg.ClientID, ApiVersion: consumerHeartbeatVersion}
	if m.cfg.InstanceID != "" {
		req.MemberEpoch = EpochStaticLeave
		req.InstanceId = &m.cfg.InstanceID // Kafka refuses a -2 without it
	}
	m.leaveID = m.send(fx, req)
}

// onClosingHeartbeat takes a heartbeat answer while closing: the member
// takes no new partitions but follows its epoch, so that its last commit
// is accepted, and goes on heartbeating until it leaves.
func (m *Consumer) onClosingHeartbeat(r *pb.ConsumerGroupHeartbeatResponse, err error, fx *Effects) {
	if err == nil && r != nil {
		switch code := int16(r.GetErrorCode()); {
		case code == 0 && r.GetMemberEpoch() > 0:
			m.epoch = r.GetMemberEpoch()
		case code == kerr.FencedMemberEpoch.Code || code == kerr.UnknownMemberID.Code || code == kerr.GroupIDNotFound.Code:
			m.epoch = 0 // out of the group: nothing more to commit in
		}
	}
	m.retryParked(fx)
	switch {
	case m.phase != Closing:
	case m.closeStage == closeDone:
		if m.leavePending {
			m.sendLeave(fx)
		}
	case m.epoch > 0:
		fx.arm(TimerHeartbeat, m.interval)
	}
}
