package assignor

import "sort"

// assignRoundRobin implements Kafka's RoundRobinAssignor: partitions in
// (topic, partition) order are dealt with one circular iterator over the
// members that persists across topics and skips members not subscribed to
// the partition's topic.
//
// Skipping is done per topic with a binary search in the topic's subscriber
// list (sorted by member index) followed by a walk around that list, so the
// cost is O(P + T log M + sum of subscription sizes), never O(P x M).
func (g *group) assignRoundRobin() []int32 {
	owner := g.scratch(bufOwner, g.P)
	M := int32(g.M())
	if M == 0 {
		return owner
	}
	if g.uniform {
		for p := range owner {
			owner[p] = int32(p) % M
		}
		return owner
	}
	g.buildSubscribers()
	pos := int32(0) // the member the iterator points at
	for t := range int32(g.T()) {
		subs := g.subscribers(t)
		if len(subs) == 0 {
			continue
		}
		// First subscriber at or after pos, wrapping around.
		i := sort.Search(len(subs), func(i int) bool { return subs[i] >= pos })
		if i == len(subs) {
			i = 0
		}
		for p := g.base[t]; p < g.base[t+1]; p++ {
			owner[p] = subs[i]
			pos = subs[i] + 1
			i++
			if i == len(subs) {
				i = 0
			}
		}
		if pos == M {
			pos = 0
		}
	}
	return owner
}
