package assignor

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
)

// Literal, slow transcriptions of the Kafka definitions, used as oracles.

func sortedMembers(members []Member) []Member {
	seen := map[string]bool{}
	var ms []Member
	for _, m := range members {
		if !seen[m.ID] {
			seen[m.ID] = true
			ms = append(ms, m)
		}
	}
	sort.SliceStable(ms, func(i, j int) bool { return memberLess(&ms[i], &ms[j]) < 0 })
	return ms
}

func planFromMap(ms []Member, m map[string]map[string][]int32) []MemberAssignment {
	out := make([]MemberAssignment, len(ms))
	for i, mem := range ms {
		out[i].MemberID = mem.ID
		var ts []string
		for t := range m[mem.ID] {
			ts = append(ts, t)
		}
		sort.Strings(ts)
		for _, t := range ts {
			ps := slices.Clone(m[mem.ID][t])
			slices.Sort(ps)
			out[i].Topics = append(out[i].Topics, TopicPartitions{Topic: t, Partitions: ps})
		}
	}
	return out
}

func naiveRange(members []Member, topics map[string]int32) []MemberAssignment {
	ms := sortedMembers(members)
	res := map[string]map[string][]int32{}
	for _, m := range ms {
		res[m.ID] = map[string][]int32{}
	}
	var all []string
	for t, n := range topics {
		if n > 0 {
			all = append(all, t)
		}
	}
	sort.Strings(all)
	for _, t := range all {
		var subs []Member
		for _, m := range ms {
			if slices.Contains(m.Subscription.Topics, t) {
				subs = append(subs, m)
			}
		}
		if len(subs) == 0 {
			continue
		}
		n := int(topics[t])
		q, r := n/len(subs), n%len(subs)
		start := 0
		for i, m := range subs {
			k := q
			if i < r {
				k++
			}
			for p := start; p < start+k; p++ {
				res[m.ID][t] = append(res[m.ID][t], int32(p))
			}
			start += k
		}
	}
	return planFromMap(ms, res)
}

func naiveRoundRobin(members []Member, topics map[string]int32) []MemberAssignment {
	ms := sortedMembers(members)
	res := map[string]map[string][]int32{}
	for _, m := range ms {
		res[m.ID] = map[string][]int32{}
	}
	subscribed := map[string]bool{}
	for _, m := range ms {
		for _, t := range m.Subscription.Topics {
			subscribed[t] = true
		}
	}
	var all []string
	for t := range subscribed {
		if topics[t] > 0 {
			all = append(all, t)
		}
	}
	sort.Strings(all)
	it := 0
	for _, t := range all {
		for p := int32(0); p < topics[t]; p++ {
			for !slices.Contains(ms[it%len(ms)].Subscription.Topics, t) {
				it++
			}
			res[ms[it%len(ms)].ID][t] = append(res[ms[it%len(ms)].ID][t], p)
			it++
		}
	}
	return planFromMap(ms, res)
}

// randomGroup builds a random group: nm members over nt topics with up to
// maxParts partitions each (some topics empty or unknown), some static
// members, a few duplicate ids.
func randomGroup(r *rand.Rand, nm, nt, maxParts int, uniform bool) ([]Member, map[string]int32) {
	topics := map[string]int32{}
	var names []string
	for i := range nt {
		name := fmt.Sprintf("t%02d", i)
		names = append(names, name)
		if r.IntN(8) != 0 {
			topics[name] = int32(r.IntN(maxParts + 1))
		}
	}
	all := names
	var members []Member
	for i := range nm {
		var ts []string
		if uniform {
			ts = all
		} else {
			for _, n := range names {
				if r.IntN(2) == 0 {
					ts = append(ts, n)
				}
			}
		}
		m := Member{ID: fmt.Sprintf("m%02d", r.IntN(4*nm)), Subscription: sub(ts...)}
		if r.IntN(4) == 0 {
			m.InstanceID = fmt.Sprintf("i%02d", i)
		}
		members = append(members, m)
	}
	return members, topics
}
