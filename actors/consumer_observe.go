package actors

import (
	"cmp"
	"slices"

	"github.com/cohort-coord/cohort/assignor"
	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// What operators see of a consumer group (KIP-848): its group epoch stands
// for a generation, and a rebalance is the time from a group epoch bump
// until every member holds its target again (Stable) or none is left.

// Consumer group states, as ConsumerGroupDescribe and ListGroups name them.
const (
	consumerStable = "Stable"
	consumerEmpty  = "Empty"
)

// consumerCause is the cause a ConsumerGroupHeartbeat gives a rebalance it
// starts.
func consumerCause(m *pb.ConsumerGroupHeartbeatRequest) string {
	switch m.GetMemberEpoch() {
	case coordinator.EpochJoin:
		return CauseJoin
	case coordinator.EpochLeave, coordinator.EpochStaticLeave:
		return CauseLeave
	}
	return CauseMetadata
}

// publishConsumerView is publishView for a consumer group.
func (a *groupActor) publishConsumerView(cg *coordinator.ConsumerGroup) {
	o := a.env.observer
	t := &a.track
	st, epoch, n := cg.State(), cg.Epoch(), cg.NumMembers()
	if t.seen && st == t.consumerState && epoch == t.generation && n == t.members {
		return
	}
	// The first view of the group as a consumer group (it was created, or
	// loaded, or converted) is the baseline of its first rebalance.
	first := t.consumerState == ""
	now := a.env.clock.Now()
	settled := st == consumerStable || st == consumerEmpty
	if !settled && !t.rebalancing {
		t.rebalancing, t.started, t.startCause = true, now, t.cause
		if t.startCause == "" || t.startCause == causeRetention {
			t.startCause = CauseEnforced
		}
	}
	view := GroupView{ID: a.id, Type: "consumer", State: st, ProtocolType: "consumer", Protocol: cg.AssignorName(),
		Generation: epoch, AssignmentEpoch: cg.AssignmentEpoch(), MemberCount: n}
	var done *Rebalance
	if t.rebalancing && settled {
		t.rebalancing = false
		r := Rebalance{Generation: epoch, State: st, Cause: t.startCause, Started: t.started, Completed: now}
		cur := consumerBaseline(cg)
		r.Joined, r.Left = diffMembers(t.last, cur)
		r.Moved = moves(t.last, cur)
		t.last = cur
		done = &r
		o.rebalances.WithLabelValues(r.Cause).Inc()
		o.durations.WithLabelValues(r.Cause).Observe(r.Duration().Seconds())
	}
	if first && settled {
		t.last = consumerBaseline(cg)
	}
	t.seen, t.consumerState, t.generation, t.members = true, st, epoch, n
	o.store(a.id, view, done)
}

// consumerBaseline is what each member of a consumer group holds, as the
// rebalance diffs read it (a ConsumerProtocol assignment per member).
func consumerBaseline(cg *coordinator.ConsumerGroup) []memberAssignment {
	members := cg.Members()
	out := make([]memberAssignment, 0, len(members))
	for _, m := range members {
		a := assignor.Assignment{Topics: m.Assigned}
		out = append(out, memberAssignment{id: m.MemberID, assignment: a.AppendTo(nil)})
	}
	return out
}

// consumerMembersOf lists a ConsumerGroupDescribe answer's members, sorted
// by member id (nil d: none).
func consumerMembersOf(d *pb.ConsumerGroupDescribeResponse) []MemberView {
	out := make([]MemberView, 0, len(d.GetMembers()))
	for _, m := range d.GetMembers() {
		held := assignor.Assignment{Topics: topicPartitionsOf(m.GetAssignment())}
		out = append(out, MemberView{MemberID: m.GetMemberId(), InstanceID: m.GetInstanceId(), ClientID: m.GetClientId(), ClientHost: m.GetClientHost(),
			assignment: held.AppendTo(nil), MemberEpoch: m.GetMemberEpoch(), Reconciliation: m.GetState(), Target: partitionMap(m.GetTargetAssignment())})
	}
	slices.SortFunc(out, func(a, b MemberView) int { return cmp.Compare(a.MemberID, b.MemberID) })
	return out
}

func topicPartitionsOf(l []*pb.TopicPartitions) []assignor.TopicPartitions {
	out := make([]assignor.TopicPartitions, 0, len(l))
	for _, tp := range l {
		out = append(out, assignor.TopicPartitions{Topic: tp.GetName(), Partitions: tp.GetPartitions()})
	}
	return out
}

func partitionMap(l []*pb.TopicPartitions) map[string][]int32 {
	out := make(map[string][]int32, len(l))
	for _, tp := range l {
		ps := slices.Clone(tp.GetPartitions())
		slices.Sort(ps)
		out[tp.GetName()] = ps
	}
	return out
}
