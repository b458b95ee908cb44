package membership

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// discover asks for the coordinator; resume says where to go when found.
func (m *Machine) discover(fx *Effects) {
	m.phase = Discovering
	m.joinID, m.syncID, m.hbID, m.metaID = 0, 0, 0, 0
	fx.cancel(TimerHeartbeat)
	fx.cancel(TimerRetry)
	m.retryWhat = retryNone
	m.findID = m.send(fx, &FindCoordinator{Group: m.cfg.Group})
}

// rediscover is discover after the coordinator moved or did not answer.
func (m *Machine) rediscover(fx *Effects, resume Phase) {
	m.resume = resume
	m.discover(fx)
}

// startJoin prepares and sends a JoinGroup: an eager member first revokes
// everything it owns.
func (m *Machine) startJoin(fx *Effects) {
	m.phase = Preparing
	if m.waitToken != 0 {
		// A revoke or lost callback still runs: join once it returned.
		m.waitThen = afterJoin
		return
	}
	m.followUp = false
	m.leader, m.members, m.assignedFrom = false, nil, nil
	if len(m.owned) > 0 && !m.Cooperative(m.protocol) {
		revoked := m.owned
		m.owned = set{}
		m.revoke(fx, revoked, afterJoin)
		return
	}
	m.sendJoin(fx)
}

func (m *Machine) sendJoin(fx *Effects) {
	m.phase = Joining
	m.revokeSince = time.Time{}
	m.followUp = false
	m.retryWhat = retryNone
	fx.cancel(TimerSession) // the coordinator keeps a member waiting in join alive
	owned := m.owned.list()
	st := assignor.MemberState{Topics: m.cfg.Topics, Owned: owned, Generation: m.generation, Rack: m.cfg.Rack}
	req := &pb.JoinGroupRequest{
		GroupId:            m.cfg.Group,
		SessionTimeoutMs:   int32(m.cfg.SessionTimeout / time.Millisecond),
		RebalanceTimeoutMs: int32(m.cfg.RebalanceTimeout / time.Millisecond),
		MemberId:           m.memberID,
		ProtocolType:       "consumer",
		ClientId:           m.cfg.ClientID,
	}
	if m.cfg.InstanceID != "" {
		req.GroupInstanceId = &m.cfg.InstanceID
	}
	if m.rejoinReason != "" {
		r := m.rejoinReason
		req.Reason = &r
		m.rejoinReason = ""
	}
	for _, b := range m.cfg.Balancers {
		req.Protocols = append(req.Protocols, &pb.Protocol{Name: b.ProtocolName(), Metadata: b.Metadata(st)})
	}
	m.joinID = m.send(fx, req)
}

// reset forgets the generation (and the member id unless keepID): whatever
// the member owns is lost, since the coordinator may have handed it out.
// moveTo puts the member in generation gen, a JoinGroup answer's,
// remembering the one it leaves until a SyncGroup answer confirms gen.
func (m *Machine) moveTo(gen int32) {
	if gen != m.generation {
		m.prevGeneration = m.generation
	}
	m.generation = gen
}

func (m *Machine) reset(fx *Effects, keepID bool) {
	if len(m.owned) > 0 {
		lost := m.owned
		m.owned = set{}
		m.callback(fx, Lost, lost, true) // waited for through the join it leads to
		m.wait(m.nextToken, afterJoin)
	}
	m.joinID, m.syncID, m.metaID = 0, 0, 0
	m.generation, m.prevGeneration = assignor.DefaultGeneration, assignor.DefaultGeneration
	m.revokeSince = time.Time{}
	m.protocol, m.leader, m.members, m.assignedFrom = "", false, nil, nil
	if !keepID {
		m.memberID = ""
	}
	fx.cancel(TimerSession)
	fx.cancel(TimerHeartbeat)
	m.hbID = 0
}

// resetAndRejoin is reset followed by a join once the lost callback returns.
func (m *Machine) resetAndRejoin(fx *Effects, keepID bool) {
	m.joinID, m.syncID, m.metaID = 0, 0, 0
	m.reset(fx, keepID)
	m.phase = Preparing
	m.retryWhat = retryNone
	if m.waitToken == 0 {
		m.sendJoin(fx)
		return
	}
	m.waitThen = afterJoin // whatever the running callback was for, join next
}

func (m *Machine) onFound(res any, err error, fx *Effects) {
	f, ok := res.(*CoordinatorFound)
	if err != nil || !ok {
		m.retryAfter(fx, retryDiscover)
		return
	}
	m.exclusive = f.Exclusive
	if m.phase == Closing {
		m.closeStep(fx)
		return
	}
	if m.resume == Stable && m.generation >= 0 {
		m.phase = Stable
		m.sendHeartbeat(fx)
		return
	}
	m.startJoin(fx)
}

// coordinatorMoved reports codes that send a member to find its coordinator.
func coordinatorMoved(code int16) bool {
	return code == kerr.NotCoordinator.Code || code == kerr.CoordinatorNotAvailable.Code
}

// fatalJoin lists the JoinGroup codes the member cannot recover from.
func fatalJoin(code int16) bool {
	switch code {
	case kerr.InconsistentGroupProtocol.Code, kerr.InvalidSessionTimeout.Code, kerr.InvalidGroupID.Code,
		kerr.GroupAuthorizationFailed.Code, kerr.GroupMaxSizeReached.Code, kerr.UnsupportedVersion.Code:
		return true
	}
	return false
}

func (m *Machine) onJoin(r *pb.JoinGroupResponse, err error, fx *Effects) {
	code := int16(r.GetErrorCode()) // 0 for a nil answer
	if err != nil || r == nil || coordinatorMoved(code) {
		m.answeredIfOwned(fx)
		m.rediscover(fx, Joining)
		return
	}
	switch {
	case code == 0:
	case code == kerr.MemberIDRequired.Code:
		m.answered(fx)
		m.memberID = r.GetMemberId()
		m.sendJoin(fx)
		return
	case code == kerr.UnknownMemberID.Code:
		m.resetAndRejoin(fx, false)
		return
	case code == kerr.RebalanceInProgress.Code:
		m.answered(fx)
		m.sendJoin(fx)
		return
	case code == kerr.FencedInstanceID.Code:
		m.stop(fx, fmt.Errorf("%w (join): %w", ErrFenced, kerr.FencedInstanceID))
		return
	case fatalJoin(code):
		m.stop(fx, &CodeError{Op: "join", Code: code})
		return
	default: // COORDINATOR_LOAD_IN_PROGRESS and anything unexpected
		m.answeredIfOwned(fx)
		m.phase = Joining
		m.retryAfter(fx, retryJoin)
		return
	}
	m.memberID = r.GetMemberId()
	m.moveTo(r.GetGenerationId())
	m.protocol = r.GetProtocolName()
	m.leader = r.GetLeader() == m.memberID
	m.answered(fx)
	m.armHeartbeat(fx)
	if m.leader && !r.GetSkipAssignment() {
		m.members = r.GetMembers()
	}
	if len(m.owned) > 0 && !m.Cooperative(m.protocol) {
		// Downgrade: kept through the join, but this generation is eager.
		m.phase = Downgrading
		revoked := m.owned
		m.owned = set{}
		m.revoke(fx, revoked, afterSync)
		return
	}
	m.assign(fx)
}

// EnforceRebalance asks for a rebalance without revoking what a cooperative
// member owns (KIP-568). reason goes with the JoinGroup.
func (m *Machine) EnforceRebalance(now time.Time, reason string, fx *Effects) error {
	m.now = now
	switch {
	case m.phase == Stopped || m.phase == Closing || m.phase == Idle:
		return ErrIllegalState
	case m.phase.rebalancing() || m.followUp:
		return ErrRebalanceInProgress
	case m.generation < 0:
		return nil // not in an active group: already rejoining
	case m.phase == Discovering:
		return ErrCoordinatorNotAvailable
	}
	if reason == "" {
		reason = "enforced rebalance"
	}
	m.rejoinReason = reason
	m.startJoin(fx)
	return nil
}
