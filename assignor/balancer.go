package assignor

// RebalanceProtocol is a rebalance protocol an assignor supports, with
// Kafka's ids: EAGER is 0 and COOPERATIVE is 1.
type RebalanceProtocol int8

const (
	// Eager: members revoke everything before joining.
	Eager RebalanceProtocol = 0
	// Cooperative: members keep what they own across a rebalance and only
	// revoke what the new assignment takes away (KIP-429).
	Cooperative RebalanceProtocol = 1
)

func (p RebalanceProtocol) String() string {
	switch p {
	case Eager:
		return "EAGER"
	case Cooperative:
		return "COOPERATIVE"
	}
	return "UNKNOWN"
}

// Member is one group member as the leader sees it: its ids and its decoded
// subscription.
type Member struct {
	// ID is the member id. Members with duplicate ids are tolerated: the first
	// one in input order is kept and the others are ignored.
	ID string
	// InstanceID is the group.instance.id of a static member, or "" for a
	// dynamic member. Static members sort before dynamic ones.
	InstanceID   string
	Subscription Subscription
}

// MemberAssignment is one member's share of a plan.
type MemberAssignment struct {
	MemberID string
	// Topics are sorted by topic name, partitions in ascending order, and
	// only topics with at least one partition appear.
	Topics []TopicPartitions
}

// Assignment returns a version 3 ConsumerProtocol assignment for m.
func (m *MemberAssignment) Assignment() Assignment {
	return Assignment{Version: MaxConsumerProtocolVersion, Topics: m.Topics}
}

// PartitionRacks gives, per topic, the racks of all replicas of each
// partition: PartitionRacks[topic][partition] lists racks. It enables
// rack-aware placement (KIP-881) when members also send racks. Partitions
// beyond the end of a topic's slice have no known racks.
type PartitionRacks map[string][][]string

// MemberState is what a member knows about itself when it joins: what it
// subscribes to, what it owns, the generation it last synced in and its rack.
type MemberState struct {
	Topics     []string
	Owned      []TopicPartitions
	Generation int32
	Rack       string
}

// Balancer is a partition assignment strategy of the "consumer" protocol
// type, modelled on franz-go's kgo.GroupBalancer. Members use ProtocolName,
// SupportedProtocols and Metadata to build their JoinGroup protocols; the
// leader decodes the members' subscriptions and calls Balance.
//
// Implementations are stateless and safe for concurrent use.
type Balancer interface {
	// ProtocolName is the assignor name sent in JoinGroup, e.g. "range".
	ProtocolName() string
	// SupportedProtocols lists the rebalance protocols the assignor
	// supports, highest preference first, as Kafka's supportedProtocols.
	SupportedProtocols() []RebalanceProtocol
	// IsCooperative reports whether the assignor supports COOPERATIVE.
	IsCooperative() bool
	// Metadata returns the JoinGroup protocol metadata for a member: a
	// version 3 ConsumerProtocol subscription with the userData this
	// assignor expects. The output is deterministic for a given input.
	Metadata(m MemberState) []byte
	// Balance assigns the partitions of the subscribed topics among the
	// members. topics gives the partition count of each topic known to the
	// leader; subscribed topics that are missing or have no partitions are
	// skipped. The plan has one entry per distinct member id, in the order
	// Kafka sorts members (static members by instance id, then dynamic
	// members by member id), and does not depend on the order of members.
	Balance(members []Member, topics map[string]int32) *Plan
	// BalanceRacks is Balance with replica racks for rack-aware placement.
	BalanceRacks(members []Member, topics map[string]int32, racks PartitionRacks) *Plan
}

// ByName returns the built-in balancer with the given protocol name.
func ByName(name string) (Balancer, bool) {
	switch name {
	case "range":
		return Range(), true
	case "roundrobin":
		return RoundRobin(), true
	case "sticky":
		return Sticky(), true
	case "cooperative-sticky":
		return CooperativeSticky(), true
	}
	return nil, false
}

// CommonProtocol returns the rebalance protocol a consumer configured with
// the given balancers runs: the highest protocol supported by all of them, as
// Kafka's ConsumerCoordinator chooses it. ok is false if they share none.
func CommonProtocol(bs ...Balancer) (p RebalanceProtocol, ok bool) {
	if len(bs) == 0 {
		return Eager, false
	}
	common := map[RebalanceProtocol]bool{Eager: true, Cooperative: true}
	for _, b := range bs {
		has := map[RebalanceProtocol]bool{}
		for _, p := range b.SupportedProtocols() {
			has[p] = true
		}
		for p := range common {
			if !has[p] {
				delete(common, p)
			}
		}
	}
	switch {
	case common[Cooperative]:
		return Cooperative, true
	case common[Eager]:
		return Eager, true
	}
	return Eager, false
}

type eagerOnly struct{}

func (eagerOnly) SupportedProtocols() []RebalanceProtocol { return []RebalanceProtocol{Eager} }
func (eagerOnly) IsCooperative() bool                     { return false }

// simpleMetadata is the subscription of range and roundrobin: no userData and
// no owned partitions (an eager member has revoked everything before joining).
func simpleMetadata(m MemberState) []byte {
	s := NewSubscription(m.Topics, nil, m.Generation, m.Rack, nil)
	return s.AppendTo(nil)
}

type rangeBalancer struct{ eagerOnly }

// Range returns Kafka's "range" assignor: per topic, contiguous ranges over
// the topic's subscribers in member order, the first n%c members getting one
// extra partition. Eager only.
func Range() Balancer { return rangeBalancer{} }

func (rangeBalancer) ProtocolName() string          { return "range" }
func (rangeBalancer) Metadata(m MemberState) []byte { return simpleMetadata(m) }
func (b rangeBalancer) Balance(members []Member, topics map[string]int32) *Plan {
	return b.BalanceRacks(members, topics, nil)
}
func (rangeBalancer) BalanceRacks(members []Member, topics map[string]int32, racks PartitionRacks) *Plan {
	g := newGroup(members, topics, racks)
	defer g.release()
	return g.plan(g.assignRange())
}

type roundRobinBalancer struct{ eagerOnly }

// RoundRobin returns Kafka's "roundrobin" assignor: all partitions sorted by
// topic and partition, dealt over the members in member order with one
// circular iterator that skips non-subscribers. Eager only.
func RoundRobin() Balancer { return roundRobinBalancer{} }

func (roundRobinBalancer) ProtocolName() string          { return "roundrobin" }
func (roundRobinBalancer) Metadata(m MemberState) []byte { return simpleMetadata(m) }
func (b roundRobinBalancer) Balance(members []Member, topics map[string]int32) *Plan {
	return b.BalanceRacks(members, topics, nil)
}
func (roundRobinBalancer) BalanceRacks(members []Member, topics map[string]int32, _ PartitionRacks) *Plan {
	g := newGroup(members, topics, nil) // Kafka's roundrobin is not rack-aware
	defer g.release()
	return g.plan(g.assignRoundRobin())
}

type stickyBalancer struct{ cooperative bool }

// Sticky returns the eager "sticky" assignor: balanced first, then sticky.
// Members report their previous assignment and generation in userData.
func Sticky() Balancer { return stickyBalancer{} }

// CooperativeSticky returns "cooperative-sticky": the sticky assignment with
// the cooperative rule that a partition still owned by one member is never
// given to another in the same rebalance. Supports COOPERATIVE and EAGER.
func CooperativeSticky() Balancer { return stickyBalancer{cooperative: true} }

func (s stickyBalancer) ProtocolName() string {
	if s.cooperative {
		return "cooperative-sticky"
	}
	return "sticky"
}

func (s stickyBalancer) SupportedProtocols() []RebalanceProtocol {
	if s.cooperative {
		return []RebalanceProtocol{Cooperative, Eager}
	}
	return []RebalanceProtocol{Eager}
}

func (s stickyBalancer) IsCooperative() bool { return s.cooperative }

// Metadata follows Kafka's client: cooperative-sticky sends owned partitions
// and the generation in the subscription and the bare generation as
// userData; sticky sends the previous assignment and generation in userData
// (and nothing owned, since an eager member has revoked everything). A member
// that has never been assigned (no owned partitions and generation -1) sends
// null sticky userData.
func (s stickyBalancer) Metadata(m MemberState) []byte {
	if s.cooperative {
		sub := NewSubscription(m.Topics, m.Owned, m.Generation, m.Rack, AppendCooperativeUserData(nil, m.Generation))
		return sub.AppendTo(nil)
	}
	var ud []byte
	if len(m.Owned) > 0 || m.Generation != DefaultGeneration {
		tmp := NewSubscription(nil, m.Owned, 0, "", nil)
		u := StickyUserData{Owned: tmp.OwnedPartitions, Generation: m.Generation}
		ud = u.AppendTo(nil)
	}
	sub := NewSubscription(m.Topics, nil, m.Generation, m.Rack, ud)
	return sub.AppendTo(nil)
}

func (s stickyBalancer) Balance(members []Member, topics map[string]int32) *Plan {
	return s.BalanceRacks(members, topics, nil)
}

func (s stickyBalancer) BalanceRacks(members []Member, topics map[string]int32, racks PartitionRacks) *Plan {
	g := newGroup(members, topics, racks)
	defer g.release()
	return g.plan(g.assignSticky(s.cooperative))
}
