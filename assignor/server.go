package assignor

import (
	"slices"
	"strings"
)

// Server-side assignors of the consumer group protocol (KIP-848): the
// coordinator, not a group leader, computes every member's target
// assignment. Two are built in, under the names clients send in
// ConsumerGroupHeartbeat.ServerAssignor:
//
//   - "uniform" (the default): every two members subscribed to the same
//     topics hold counts that differ by at most one, and a member keeps the
//     partitions of its previous target where that balance allows;
//   - "range": per topic, its subscribers (static members first by instance
//     id, then the others by member id) take contiguous ranges, the first
//     n mod c one partition more; recomputed from scratch, so members with
//     the same subscription get the same partition numbers of every topic of
//     equal size (co-partitioning).
//
// Both are pure functions of their input: members in the order given (the
// caller passes a deterministic order), topics keyed by an opaque string
// (name or id), nothing from map iteration order reaches the result.

// ServerMember is one member as a server assignor sees it.
type ServerMember struct {
	ID         string
	InstanceID string // "" for a dynamic member
	// Topics the member subscribes to (names and resolved regex topics).
	// Topics absent from the partition counts are ignored.
	Topics []string
	// Current is the member's previous target assignment; uniform keeps what
	// it can of it. Partitions of unknown topics, out of range or claimed by
	// an earlier member are ignored.
	Current []TopicPartitions
}

// ServerAssignor computes target assignments of a consumer group.
type ServerAssignor interface {
	// Name is the name clients use in ServerAssignor.
	Name() string
	// Assign returns one assignment per member, in the members' order, each
	// sorted by topic with sorted partitions. topics maps every existing topic
	// to its partition count.
	Assign(members []ServerMember, topics map[string]int32) [][]TopicPartitions
}

// ServerAssignors are the built-in server assignors, the default first.
func ServerAssignors() []ServerAssignor { return []ServerAssignor{Uniform(), ServerRange()} }

// ServerAssignorByName returns the built-in server assignor of that name.
func ServerAssignorByName(name string) (ServerAssignor, bool) {
	for _, a := range ServerAssignors() {
		if a.Name() == name {
			return a, true
		}
	}
	return nil, false
}

// serverSpec is the dense form of one call: topics 0..T-1 in name order,
// partition p of topic t at global index base[t]+p.
type serverSpec struct {
	topics []string
	counts []int32
	base   []int32 // len T+1
	index  map[string]int32
	subs   [][]int32 // per member: subscribed topic indices, sorted, unique
	// homogeneous: every member subscribes to the same topic set.
	homogeneous bool
}

func newServerSpec(members []ServerMember, topics map[string]int32) *serverSpec {
	s := &serverSpec{index: map[string]int32{}}
	seen := map[string]bool{}
	var last []string
	for i, m := range members {
		if i > 0 && slices.Equal(m.Topics, last) {
			continue // the common case: members share one subscription
		}
		last = m.Topics
		for _, t := range m.Topics {
			if n, ok := topics[t]; ok && n > 0 && !seen[t] {
				seen[t] = true
				s.topics = append(s.topics, t)
			}
		}
	}
	slices.Sort(s.topics)
	s.base = make([]int32, len(s.topics)+1)
	s.counts = make([]int32, len(s.topics))
	for i, t := range s.topics {
		s.index[t] = int32(i)
		s.counts[i] = topics[t]
		s.base[i+1] = s.base[i] + topics[t]
	}
	s.subs = make([][]int32, len(members))
	s.homogeneous = true
	for i, m := range members {
		if i > 0 && slices.Equal(m.Topics, members[i-1].Topics) {
			s.subs[i] = s.subs[i-1] // shared, never modified
			continue
		}
		sub := make([]int32, 0, len(m.Topics))
		for _, t := range m.Topics {
			if ti, ok := s.index[t]; ok {
				sub = append(sub, ti)
			}
		}
		slices.Sort(sub)
		sub = slices.Compact(sub)
		s.subs[i] = sub
		if i > 0 && !slices.Equal(sub, s.subs[0]) {
			s.homogeneous = false
		}
	}
	return s
}

func (s *serverSpec) partitions() int32 { return s.base[len(s.topics)] }

// current returns member m's previous partitions as sorted global indices,
// keeping only subscribed topics and partitions in range.
func (s *serverSpec) current(m ServerMember, sub []int32, dst []int32) []int32 {
	dst = dst[:0]
	for _, tp := range m.Current {
		ti, ok := s.index[tp.Topic]
		if !ok {
			continue
		}
		if _, subscribed := slices.BinarySearch(sub, ti); !subscribed {
			continue
		}
		for _, p := range tp.Partitions {
			if p >= 0 && p < s.counts[ti] {
				dst = append(dst, s.base[ti]+p)
			}
		}
	}
	slices.Sort(dst)
	return slices.Compact(dst)
}

// result turns an owner per global partition into per-member assignments.
func (s *serverSpec) result(owner []int32, members int) [][]TopicPartitions {
	out := make([][]TopicPartitions, members)
	t := int32(0)
	for g, o := range owner {
		if o < 0 {
			continue
		}
		for s.base[t+1] <= int32(g) {
			t++
		}
		a := out[o]
		if n := len(a); n == 0 || a[n-1].Topic != s.topics[t] {
			a = append(a, TopicPartitions{Topic: s.topics[t]})
		}
		last := &a[len(a)-1]
		last.Partitions = append(last.Partitions, int32(g)-s.base[t])
		out[o] = a
	}
	return out
}

type serverRange struct{}

// ServerRange is KIP-848's server-side "range" assignor.
func ServerRange() ServerAssignor { return serverRange{} }

func (serverRange) Name() string { return "range" }

func (serverRange) Assign(members []ServerMember, topics map[string]int32) [][]TopicPartitions {
	s := newServerSpec(members, topics)
	order := make([]int32, len(members))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int {
		ma, mb := &members[a], &members[b]
		if (ma.InstanceID != "") != (mb.InstanceID != "") {
			if ma.InstanceID != "" {
				return -1
			}
			return 1
		}
		if c := strings.Compare(ma.InstanceID, mb.InstanceID); c != 0 {
			return c
		}
		return strings.Compare(ma.ID, mb.ID)
	})
	subscribers := make([][]int32, len(s.topics))
	for _, m := range order {
		for _, t := range s.subs[m] {
			subscribers[t] = append(subscribers[t], m)
		}
	}
	owner := make([]int32, s.partitions())
	for i := range owner {
		owner[i] = -1
	}
	for t, subs := range subscribers {
		c := int32(len(subs))
		if c == 0 {
			continue
		}
		n := s.counts[t]
		q, r := n/c, n%c
		next := s.base[t]
		for i, m := range subs {
			take := q
			if int32(i) < r {
				take++
			}
			for range take {
				owner[next] = m
				next++
			}
		}
	}
	return s.result(owner, len(members))
}
