package coordinator

import (
	"slices"
	"time"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Records of a consumer group: what must be replicated so that another
// coordinator can continue the group with the same epochs and assignments.
// They mirror Kafka's consumer group records; RestoreConsumerGroup replays
// them. Deleted marks a tombstone of that member's record.
type ConsumerRecord interface{ consumerRecord() }

// ConsumerGroupEpochRecord sets the group epoch; Deleted removes it (the
// group stops being a consumer group).
type ConsumerGroupEpochRecord struct {
	Epoch   int32
	Deleted bool
}

// ConsumerMemberRecord is a member's subscription and settings.
type ConsumerMemberRecord struct {
	MemberID             string
	Deleted              bool
	InstanceID, RackID   string
	ClientID, ClientHost string
	RebalanceTimeout     time.Duration
	SubscribedTopicNames []string
	SubscribedTopicRegex string
	ServerAssignor       string
	// Classic is set for a member that uses the classic protocol.
	Classic *ClassicMemberMetadata
}

// ClassicMemberMetadata is what a classic member (JoinGroup, SyncGroup,
// Heartbeat, LeaveGroup) inside a consumer group sent in its JoinGroup.
type ClassicMemberMetadata struct {
	ProtocolType   string
	SessionTimeout time.Duration
	Protocols      []ClassicProtocol
}

// ClassicProtocol is one of a classic member's JoinGroup protocols.
type ClassicProtocol struct {
	Name     string
	Metadata []byte
}

// ConsumerTargetRecord is a member's target assignment.
type ConsumerTargetRecord struct {
	MemberID   string
	Deleted    bool
	Partitions []assignor.TopicPartitions
}

// ConsumerTargetEpochRecord sets the epoch of the target assignment;
// Deleted removes it.
type ConsumerTargetEpochRecord struct {
	Epoch   int32
	Deleted bool
}

// ClassicRecord is a classic group's record (a GroupRecord, or the
// MemberSessions that go with it) written in the same write as the
// consumer records of a conversion, so that the store never holds a group
// id with members of both types. ConsumerRecordsToProto passes it through;
// RestoreConsumerGroup ignores it.
type ClassicRecord struct{ Record *pb.Record }

// ConsumerCurrentRecord is a member's current assignment and epochs.
type ConsumerCurrentRecord struct {
	MemberID                 string
	Deleted                  bool
	MemberEpoch, PrevEpoch   int32
	State                    ConsumerMemberState
	Assigned, PendingRevoked []assignor.TopicPartitions
}

func (ConsumerGroupEpochRecord) consumerRecord()  {}
func (ConsumerMemberRecord) consumerRecord()      {}
func (ConsumerTargetRecord) consumerRecord()      {}
func (ConsumerTargetEpochRecord) consumerRecord() {}
func (ConsumerCurrentRecord) consumerRecord()     {}
func (ClassicRecord) consumerRecord()             {}

// RestoreConsumerGroup rebuilds a group from its records, in the order they
// were written. Timers are not replicated: the owner arms every member's
// session timer afresh (ArmAll) once it has taken the group over.
func RestoreConsumerGroup(id string, cfg *ConsumerConfig, topics map[string]int32, records []ConsumerRecord) *ConsumerGroup {
	g := NewConsumerGroup(id, cfg, topics)
	get := func(id string) *consumerMember {
		m := g.members[id]
		if m == nil {
			m = &consumerMember{id: id}
			g.members[id] = m
		}
		return m
	}
	for _, r := range records {
		switch r := r.(type) {
		case ConsumerGroupEpochRecord:
			g.epoch = r.Epoch
			if r.Deleted {
				g.epoch = 0
			}
		case ConsumerTargetEpochRecord:
			g.assignmentEpoch = r.Epoch
			if r.Deleted {
				g.assignmentEpoch = 0
			}
		case ConsumerMemberRecord:
			if r.Deleted {
				if m := g.members[r.MemberID]; m != nil && m.instanceID != "" && g.static[m.instanceID] == m.id {
					delete(g.static, m.instanceID)
				}
				delete(g.members, r.MemberID)
				continue
			}
			m := get(r.MemberID)
			m.instanceID, m.rackID, m.clientID, m.clientHost = r.InstanceID, r.RackID, r.ClientID, r.ClientHost
			m.rebalanceTimeout, m.topics, m.regex, m.assignor = r.RebalanceTimeout, slices.Clone(r.SubscribedTopicNames), r.SubscribedTopicRegex, r.ServerAssignor
			m.classic = classicFromRecord(r.Classic)
			if m.instanceID != "" {
				g.static[m.instanceID] = m.id
			}
		case ConsumerTargetRecord:
			if !r.Deleted {
				get(r.MemberID).target = newTPSet(r.Partitions)
			}
		case ConsumerCurrentRecord:
			if !r.Deleted {
				m := get(r.MemberID)
				m.epoch, m.previousEpoch, m.state = r.MemberEpoch, r.PrevEpoch, r.State
				m.assigned, m.pending = newTPSet(r.Assigned), newTPSet(r.PendingRevoked)
			}
		}
	}
	for _, m := range g.members {
		if m.regex != "" {
			g.compile(m.regex)
		}
		for _, s := range []tpSet{m.assigned, m.pending} {
			s.each(func(k tpKey) { g.owners[k] = partitionOwner{member: m.id, epoch: m.epoch} })
		}
	}
	g.restoreResolved()
	g.sig = g.subscribedSignature()
	return g
}

// ArmAll arms every member's session timer (and the rebalance timer of
// members that are revoking) as if each had just heartbeated, and a group
// with regexes resolves them at once (consumer_regex.go); the owner calls
// it after RestoreConsumerGroup.
func (g *ConsumerGroup) ArmAll(now time.Time, fx *ConsumerEffects) {
	for _, id := range g.memberIDs() {
		m := g.members[id]
		g.touchSession(m, now, fx)
		if m.state == MemberUnrevokedPartitions {
			m.revokeBefore = now.Add(m.rebalanceTimeout)
			fx.arm(ConsumerTimerRebalance, m.id, m.rebalanceTimeout)
		}
	}
	if g.hasRegexes() {
		g.requestResolution(now, fx)
	}
}

func (g *ConsumerGroup) writeMember(m *consumerMember, fx *ConsumerEffects) {
	fx.record(ConsumerMemberRecord{
		MemberID: m.id, InstanceID: m.instanceID, RackID: m.rackID, ClientID: m.clientID, ClientHost: m.clientHost,
		RebalanceTimeout: m.rebalanceTimeout, SubscribedTopicNames: slices.Clone(m.topics),
		SubscribedTopicRegex: m.regex, ServerAssignor: m.assignor, Classic: m.classic.record(),
	})
}

func (g *ConsumerGroup) writeCurrent(m *consumerMember, fx *ConsumerEffects) {
	fx.record(ConsumerCurrentRecord{
		MemberID: m.id, MemberEpoch: m.epoch, PrevEpoch: m.previousEpoch, State: m.state,
		Assigned: m.assigned.list(), PendingRevoked: m.pending.list(),
	})
}

func (g *ConsumerGroup) writeTombstones(id string, fx *ConsumerEffects) {
	fx.record(ConsumerCurrentRecord{MemberID: id, Deleted: true})
	fx.record(ConsumerTargetRecord{MemberID: id, Deleted: true})
	fx.record(ConsumerMemberRecord{MemberID: id, Deleted: true})
}

// tpSet is a set of partitions: topic -> sorted, distinct partitions. A nil
// tpSet is empty; tpSets are never shared between members.
type tpSet map[string][]int32

func newTPSet(l []assignor.TopicPartitions) tpSet {
	s := tpSet{}
	for _, tp := range l {
		for _, p := range tp.Partitions {
			s.add(tp.Topic, p)
		}
	}
	return s
}

func (s tpSet) has(topic string, p int32) bool {
	_, ok := slices.BinarySearch(s[topic], p)
	return ok
}

func (s tpSet) add(topic string, p int32) {
	ps := s[topic]
	i, ok := slices.BinarySearch(ps, p)
	if !ok {
		s[topic] = slices.Insert(ps, i, p)
	}
}

func (s tpSet) len() int {
	n := 0
	for _, ps := range s {
		n += len(ps)
	}
	return n
}

// each calls f for every partition, in (topic, partition) order.
func (s tpSet) each(f func(tpKey)) {
	for _, t := range s.topicNames() {
		for _, p := range s[t] {
			f(tpKey{t, p})
		}
	}
}

func (s tpSet) topicNames() []string {
	ts := make([]string, 0, len(s))
	for t, ps := range s {
		if len(ps) > 0 {
			ts = append(ts, t)
		}
	}
	slices.Sort(ts)
	return ts
}

// list returns s as a sorted list; an empty set gives a non-nil empty list.
func (s tpSet) list() []assignor.TopicPartitions {
	out := []assignor.TopicPartitions{}
	for _, t := range s.topicNames() {
		out = append(out, assignor.TopicPartitions{Topic: t, Partitions: slices.Clone(s[t])})
	}
	return out
}

// filter returns the partitions of s for which keep is true.
func (s tpSet) filter(keep func(tpKey) bool) tpSet {
	out := tpSet{}
	s.each(func(k tpKey) {
		if keep(k) {
			out.add(k.topic, k.partition)
		}
	})
	return out
}

func (s tpSet) equal(o tpSet) bool {
	if s.len() != o.len() {
		return false
	}
	for t, ps := range s {
		if !slices.Equal(ps, o[t]) && len(ps) > 0 {
			return false
		}
	}
	return true
}

// intersects reports whether s and o share a partition.
func (s tpSet) intersects(o tpSet) bool {
	for t, ps := range s {
		for _, p := range ps {
			if o.has(t, p) {
				return true
			}
		}
	}
	return false
}
