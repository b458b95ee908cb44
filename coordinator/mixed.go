package coordinator

import (
	"time"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Mixed-assignor groups (Config.MixedAssignors; see the package doc): a
// "consumer" group whose members list only built-in assignors admits a member
// whose list shares nothing with the group. While no assignor is common to
// every member, the coordinator assigns the group itself.

// builtinAssignor reports whether name is one of Kafka's built-in assignors.
func builtinAssignor(name string) bool {
	switch name {
	case "range", "roundrobin", "sticky", "cooperative-sticky":
		return true
	}
	return false
}

func builtinOnly(protocols []*pb.Protocol) bool {
	if len(protocols) == 0 {
		return false
	}
	for _, p := range protocols {
		if !builtinAssignor(p.GetName()) {
			return false
		}
	}
	return true
}

// mixedAdmits is the admission of a joining member that shares no protocol
// with the group (supportsProtocols said no).
func (g *Group) mixedAdmits(protocolType string, protocols []*pb.Protocol) bool {
	if !g.cfg.MixedAssignors || protocolType != "consumer" || g.protocolType != "consumer" || !builtinOnly(protocols) {
		return false
	}
	for _, m := range g.order {
		if !builtinOnly(m.protocols) {
			return false
		}
	}
	return true
}

// isMixed reports whether the current generation is assigned by the
// coordinator: mixed-assignor groups are on and the selected protocol is not
// listed by every member.
func (g *Group) isMixed() bool {
	return g.cfg.MixedAssignors && g.protocolType == "consumer" && g.protocolName != nil &&
		g.protoCount[*g.protocolName] < g.members.len()
}

// mixedFallback is the protocol of a group where no protocol is common to all
// members: the leader's first (mixed groups only; "" otherwise).
func (g *Group) mixedFallback(ranking []*pb.Protocol) string {
	if !g.cfg.MixedAssignors || g.protocolType != "consumer" || len(ranking) == 0 {
		return ""
	}
	for _, m := range g.order {
		if !builtinOnly(m.protocols) {
			return ""
		}
	}
	return ranking[0].GetName()
}

// memberProtocol is the protocol name m is told: the group's, or in a mixed
// group m's own first choice when it does not list the group's (an eager
// client stays eager, a cooperative one cooperative).
func (g *Group) memberProtocol(m *member) string {
	name := g.protocolNameOr("")
	if !g.isMixed() {
		return name
	}
	for _, p := range m.protocols {
		if p.GetName() == name {
			return name
		}
	}
	if len(m.protocols) > 0 {
		return m.protocols[0].GetName()
	}
	return name
}

// memberProtocolOpt is memberProtocol as an optional wire field.
func (g *Group) memberProtocolOpt(m *member) *string {
	if g.protocolName == nil {
		return nil
	}
	name := g.memberProtocol(m)
	return &name
}

// memberMetadata is m's subscription under the protocol it is told.
func (g *Group) memberMetadata(m *member) []byte {
	return m.metadata(g.memberProtocol(m))
}

// mixedLeaderMembers is the member list the client named leader gets in a
// mixed group: itself only. Its plan is not used; the coordinator assigns.
func (g *Group) mixedLeaderMembers() []*pb.JoinGroupMember {
	l := g.members.get(g.leader)
	if l == nil {
		return []*pb.JoinGroupMember{}
	}
	return []*pb.JoinGroupMember{{MemberId: l.id, GroupInstanceId: cloneOpt(l.instanceID), Metadata: g.memberMetadata(l)}}
}

// mixedAssign computes the assignment of a mixed generation once the first
// member's SyncGroup arrives: cooperative-sticky over every member's
// subscription and owned partitions (the union over all its protocols). The
// ownership guard then applies as to any leader's plan.
func (g *Group) mixedAssign(now time.Time, fx *Effects) {
	if g.mixedGen == g.generation {
		return // computed already; the write is in flight
	}
	g.mixedGen = g.generation
	var d assignor.Decoder
	members := make([]assignor.Member, 0, len(g.order))
	topics := map[string]int32{}
	versions := map[string]int16{}
	for _, m := range g.order {
		am := assignor.Member{ID: m.id, Subscription: assignor.Subscription{Generation: assignor.DefaultGeneration}}
		if m.instanceID != nil {
			am.InstanceID = *m.instanceID
		}
		var s assignor.Subscription
		if d.DecodeSubscription(g.memberMetadata(m), &s) == nil {
			am.Subscription.Topics = append([]string(nil), s.Topics...)
			versions[m.id] = min(s.Version, assignor.MaxConsumerProtocolVersion)
		}
		for _, p := range m.protocols {
			var ps assignor.Subscription
			if d.DecodeSubscription(p.GetMetadata(), &ps) == nil {
				am.Subscription.Generation = max(am.Subscription.Generation, ps.Generation)
			}
		}
		byTopic := map[string][]int32{}
		for tp := range ownedClaims(&d, m) {
			byTopic[tp.topic] = append(byTopic[tp.topic], tp.partition)
		}
		for t, ps := range byTopic {
			am.Subscription.OwnedPartitions = append(am.Subscription.OwnedPartitions, assignor.TopicPartitions{Topic: t, Partitions: ps})
		}
		for _, t := range am.Subscription.Topics {
			if _, ok := topics[t]; !ok && g.cfg.Partitions != nil {
				if n, ok := g.cfg.Partitions(t); ok && n > 0 {
					topics[t] = n
				}
			}
		}
		members = append(members, am)
	}
	plan := assignor.CooperativeSticky().Balance(members, topics)
	out := make([]*pb.SyncGroupAssignment, 0, plan.Len())
	for _, ma := range plan.Members() {
		a := ma.Assignment()
		a.Version = versions[ma.MemberID]
		out = append(out, &pb.SyncGroupAssignment{MemberId: ma.MemberID, Assignment: a.AppendTo(nil)})
	}
	g.storeAssignment(now, out, fx)
}
