package assignor

import "encoding/binary"

// assignRange implements Kafka's RangeAssignor. Per topic, the subscribers in
// member order get contiguous ranges; the first n%c of them get one extra
// partition. Cost: O(P + sum of subscription sizes).
func (g *group) assignRange() []int32 {
	owner := g.scratch(bufOwner, g.P)
	if g.M() == 0 {
		return owner
	}
	if g.rackAware {
		g.assignRangeRacks(owner)
		return owner
	}
	if !g.uniform {
		g.buildSubscribers()
	}
	all := g.allMembers()
	for t := range int32(g.T()) {
		subs := all
		if !g.uniform {
			subs = g.subscribers(t)
		}
		b, n := g.base[t], g.base[t+1]-g.base[t]
		c := int32(len(subs))
		q, r := n/c, n%c
		p := b
		for i, m := range subs {
			k := q
			if int32(i) < r {
				k++
			}
			for range k {
				owner[p] = m
				p++
			}
		}
	}
	return owner
}

func (g *group) allMembers() []int32 {
	all := make([]int32, g.M())
	for i := range all {
		all[i] = int32(i)
	}
	return all
}

// assignRangeRacks is the rack-aware range assignment (KIP-881). Topics with
// the same subscribers and the same partition count are co-partitioned:
// partition index j of all of them goes to one member, and index j counts as
// rack-matching for a member only if every one of those partitions has a
// replica on the member's rack. Per-topic quotas are exactly those of the
// plain range assignor. A first pass gives each member (in member order)
// rack-matching indices up to its quota; a second pass fills the remaining
// quotas with the lowest free indices.
func (g *group) assignRangeRacks(owner []int32) {
	g.buildSubscribers()
	type key struct {
		subs string
		n    int32
	}
	groups := map[key][]int32{}
	var keys []key
	for t := range int32(g.T()) {
		subs := g.subscribers(t)
		kb := make([]byte, 0, 4*len(subs))
		for _, m := range subs {
			kb = binary.LittleEndian.AppendUint32(kb, uint32(m))
		}
		k := key{string(kb), g.base[t+1] - g.base[t]}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], t)
	}
	for _, k := range keys {
		ts := groups[k]
		subs := g.subscribers(ts[0])
		n := k.n
		mask := make([]uint64, n)
		for j := range n {
			mask[j] = ^uint64(0)
			for _, t := range ts {
				mask[j] &= g.partRacks[g.base[t]+j]
			}
		}
		// Indices per rack, ascending.
		byRack := make([][]int32, 64)
		for j := range n {
			bitsIter(mask[j], func(r int) bool {
				byRack[r] = append(byRack[r], j)
				return true
			})
		}
		idxOwner := make([]int32, n)
		for j := range idxOwner {
			idxOwner[j] = -1
		}
		c := int32(len(subs))
		q, r := n/c, n%c
		quota := func(i int) int32 {
			if int32(i) < r {
				return q + 1
			}
			return q
		}
		count := make([]int32, c)
		cursor := make([]int, 64)
		for i, m := range subs {
			rk := g.memberRack[m]
			if rk < 0 {
				continue
			}
			list := byRack[rk]
			for count[i] < quota(i) && cursor[rk] < len(list) {
				j := list[cursor[rk]]
				cursor[rk]++
				if idxOwner[j] >= 0 {
					continue
				}
				idxOwner[j] = m
				count[i]++
			}
		}
		j := int32(0)
		for i, m := range subs {
			for count[i] < quota(i) {
				for idxOwner[j] >= 0 {
					j++
				}
				idxOwner[j] = m
				count[i]++
			}
		}
		for _, t := range ts {
			copy(owner[g.base[t]:g.base[t+1]], idxOwner)
		}
	}
}
