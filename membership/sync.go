package membership

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// answeredIfOwned re-arms the session timer after a failed join, counting
// conservatively from now.
func (m *Machine) answeredIfOwned(fx *Effects) {
	if len(m.owned) > 0 {
		fx.arm(TimerSession, m.cfg.SessionTimeout)
	}
}

// assign runs the leader's assignor (asking for metadata first when needed)
// and sends SyncGroup; a follower syncs straight away.
func (m *Machine) assign(fx *Effects) {
	if !m.leader || m.members == nil {
		m.sendSync(fx, nil)
		return
	}
	var missing []string
	for _, t := range m.subscribedTopics() {
		if _, ok := m.cfg.Partitions[t]; !ok {
			missing = append(missing, t)
		}
	}
	m.metadataTopics = missing
	if len(missing) == 0 {
		m.sendSync(fx, m.balance(nil))
		return
	}
	m.phase = Assigning
	m.metaID = m.send(fx, &MetadataRequest{Topics: missing})
}

// subscribedTopics is the union of the members' subscriptions, sorted.
func (m *Machine) subscribedTopics() []string {
	var ts []string
	for _, jm := range m.members {
		s, err := assignor.DecodeSubscription(jm.GetMetadata())
		if err != nil {
			continue
		}
		ts = append(ts, s.Topics...)
	}
	slices.Sort(ts)
	return slices.Compact(ts)
}

func (m *Machine) onMetadata(r *MetadataResponse, err error, fx *Effects) {
	if m.phase == Stable {
		m.onMetadataCheck(r, err, fx)
		return
	}
	if m.phase != Assigning {
		return
	}
	if err != nil || r == nil {
		m.retryAfter(fx, retryMetadata)
		return
	}
	m.assignedFrom = map[string]int32{}
	for t, n := range r.Partitions {
		if _, sized := m.cfg.Partitions[t]; !sized {
			m.assignedFrom[t] = n
		}
	}
	m.sendSync(fx, m.balance(r.Partitions))
}

// onMetadataCheck: the leader's periodic look at the partition counts it
// assigned from. A changed count (a topic grew, or appeared) means a new
// assignment: rejoin, as Kafka's leader does.
func (m *Machine) onMetadataCheck(r *MetadataResponse, err error, fx *Effects) {
	if err == nil && r != nil && m.leader {
		for t, n := range r.Partitions {
			if old, ok := m.assignedFrom[t]; ok && old != n || !ok && n > 0 && m.subscribedMissing(t) {
				m.rejoinReason = fmt.Sprintf("partitions of %s changed from %d to %d", t, old, n)
				m.startJoin(fx)
				return
			}
		}
	}
	if m.leader && len(m.metadataTopics) > 0 {
		fx.arm(TimerMetadata, m.cfg.MetadataMaxAge)
	}
}

// subscribedMissing reports whether t was subscribed but unknown (so
// unassigned) when the leader assigned.
func (m *Machine) subscribedMissing(t string) bool {
	return slices.Contains(m.metadataTopics, t) && m.assignedFrom[t] == 0
}

// balance runs the selected assignor over the members' subscriptions.
func (m *Machine) balance(extra map[string]int32) []*pb.SyncGroupAssignment {
	var bal assignor.Balancer
	for _, b := range m.cfg.Balancers {
		if b.ProtocolName() == m.protocol {
			bal = b
		}
	}
	if bal == nil {
		return nil // cannot happen: the group selects only protocols every member listed
	}
	counts := map[string]int32{}
	for t, n := range extra {
		counts[t] = n
	}
	for t, n := range m.cfg.Partitions {
		counts[t] = n
	}
	in := make([]assignor.Member, 0, len(m.members))
	var d assignor.Decoder
	for _, jm := range m.members {
		var s assignor.Subscription
		if err := d.DecodeSubscription(jm.GetMetadata(), &s); err != nil {
			s = assignor.Subscription{} // an undecodable member gets nothing
		}
		in = append(in, assignor.Member{ID: jm.GetMemberId(), InstanceID: jm.GetGroupInstanceId(), Subscription: s})
	}
	plan := bal.Balance(in, counts)
	enc := plan.Encode()
	out := make([]*pb.SyncGroupAssignment, plan.Len())
	for i := range out {
		out[i] = &pb.SyncGroupAssignment{MemberId: plan.MemberID(i), Assignment: enc[i]}
	}
	return out
}

func (m *Machine) sendSync(fx *Effects, assignments []*pb.SyncGroupAssignment) {
	m.phase = Syncing
	m.retryWhat = retryNone
	fx.cancel(TimerSession)
	req := &pb.SyncGroupRequest{
		GroupId:      m.cfg.Group,
		GenerationId: m.generation,
		MemberId:     m.memberID,
		Assignments:  assignments,
	}
	pt, pn := "consumer", m.protocol
	req.ProtocolType, req.ProtocolName = &pt, &pn
	if m.cfg.InstanceID != "" {
		req.GroupInstanceId = &m.cfg.InstanceID
	}
	m.members = nil
	m.syncID = m.send(fx, req)
}

func (m *Machine) onSync(r *pb.SyncGroupResponse, err error, fx *Effects) {
	code := int16(r.GetErrorCode()) // 0 for a nil answer
	if err != nil || r == nil || coordinatorMoved(code) {
		m.answeredIfOwned(fx)
		m.rediscover(fx, Joining)
		return
	}
	switch {
	case code == 0:
	case code == kerr.RebalanceInProgress.Code:
		m.answered(fx)
		m.startJoin(fx)
		return
	case code == kerr.UnknownMemberID.Code:
		m.resetAndRejoin(fx, false)
		return
	case code == kerr.IllegalGeneration.Code:
		m.resetAndRejoin(fx, true)
		return
	case code == kerr.FencedInstanceID.Code:
		m.stop(fx, fmt.Errorf("%w (sync): %w", ErrFenced, kerr.FencedInstanceID))
		return
	default:
		m.answeredIfOwned(fx)
		m.phase = Joining
		m.retryAfter(fx, retryJoin)
		return
	}
	m.answered(fx)
	m.prevGeneration = assignor.DefaultGeneration // the generation is written
	a, derr := assignor.DecodeAssignment(r.GetAssignment())
	if derr != nil && len(r.GetAssignment()) > 0 {
		// Not an assignment we can read: join again (Kafka requests a rejoin).
		m.phase = Joining
		m.retryAfter(fx, retryJoin)
		return
	}
	m.phase = Stable
	if m.leader && len(m.metadataTopics) > 0 {
		fx.arm(TimerMetadata, m.cfg.MetadataMaxAge)
	}
	next := setOf(a.Topics)
	subscribed := map[string]bool{}
	for _, t := range m.cfg.Topics {
		subscribed[t] = true
	}
	for tp := range next {
		if !subscribed[tp.Topic] {
			delete(next, tp) // never take a topic this member does not subscribe to
		}
	}
	revoked := m.owned.minus(next)
	added := next.minus(m.owned)
	m.owned = next
	if len(revoked) > 0 {
		// Cooperative: give up what moved, then join the follow-up round.
		m.phase = Preparing
		m.revoke(fx, revoked, afterJoin)
		m.followUp = true
	}
	m.callback(fx, Assigned, added, false)
	if m.phase == Stable && m.rejoinReason != "" {
		m.startJoin(fx) // EnforceRebalance during the rebalance
	}
}
