package coordinator

import (
	"slices"
	"strings"
	"time"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// The takeover window: a deliberate improvement on Kafka.
//
// When a coordinator takes over a group (it is restored from the replicated
// store after a failover or a restart), its members still hold the
// generation and the partitions they had. Many clients react to the loss of
// their old coordinator by sending JoinGroup with their member id again
// (franz-go ends its session on a heartbeat that cannot be delivered,
// sarama after three failed heartbeats). Under Kafka's rules that rejoin
// starts a rebalance whenever the member is the group's leader, or its
// protocol metadata differs in any byte from what the coordinator holds,
// and a restored member holds only the selected protocol's metadata, so
// almost every rejoin after a failover is a rebalance.
//
// In the window (from the takeover until the member's first Heartbeat,
// SyncGroup or JoinGroup to this coordinator, at most one session timeout),
// a member that rejoins unchanged gets the current generation back:
//   - its protocol list still names the group's selected protocol, whose
//     metadata is byte-equal to the stored one or, for protocol type
//     "consumer", subscribes to the same topics with the same rack and
//     claims to own only partitions it was assigned in this generation (the
//     owned list and the generation inside the subscription change as a
//     matter of course and say nothing about the subscription);
//   - every topic the group subscribes to still has the partition count
//     this generation's assignments cover (Config.Partitions);
//   - no rebalance was under way when the previous coordinator stopped (the
//     generation floor equals the generation).
//
// The group's leader gets the member list as well, each subscription as
// the member would send it now (takeoverMemberMetadata); on JoinGroup v9+ with
// SkipAssignment set (KIP-814's answer to a static leader that rejoins), so
// it knows it leads and checks its plan without the group rebalancing. An
// older leader is told it leads and gets the member list: it computes a
// plan, and its SyncGroup, which a Stable group answers with the stored
// assignment, changes nothing. It keeps its leader's duties (watching every
// subscribed topic's metadata) instead of being told another member leads,
// which is what Kafka does for a static leader before KIP-814 and which
// leaves the group without a leader that notices partition changes.
//
// A member heard through a peer (a node that handed the group's shard over
// and forwards what the member still sends it) is connected to that node:
// if it fails, the member loses its connection as in a failover, though this
// coordinator did not fail. Its window stays open for a session timeout
// after each forwarded request (HeardThroughPeer).
//
// Outside the window, and for a rejoin that changed anything above, Kafka's
// rules apply unchanged: a leader's rejoin, a changed subscription or a
// changed partition count rebalances.

// openTakeoverWindow starts the window for every restored member.
func (g *Group) openTakeoverWindow(now time.Time) {
	if !g.windowAllowed() {
		return
	}
	g.takeover = make(map[string]time.Time, len(g.order))
	for _, m := range g.order {
		g.takeover[m.id] = now.Add(m.sessionTimeout())
	}
}

// windowAllowed reports whether the group may open a window now: it is on,
// and the group is Stable with no rebalance under way or due.
func (g *Group) windowAllowed() bool {
	return !g.cfg.DisableTakeoverWindow && g.state == Stable && g.floor == g.generation && !g.rebalancePending
}

// closeTakeover ends m's window: it has spoken to this coordinator.
func (g *Group) closeTakeover(id string) { delete(g.takeover, id) }

// HeardThroughPeer tells the group that member id's request, just handled,
// reached it through another coordinator node, which forwards to this one
// what its clients send for a group it handed over. The member is connected
// to that node, not to this one: should that node fail, the member loses
// its connection as it would in a failover, and rejoins here. So its
// window stays open, or opens, for a session timeout from now, on the
// window's usual terms (a Stable group with no rebalance under way). Call
// it after the request was handled, for every request but JoinGroup: a
// forwarded JoinGroup is the member's own decision, under Kafka's rules
// (close the window first with ForwardedJoin).
func (g *Group) HeardThroughPeer(now time.Time, id string) {
	m := g.members.get(id)
	if m == nil || !g.windowAllowed() {
		return
	}
	if g.takeover == nil {
		g.takeover = map[string]time.Time{}
	}
	g.takeover[id] = now.Add(m.sessionTimeout())
}

// ForwardedJoin tells the group that member id's JoinGroup, about to be
// handled, reached it through another coordinator node (see
// HeardThroughPeer): its connection did not break, so the rejoin is the
// member's own and the window does not apply to it.
func (g *Group) ForwardedJoin(id string) { g.closeTakeover(id) }

// TakeoverRejoins reports how many rejoins the takeover window answered
// with the current generation since the group was loaded.
func (g *Group) TakeoverRejoins() int { return g.takeoverRejoins }

// takeoverRejoin answers m's JoinGroup with the current generation when the
// window allows it; it reports whether it did.
func (g *Group) takeoverRejoin(now time.Time, m *member, req *pb.JoinGroupRequest, to ReplyTo, fx *Effects) bool {
	deadline, ok := g.takeover[m.id]
	if !ok {
		return false
	}
	g.closeTakeover(m.id)
	if g.state != Stable || now.After(deadline) || !g.unchangedRejoin(m, req.GetProtocols()) || !g.partitionsUnchanged() {
		return false
	}
	g.setProtocols(m, req.GetProtocols())
	g.armSession(now, m, m.sessionTimeout(), fx)
	leader := m.id == g.leader
	resp := g.joinResponse(m, false, leader && req.GetApiVersion() >= 9)
	if leader {
		resp.Members = g.takeoverMemberMetadata()
	}
	fx.reply(to, resp)
	g.takeoverRejoins++
	fx.event(Event{Kind: EventTakeoverRejoin, Generation: g.generation, Detail: m.id})
	return true
}

// takeoverMemberMetadata is the member list for a leader that rejoins in
// the window. The stored subscriptions are those the members joined this
// generation with: their owned partitions, generation and sticky userData
// describe the generation before, and a leader that computes its plan from
// them (franz-go does, to check the answer of a SkipAssignment join) would
// see partitions move that have not. So, for protocol type "consumer", each
// member's subscription is given as the member would send it now: owned
// partitions (when the subscription lists owned partitions or the protocol
// is cooperative) and sticky userData set to the member's assignment in
// this generation, and the generation fields set to this generation.
// Subscriptions that do not decode are sent as stored.
func (g *Group) takeoverMemberMetadata() []*pb.JoinGroupMember {
	out := g.currentMemberMetadata()
	if g.protocolType != "consumer" || g.isMixed() {
		// A mixed group's named leader sees only itself (mixed.go).
		return out
	}
	name := g.protocolNameOr("")
	for i, m := range g.order {
		if b, ok := g.refreshedSubscription(name, m); ok {
			out[i].Metadata = b
		}
	}
	return out
}

func (g *Group) refreshedSubscription(name string, m *member) ([]byte, bool) {
	s, err := assignor.DecodeSubscription(m.metadata(name))
	if err != nil {
		return nil, false
	}
	var cur []assignor.TopicPartitions
	if len(m.assignment) > 0 {
		a, err := assignor.DecodeAssignment(m.assignment)
		if err != nil {
			return nil, false
		}
		for _, tp := range a.Topics {
			ps := slices.Clone(tp.Partitions)
			slices.Sort(ps)
			cur = append(cur, assignor.TopicPartitions{Topic: tp.Topic, Partitions: ps})
		}
		slices.SortStableFunc(cur, func(a, b assignor.TopicPartitions) int { return strings.Compare(a.Topic, b.Topic) })
	}
	cooperative := name == "cooperative-sticky"
	if s.Version >= 1 && (len(s.OwnedPartitions) > 0 || cooperative) {
		s.OwnedPartitions = cur
	}
	if s.Version >= 2 {
		s.Generation = g.generation
	}
	if name == "sticky" || cooperative {
		switch {
		case len(s.UserData) == 4:
			// Java's cooperative-sticky: the generation alone.
			s.UserData = assignor.AppendCooperativeUserData(nil, g.generation)
		case len(s.UserData) > 4:
			// StickyAssignorUserData V1 (Java's sticky, franz-go's sticky
			// and cooperative-sticky): previous assignment and generation.
			// Rewritten only when it reads back byte-exact as that schema.
			var d assignor.Decoder
			u, err := d.DecodeStickyUserData(s.UserData)
			if err == nil && string(u.AppendTo(nil)) == string(s.UserData) {
				u.Owned, u.Generation = cur, g.generation
				s.UserData = u.AppendTo(nil)
			}
		}
	}
	return s.AppendTo(nil), true
}

// unchangedRejoin reports whether protocols say what m's stored metadata
// says (see the window's rules above).
func (g *Group) unchangedRejoin(m *member, protocols []*pb.Protocol) bool {
	name := g.memberProtocol(m)
	i := slices.IndexFunc(protocols, func(p *pb.Protocol) bool { return p.GetName() == name })
	if i < 0 {
		return false
	}
	next, cur := protocols[i].GetMetadata(), m.metadata(name)
	if string(next) == string(cur) {
		return true
	}
	if g.protocolType != "consumer" {
		return false
	}
	a, err := assignor.DecodeSubscription(next)
	if err != nil {
		return false
	}
	b, err := assignor.DecodeSubscription(cur)
	if err != nil {
		return false
	}
	if a.Rack != b.Rack || !sameTopics(a.Topics, b.Topics) {
		return false
	}
	if len(a.OwnedPartitions) == 0 {
		return true
	}
	if len(m.assignment) == 0 {
		return false
	}
	assigned, err := assignor.DecodeAssignment(m.assignment)
	if err != nil {
		return false
	}
	have := map[topicPartition]bool{}
	for _, tp := range assigned.Topics {
		for _, p := range tp.Partitions {
			have[topicPartition{tp.Topic, p}] = true
		}
	}
	for _, tp := range a.OwnedPartitions {
		for _, p := range tp.Partitions {
			if !have[topicPartition{tp.Topic, p}] {
				return false
			}
		}
	}
	return true
}

func sameTopics(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// partitionsUnchanged reports whether every subscribed topic still has the
// partitions this generation's assignments cover: exactly 0..n-1, where n
// is the topic's partition count now. Groups of other protocol types, and a
// coordinator without a topic catalog, have nothing to compare.
func (g *Group) partitionsUnchanged() bool {
	if g.protocolType != "consumer" || g.cfg.Partitions == nil {
		return true
	}
	if !g.subscribedKnown {
		return false
	}
	if g.covered == nil {
		covered := map[string]map[int32]bool{}
		for _, m := range g.order {
			if len(m.assignment) == 0 {
				continue
			}
			a, err := assignor.DecodeAssignment(m.assignment)
			if err != nil {
				return false
			}
			for _, tp := range a.Topics {
				set := covered[tp.Topic]
				if set == nil {
					set = map[int32]bool{}
					covered[tp.Topic] = set
				}
				for _, p := range tp.Partitions {
					set[p] = true
				}
			}
		}
		g.covered = covered
	}
	for topic := range g.subscribed {
		n, ok := g.cfg.Partitions(topic)
		set := g.covered[topic]
		if !ok || int(n) != len(set) {
			return false
		}
		for p := range set {
			if p < 0 || p >= n {
				return false
			}
		}
	}
	return true
}
