package actors

import (
	"cmp"
	"slices"
	"time"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// tracker is a group actor's record of what it last told the Observer.
type tracker struct {
	seen  bool // the Observer has a view of the group
	state coordinator.State
	// consumerState is a consumer group's state (generation is then its
	// group epoch).
	consumerState string
	generation    int32
	members       int
	// cause is why the input being handled may start a rebalance.
	cause string
	// The rebalance in progress: when it started and why.
	rebalancing bool
	started     time.Time
	startCause  string
	// last is the membership of the last generation recorded, sorted by
	// member id: the baseline of the next rebalance's Joined, Left and
	// Moved. It keeps only what that diff reads.
	last []memberAssignment
}

// memberAssignment is a member as the next rebalance's diff needs it: its
// id and its consumer-protocol assignment (both shared with the
// coordinator, never changed in place; nil for other protocols). It is 40
// bytes where a MemberView is 88, and one is kept per member of every group.
type memberAssignment struct {
	id         string
	assignment []byte
}

// causeOf is the cause a request would give a rebalance it starts.
func causeOf(g *coordinator.Group, req any) string {
	switch m := req.(type) {
	case *pb.JoinGroupRequest:
		if id := m.GetMemberId(); id != "" && g.HasMember(id) {
			return CauseMetadata
		}
		return CauseJoin
	case *pb.LeaveGroupRequest:
		return CauseLeave
	case *pb.ConsumerGroupHeartbeatRequest:
		return consumerCause(m)
	}
	return CauseEnforced
}

// observe counts the effects about to be executed and, when the group
// changed, updates its view and history. fx is the machine's output.
func (a *groupActor) observe(fx *coordinator.Effects) {
	o := a.env.observer
	if o == nil || a.g == nil {
		return
	}
	for _, r := range fx.Replies {
		if c, ok := r.Msg.(*pb.OffsetCommitResponse); ok {
			n := 0
			for _, t := range c.GetTopics() {
				for _, p := range t.GetPartitions() {
					if p.GetErrorCode() == coordinator.ErrNone {
						n++
					}
				}
			}
			if n > 0 {
				o.commits.Add(float64(n))
			}
		}
	}
	for _, p := range fx.Persists {
		n := 0
		for _, r := range p.Records {
			if r.GetOffsetTombstone() != nil {
				n++
			}
		}
		if n > 0 {
			if a.track.cause == causeRetention {
				o.expirations.Add(float64(n))
			} else {
				o.deletions.Add(float64(n))
			}
		}
	}
}

// causeRetention marks the offset-retention timer's input (not a rebalance
// cause).
const causeRetention = "retention"

// publishView updates the Observer after the effects of an input ran.
func (a *groupActor) publishView() {
	o := a.env.observer
	if o == nil || a.g == nil {
		return
	}
	if cg := a.g.Consumer(); cg != nil && a.g.State() != coordinator.Dead {
		a.publishConsumerView(cg)
		return
	}
	t := &a.track
	st, gen, n := a.g.State(), a.g.Generation(), a.g.NumMembers()
	if t.seen && st == t.state && gen == t.generation && n == t.members {
		return
	}
	now := a.env.clock.Now()
	inRebalance := st == coordinator.PreparingRebalance || st == coordinator.CompletingRebalance
	if inRebalance && !t.rebalancing {
		t.rebalancing, t.started, t.startCause = true, now, t.cause
		if t.startCause == "" || t.startCause == causeRetention {
			t.startCause = CauseEnforced
		}
	}
	if st == coordinator.Dead {
		o.forget(a.id)
		t.seen, t.state = true, st
		return
	}
	if t.seen && st == t.state && gen == t.generation && inRebalance {
		// Only the membership changed, in the middle of a rebalance: count
		// it, and describe the members when the rebalance ends.
		t.members = n
		o.mu.Lock()
		if v := o.groups[a.id]; v != nil {
			cp := *v
			cp.MemberCount = n
			o.groups[a.id] = &cp
		}
		o.mu.Unlock()
		return
	}
	view := GroupView{MemberCount: n, ID: a.id, Type: "classic", State: st.String(), ProtocolType: a.g.ProtocolType(), Protocol: a.g.ProtocolName(), Generation: gen}
	var done *Rebalance
	if t.rebalancing && (st == coordinator.Stable || st == coordinator.Empty) {
		t.rebalancing = false
		r := Rebalance{Generation: gen, State: st.String(), Cause: t.startCause, Started: t.started, Completed: now}
		cur := baselineOf(a.g)
		r.Joined, r.Left = diffMembers(t.last, cur)
		r.Moved = moves(t.last, cur)
		t.last = cur
		done = &r
		o.rebalances.WithLabelValues(r.Cause).Inc()
		o.durations.WithLabelValues(r.Cause).Observe(r.Duration().Seconds())
	}
	if !t.seen && !inRebalance {
		t.last = baselineOf(a.g) // loaded: the generation it had is the baseline
	}
	t.seen, t.state, t.generation, t.members = true, st, gen, n
	o.store(a.id, view, done)
}

// store keeps a group's new view with its history (that of the view it
// replaces, if of the same type), and the rebalance just done, if any.
func (o *Observer) store(id string, view GroupView, done *Rebalance) {
	o.mu.Lock()
	if prev := o.groups[id]; prev != nil && prev.Type == view.Type {
		view.History = prev.History
	}
	if done != nil {
		h := append(slices.Clone(view.History), *done)
		if len(h) > HistoryLength {
			h = h[len(h)-HistoryLength:]
		}
		view.History = h
	}
	o.groups[id] = &view
	o.mu.Unlock()
}

// membersOf lists a DescribeGroups answer's members, sorted by member id,
// with their assignments for the consumer protocol (nil d: none).
func membersOf(d *pb.DescribeGroupResponse) []MemberView {
	out := make([]MemberView, 0, len(d.GetMembers()))
	for _, m := range d.GetMembers() {
		out = append(out, MemberView{MemberID: m.GetMemberId(), InstanceID: m.GetGroupInstanceId(), ClientID: m.GetClientId(), ClientHost: m.GetClientHost(),
			assignment: consumerAssignment(d.GetProtocolType(), m.GetAssignment())})
	}
	slices.SortFunc(out, func(a, b MemberView) int { return cmp.Compare(a.MemberID, b.MemberID) })
	return out
}

// consumerAssignment is a member's assignment as the views keep it: the
// consumer protocol's, nil for other protocols and for none.
func consumerAssignment(protocolType string, assignment []byte) []byte {
	if protocolType != "consumer" || len(assignment) == 0 {
		return nil
	}
	return assignment
}
