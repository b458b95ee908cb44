package membership

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

func (m *Machine) armHeartbeat(fx *Effects) {
	fx.arm(TimerHeartbeat, m.cfg.HeartbeatInterval)
}

func (m *Machine) heartbeats() bool {
	return m.generation >= 0 && m.memberID != "" && m.phase != Joining && m.phase != Discovering &&
		m.phase != Stopped && m.phase != Idle
}

func (m *Machine) sendHeartbeat(fx *Effects) {
	if m.hbID != 0 || !m.heartbeats() {
		return
	}
	req := &pb.HeartbeatRequest{GroupId: m.cfg.Group, GenerationId: m.generation, MemberId: m.memberID}
	if m.cfg.InstanceID != "" {
		req.GroupInstanceId = &m.cfg.InstanceID
	}
	m.hbGeneration = m.generation
	m.hbID = m.send(fx, req)
}

func (m *Machine) onHeartbeat(r *pb.HeartbeatResponse, err error, fx *Effects) {
	if !m.heartbeats() {
		return
	}
	if err != nil || r == nil {
		if m.phase == Stable {
			m.rediscover(fx, Stable)
		} else {
			m.armHeartbeat(fx) // a closing member too: its revoke may still run
		}
		return
	}
	code := int16(r.GetErrorCode())
	if m.phase == Closing {
		// The member is leaving either way; while it is still in the group
		// its heartbeats keep what it revokes from being handed out.
		switch {
		case code == 0, code == kerr.RebalanceInProgress.Code, coordinatorMoved(code), code == kerr.CoordinatorLoadInProgress.Code,
			m.hbGeneration != m.generation: // an answer about the generation it left
			m.armHeartbeat(fx)
		case code == kerr.IllegalGeneration.Code && m.prevGeneration >= 0:
			// The generation its join formed was lost with the coordinator
			// that formed it: the member is still in the one before.
			m.generation, m.prevGeneration = m.prevGeneration, -1
			m.armHeartbeat(fx)
		}
		return
	}
	stale := m.hbGeneration != m.generation
	switch {
	case code == 0:
		m.answered(fx)
		m.armHeartbeat(fx)
	case code == kerr.RebalanceInProgress.Code:
		m.answered(fx)
		if m.phase == Stable {
			m.startJoin(fx)
		} else {
			m.armHeartbeat(fx)
		}
	case stale:
		m.armHeartbeat(fx) // an answer about an older generation
	case code == kerr.IllegalGeneration.Code:
		m.resetAndRejoin(fx, true)
	case code == kerr.UnknownMemberID.Code:
		m.resetAndRejoin(fx, false)
	case code == kerr.FencedInstanceID.Code:
		m.stop(fx, fmt.Errorf("%w (heartbeat): %w", ErrFenced, kerr.FencedInstanceID))
	case coordinatorMoved(code):
		if m.phase == Stable {
			m.rediscover(fx, Stable)
		} else {
			m.armHeartbeat(fx)
		}
	case code == kerr.GroupAuthorizationFailed.Code:
		m.stop(fx, &CodeError{Op: "heartbeat", Code: code})
	default: // COORDINATOR_LOAD_IN_PROGRESS and anything unexpected: try again
		m.retryAfter(fx, retryHeartbeat)
	}
}

// onSessionExpired: no answer for a session timeout. Unless a join or sync
// is waiting for its answer (the coordinator keeps such a member), the
// member may have been removed and its partitions given to others.
func (m *Machine) onSessionExpired(fx *Effects) {
	if m.joinID != 0 || m.syncID != 0 || m.phase == Closing {
		return
	}
	if m.generation < 0 && len(m.owned) == 0 {
		return
	}
	m.reset(fx, m.cfg.InstanceID != "")
	if m.phase == Discovering {
		m.resume = Joining
		return
	}
	m.phase = Preparing
	m.retryWhat = retryNone
	if m.waitToken == 0 {
		m.discover(fx)
		m.resume = Joining
		return
	}
	m.waitThen = afterJoin
}
