package membership

import (
	"time"

	"github.com/cohort-coord/cohort/assignor"
)

func (m *Machine) wait(token uint64, then after) {
	m.waitToken, m.waitThen = token, then
	m.revoking = nil
}

// revoke runs the Revoked callback for s and waits for it before then. The
// member keeps heartbeating meanwhile, as the Java consumer does until it
// sends JoinGroup: the coordinator keeps a member that heartbeats through a
// rebalance for up to its rebalance timeout, which bounds how long the
// callback may take (TimerRevoke, revokeLimit).
func (m *Machine) revoke(fx *Effects, s set, then after) {
	m.wait(m.callback(fx, Revoked, s, true), then)
	m.revoking = s
	if m.revokeSince.IsZero() {
		m.revokeSince = m.now
	}
	fx.arm(TimerRevoke, max(m.revokeSince.Add(m.revokeLimit()).Sub(m.now), 0))
	if m.heartbeats() {
		m.armHeartbeat(fx)
	}
}

// revokeLimit is how long a revoke callback may run before its partitions
// count as lost: the rebalance timeout, less two heartbeat intervals, since
// the coordinator's rebalance (and its timeout) may have begun that long
// before the member learned of it from a heartbeat's answer; at least half
// the rebalance timeout.
func (m *Machine) revokeLimit() time.Duration {
	rt := m.cfg.RebalanceTimeout
	return max(rt-2*m.cfg.HeartbeatInterval, rt/2)
}

// onRevokeTimeout: the waited-for revoke callback ran for the rebalance
// timeout. The coordinator removes a member that has not rejoined (or
// synced) by then and hands its partitions out, so the member gives up its
// generation as if its session had expired (the Java consumer's answer to
// max.poll.interval.ms): commits, from the callback too, are refused, what
// a cooperative member kept is reported lost after the callback returns,
// and the member joins again afterwards.
func (m *Machine) onRevokeTimeout(fx *Effects) {
	if m.waitToken == 0 || m.revoking == nil {
		return
	}
	m.revoking = nil
	if m.phase == Closing {
		// Closing goes on once the callback returns, without the
		// generation: nothing is committed, and the member leaves.
		m.generation = assignor.DefaultGeneration
		fx.cancel(TimerHeartbeat)
		m.hbID = 0
		return
	}
	m.followUp = false
	m.reset(fx, m.cfg.InstanceID != "")
	if m.phase != Discovering {
		m.phase = Preparing
	}
	m.retryWhat = retryNone
	m.waitThen = afterJoin
}

// OnCallbackDone reports that the callback with token returned.
func (m *Machine) OnCallbackDone(now time.Time, token uint64, fx *Effects) {
	m.now = now
	if m.phase == Stopped || token == 0 || token != m.waitToken {
		return
	}
	m.waitToken = 0
	if m.revoking != nil {
		m.revoking = nil
		fx.cancel(TimerRevoke)
	}
	then := m.waitThen
	m.waitThen = afterNothing
	switch then {
	case afterJoin:
		if m.phase == Discovering {
			m.resume = Joining
			return
		}
		m.sendJoin(fx)
	case afterSync:
		m.assign(fx)
	case afterClose:
		m.closeStep(fx)
	}
}
