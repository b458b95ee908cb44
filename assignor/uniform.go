package assignor

import (
	"cmp"
	"slices"
)

type uniform struct{}

// Uniform is KIP-848's default server-side assignor, "uniform".
//
// Homogeneous groups (every member subscribes to the same topics): with P
// partitions and M members each member gets q = P/M or q+1, and exactly
// P mod M members get q+1. Walking the members in order, each keeps up to q
// of its previous partitions; then members with more previous partitions
// keep one more while q+1 slots remain; the partitions left over are dealt
// in (topic, partition) order, first to members below q, then one each to
// members at q while q+1 slots remain.
//
// Heterogeneous groups: each member keeps its previous partitions of topics
// it still subscribes to; the rest are given topic by topic (topics with the
// most partitions per subscriber first, then the fewest subscribers, then
// by name), each to the least loaded subscriber; then partitions move from a
// member to a less loaded subscriber of the same topic while that narrows a
// gap of two or more, preferring the partition's previous owner as the
// receiver. When no move is left, no partition's owner holds more than one
// partition over any other subscriber of that partition's topic.
func Uniform() ServerAssignor { return uniform{} }

func (uniform) Name() string { return "uniform" }

func (uniform) Assign(members []ServerMember, topics map[string]int32) [][]TopicPartitions {
	s := newServerSpec(members, topics)
	owner := make([]int32, s.partitions())
	for i := range owner {
		owner[i] = -1
	}
	if len(members) > 0 && len(owner) > 0 {
		if s.homogeneous {
			s.uniformHomogeneous(members, owner)
		} else {
			s.uniformHeterogeneous(members, owner)
		}
	}
	return s.result(owner, len(members))
}

func (s *serverSpec) uniformHomogeneous(members []ServerMember, owner []int32) {
	M := int32(len(members))
	if len(s.subs[0]) == 0 {
		return // nobody subscribes to an existing topic
	}
	P := s.partitions()
	q, extra := P/M, P%M
	count := make([]int32, M)
	// spare[m]: previous partitions of m beyond its quota, a candidate for
	// its q+1 slot.
	spare := make([][]int32, M)
	var buf []int32
	for m := range M {
		buf = s.current(members[m], s.subs[m], buf)
		for _, g := range buf {
			if owner[g] >= 0 {
				continue
			}
			if count[m] < q {
				owner[g] = m
				count[m]++
			} else if len(spare[m]) < 1 {
				spare[m] = append(spare[m], g)
			}
		}
	}
	for m := int32(0); m < M && extra > 0; m++ {
		if count[m] == q && len(spare[m]) > 0 && owner[spare[m][0]] < 0 {
			owner[spare[m][0]] = m
			count[m]++
			extra--
		}
	}
	// Deal the rest: fill every member to q, then q+1 slots in order.
	m := int32(0)
	for g := range owner {
		if owner[g] >= 0 {
			continue
		}
		for m < M && count[m] >= q {
			m++
		}
		if m < M {
			owner[g] = m
			count[m]++
			continue
		}
		owner[g] = -2 // dealt below
	}
	m = 0
	for g := range owner {
		if owner[g] != -2 {
			continue
		}
		for count[m] != q {
			m++
		}
		owner[g] = m
		count[m]++
	}
}

func (s *serverSpec) uniformHeterogeneous(members []ServerMember, owner []int32) {
	M := len(members)
	T := len(s.topics)
	count := make([]int32, M)
	previous := make([]int32, len(owner))
	for i := range previous {
		previous[i] = -1
	}
	var buf []int32
	for m := range members {
		buf = s.current(members[m], s.subs[m], buf)
		for _, g := range buf {
			if previous[g] < 0 {
				previous[g] = int32(m)
				owner[g] = int32(m)
				count[m]++
			}
		}
	}
	subscribers := make([][]int32, T)
	for m, sub := range s.subs {
		for _, t := range sub {
			subscribers[t] = append(subscribers[t], int32(m))
		}
	}
	order := make([]int32, 0, T)
	for t := range T {
		if len(subscribers[t]) > 0 {
			order = append(order, int32(t))
		}
	}
	slices.SortFunc(order, func(a, b int32) int {
		// partitions per subscriber, descending: compare n_a/c_a with n_b/c_b.
		na, ca := int64(s.counts[a]), int64(len(subscribers[a]))
		nb, cb := int64(s.counts[b]), int64(len(subscribers[b]))
		if c := cmp.Compare(nb*ca, na*cb); c != 0 {
			return c
		}
		if c := cmp.Compare(ca, cb); c != 0 {
			return c
		}
		return cmp.Compare(a, b) // topics are in name order
	})
	least := func(subs []int32) int32 {
		best := subs[0]
		for _, m := range subs[1:] {
			if count[m] < count[best] {
				best = m
			}
		}
		return best
	}
	for _, t := range order {
		subs := subscribers[t]
		for g := s.base[t]; g < s.base[t+1]; g++ {
			if owner[g] < 0 {
				m := least(subs)
				owner[g] = m
				count[m]++
			}
		}
	}
	for moved := true; moved; {
		moved = false
		for _, t := range order {
			subs := subscribers[t]
			if len(subs) < 2 {
				continue
			}
			for g := s.base[t]; g < s.base[t+1]; g++ {
				o := owner[g]
				to := least(subs)
				if count[o] <= count[to]+1 {
					continue
				}
				if p := previous[g]; p >= 0 && p != o && count[p]+1 < count[o] && s.subscribes(p, t) {
					to = p
				}
				owner[g] = to
				count[o]--
				count[to]++
				moved = true
			}
		}
	}
}

func (s *serverSpec) subscribes(m, t int32) bool {
	_, ok := slices.BinarySearch(s.subs[m], t)
	return ok
}
