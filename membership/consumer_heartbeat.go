package membership

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// consumerHeartbeatVersion is the ConsumerGroupHeartbeat version whose rules
// the member follows: v1, the client generates its member id.
const consumerHeartbeatVersion = 1

// EpochLeave and EpochStaticLeave are the member epochs of a leaving
// member: for good, or (a static member) until it comes back within its
// session timeout with the same instance id.
const (
	EpochLeave       int32 = -1
	EpochStaticLeave int32 = -2
)

func (m *Consumer) heartbeats() bool {
	switch m.phase {
	case Joining:
		return true
	case Stable:
		return m.epoch > 0
	case Closing:
		return m.epoch > 0 && m.closeStage != closeDone
	}
	return false
}

// sendHeartbeat sends the next heartbeat unless one is in flight. It is a
// full request (subscription, rebalance timeout, owned partitions) when the
// member joins, after any error, when what it owns differs from what the
// coordinator last heard, and whenever it owns nothing (so that a lost
// answer carrying an assignment is sent again); a keepalive otherwise and
// while closing.
func (m *Consumer) sendHeartbeat(fx *Effects) {
	if m.hbID != 0 || !m.heartbeats() {
		return
	}
	fx.cancel(TimerHeartbeat)
	req := &pb.ConsumerGroupHeartbeatRequest{
		GroupId:            m.cfg.Group,
		MemberId:           m.memberID,
		MemberEpoch:        m.epoch,
		RebalanceTimeoutMs: -1,
		ClientId:           m.cfg.ClientID,
		ApiVersion:         consumerHeartbeatVersion,
	}
	full := m.epoch == 0 || m.phase != Closing && (m.reported == nil || len(m.owned) == 0 || !m.reported.equal(m.owned))
	m.hbFull = nil
	if full {
		if m.cfg.InstanceID != "" {
			req.InstanceId = &m.cfg.InstanceID
		}
		if m.cfg.Rack != "" {
			req.RackId = &m.cfg.Rack
		}
		if m.cfg.ServerAssignor != "" {
			req.ServerAssignor = &m.cfg.ServerAssignor
		}
		req.RebalanceTimeoutMs = int32(m.cfg.RebalanceTimeout / time.Millisecond)
		if len(m.topics) > 0 || m.cfg.TopicRegex == "" {
			req.SubscribedTopicNamesSet, req.SubscribedTopicNames = true, m.topics
		}
		if m.cfg.TopicRegex != "" {
			re := m.cfg.TopicRegex
			req.SubscribedTopicRegex = &re
		}
		req.TopicsSet = true
		for _, tp := range m.owned.list() {
			req.Topics = append(req.Topics, &pb.TopicPartitions{Name: tp.Topic, Partitions: tp.Partitions})
		}
		m.hbFull = m.owned.clone()
	}
	m.sent = true
	m.hbSent = m.now
	m.hbID = m.send(fx, req)
}

// next schedules the heartbeat after an answer: at once when what the
// member owns changed since the coordinator last heard (an acknowledgement
// of a revocation or of new partitions), else after the interval.
func (m *Consumer) next(fx *Effects) {
	if m.hbID != 0 || !m.heartbeats() {
		return
	}
	if m.phase == Stable && (m.reported == nil || !m.reported.equal(m.owned)) {
		m.sendHeartbeat(fx)
		return
	}
	fx.arm(TimerHeartbeat, m.interval)
}

// fatalHeartbeat lists the codes the member cannot recover from.
func fatalHeartbeat(code int16) bool {
	switch code {
	case kerr.InvalidRequest.Code, kerr.GroupMaxSizeReached.Code, kerr.UnsupportedAssignor.Code,
		kerr.InvalidRegularExpression.Code, kerr.UnreleasedInstanceID.Code, kerr.GroupAuthorizationFailed.Code,
		kerr.UnsupportedVersion.Code:
		return true
	}
	return false
}

func (m *Consumer) onHeartbeat(res any, err error, fx *Effects) {
	m.hbID = 0
	full := m.hbFull
	m.hbFull = nil
	r, _ := res.(*pb.ConsumerGroupHeartbeatResponse)
	if m.phase == Closing {
		m.onClosingHeartbeat(r, err, fx)
		return
	}
	if err != nil || r == nil {
		m.rediscover(fx)
		return
	}
	code := int16(r.GetErrorCode())
	switch {
	case code == 0:
	case code == kerr.UnsupportedVersion.Code && !m.served:
		m.fallback(fx)
		return
	case code == kerr.FencedMemberEpoch.Code || code == kerr.UnknownMemberID.Code || code == kerr.StaleMemberEpoch.Code ||
		code == kerr.GroupIDNotFound.Code && m.epoch > 0:
		if m.epoch == 0 {
			// A join refused: the coordinator still holds the member at an
			// older epoch (Kafka before 4.3 refuses such a rejoin until
			// the session expires). Try again later.
			m.reported = nil
			m.retryAfter(fx, retryHeartbeat)
			return
		}
		m.fence(fx)
		return
	case code == kerr.NotCoordinator.Code || code == kerr.CoordinatorNotAvailable.Code:
		m.rediscover(fx)
		return
	case code == kerr.FencedInstanceID.Code:
		m.stop(fx, fmt.Errorf("%w (heartbeat): %w", ErrFenced, kerr.FencedInstanceID))
		return
	case fatalHeartbeat(code) || code == kerr.GroupIDNotFound.Code:
		m.stop(fx, &CodeError{Op: "heartbeat", Code: code, Message: r.GetErrorMessage()})
		return
	default: // COORDINATOR_LOAD_IN_PROGRESS, TOPIC_AUTHORIZATION_FAILED (Kafka's clients go on) and anything unexpected
		m.reported = nil
		m.retryAfter(fx, retryHeartbeat)
		return
	}
	if r.GetMemberEpoch() <= 0 {
		// Only a leave is answered with a negative epoch, and a join is
		// never answered 0: ignore it rather than leave by mistake.
		m.reported = nil
		m.next(fx)
		return
	}
	m.served = true
	m.backoff = 0
	if id := r.GetMemberId(); id != "" {
		m.memberID = id
	}
	m.epoch = r.GetMemberEpoch()
	if m.phase == Joining {
		m.phase = Stable
	}
	if full != nil {
		m.reported = full
	}
	if ms := r.GetHeartbeatIntervalMs(); ms > 0 {
		m.interval = time.Duration(ms) * time.Millisecond
	}
	// The coordinator's session runs from when it handled the request,
	// which is after it was sent: counted from the send, the member's
	// bound ends first.
	fx.arm(TimerSession, max(m.hbSent.Add(m.cfg.SessionTimeout).Sub(m.now), 0))
	if r.GetHasAssignment() {
		target := set{}
		for _, tp := range r.GetAssignment() {
			for _, p := range tp.GetPartitions() {
				if p >= 0 {
					target[TopicPartition{tp.GetName(), p}] = struct{}{}
				}
			}
		}
		m.reconcile(fx, target)
	}
	m.retryParked(fx)
	m.next(fx)
}

// reconcile moves what the member owns toward target, the whole assignment
// the coordinator sent: partitions no longer assigned are revoked (the
// member reports them gone only once the Revoked callback returned), and
// new ones are given at once (the coordinator hands out only partitions
// that nobody else holds).
func (m *Consumer) reconcile(fx *Effects, target set) {
	m.target = target
	if m.waitToken == 0 {
		if revoke := m.owned.minus(target); len(revoke) > 0 {
			m.wait(m.callback(fx, Revoked, revoke, true), afterAck)
			m.revoking = revoke
			if m.revokeSince.IsZero() {
				m.revokeSince = m.now
			}
			fx.arm(TimerRevoke, max(m.revokeSince.Add(m.revokeLimit()).Sub(m.now), 0))
		}
	}
	if added := target.minus(m.owned); len(added) > 0 && m.waitThen != afterJoin && !m.rejoinAfter {
		m.callback(fx, Assigned, added, false)
		m.owned.union(added)
	}
}

// revokeLimit is how long a revoke may run before the coordinator has
// fenced the member: its rebalance timeout runs from when it handled the
// heartbeat whose answer started the revoke, up to an interval earlier.
func (m *Consumer) revokeLimit() time.Duration {
	rt := m.cfg.RebalanceTimeout
	return max(rt-m.interval, rt/2)
}

// onSessionExpired: the coordinator has not answered for the session
// timeout (counted from the send of the last answered heartbeat). A
// coordinator removes a member it has not heard from for its session
// timeout and hands its partitions out, so they are reported lost and the
// member rejoins. Configure SessionTimeout no longer than the coordinator's
// (group.consumer.session.timeout.ms, 45s by default and at least 45s in
// Kafka).
func (m *Consumer) onSessionExpired(fx *Effects) {
	if m.phase == Closing || m.epoch <= 0 && len(m.owned) == 0 {
		return
	}
	m.fence(fx)
}

// OnCallbackDone reports that the callback with token returned.
func (m *Consumer) OnCallbackDone(now time.Time, token uint64, fx *Effects) {
	if m.classic != nil {
		m.classic.OnCallbackDone(now, token, fx)
		return
	}
	m.now = now
	if m.phase == Stopped || token == 0 || token != m.waitToken {
		return
	}
	m.waitToken = 0
	then := m.waitThen
	m.waitThen = afterNothing
	if m.revoking != nil {
		for tp := range m.revoking {
			delete(m.owned, tp)
		}
		m.revoking = nil
		m.revokeSince = time.Time{}
		fx.cancel(TimerRevoke)
	}
	switch then {
	case afterAck:
		if m.rejoinAfter || m.revokeExpired {
			m.rejoinAfter, m.revokeExpired = false, false
			m.fence(fx)
			return
		}
		if m.target != nil {
			m.reconcile(fx, m.target)
		}
		m.next(fx)
	case afterJoin:
		if m.phase == Discovering {
			m.resume = Joining
			return
		}
		m.join(fx)
	case afterClose:
		m.rejoinAfter, m.revokeExpired = false, false
		m.closeStep(fx)
	}
}
