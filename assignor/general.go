package assignor

import "slices"

// stickyGeneral is the assignment when subscriptions differ between members
// (the role of Kafka's GeneralAssignmentBuilder).
//
//  1. Every member keeps the partitions it owns of topics it still
//     subscribes to.
//  2. Topics are taken in order of increasing subscriber count (then name),
//     and each unassigned partition goes to the least-loaded subscriber (ties
//     to the first in member order), using a binary heap per topic.
//  3. Repair: while some topic has a holder with at least two partitions more
//     than one of the topic's subscribers, a partition of that topic moves
//     from the most-loaded holder to the least-loaded subscriber. At the end
//     no member holds a partition of a topic that a member with two or more
//     fewer partitions subscribes to: Kafka's balance criterion. Each move
//     lowers the sum of squared loads, so this terminates; a pass costs
//     O(P + sum of subscription sizes) plus O(log M) per move.
func (g *group) stickyGeneral(prev []int32) []int32 {
	M, P, T := g.M(), g.P, g.T()
	owner := make([]int32, P)
	load := make([]int32, M)
	for t := range int32(T) {
		for p := g.base[t]; p < g.base[t+1]; p++ {
			o := prev[p]
			if o >= 0 && g.subscribes(o, t) {
				owner[p] = o
				load[o]++
			} else {
				owner[p] = noOwner
			}
		}
	}
	if M == 0 || P == 0 {
		return owner
	}
	g.buildSubscribers()

	topics := make([]int32, T)
	for t := range topics {
		topics[t] = int32(t)
	}
	nsubs := func(t int32) int32 { return g.tsubOff[t+1] - g.tsubOff[t] }
	slices.SortFunc(topics, func(a, b int32) int {
		if d := nsubs(a) - nsubs(b); d != 0 {
			return int(d)
		}
		return int(a - b)
	})

	// Fill.
	h := minLoadHeap{load: load}
	for _, t := range topics {
		b, e := g.base[t], g.base[t+1]
		first := b
		for first < e && owner[first] != noOwner {
			first++
		}
		if first == e {
			continue
		}
		h.reset(g.subscribers(t))
		for p := first; p < e; p++ {
			if owner[p] != noOwner {
				continue
			}
			m := h.items[0]
			owner[p] = m
			load[m]++
			h.down(0)
		}
	}

	// Repair.
	r := newRepairer(M, load)
	for changed := true; changed; {
		changed = false
		for _, t := range topics {
			if r.repairTopic(g, owner, t) {
				changed = true
			}
		}
	}
	return owner
}

// minLoadHeap is a binary min-heap of members ordered by (load, member).
type minLoadHeap struct {
	items []int32
	load  []int32
}

func (h *minLoadHeap) less(a, b int32) bool {
	la, lb := h.load[a], h.load[b]
	return la < lb || la == lb && a < b
}

func (h *minLoadHeap) reset(members []int32) {
	h.items = append(h.items[:0], members...)
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *minLoadHeap) down(i int) {
	it := h.items
	n := len(it)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && h.less(it[r], it[l]) {
			c = r
		}
		if !h.less(it[c], it[i]) {
			return
		}
		it[i], it[c] = it[c], it[i]
		i = c
	}
}

// repairer holds scratch space for the balance repair, sized once per call.
type repairer struct {
	load []int32
	// light: min-heap of a topic's subscribers by (load, member), with
	// positions so that a member's key can decrease.
	light    []int32
	lightPos []int32
	// heavy: max-heap of the topic's holders by (load, -member).
	heavy    []int32
	heavyPos []int32
	stacks   [][]int32 // per member: its partitions of the current topic
}

func newRepairer(M int, load []int32) *repairer {
	r := &repairer{load: load, lightPos: make([]int32, M), heavyPos: make([]int32, M), stacks: make([][]int32, M)}
	for i := range M {
		r.lightPos[i] = -1
		r.heavyPos[i] = -1
	}
	return r
}

// repairTopic moves partitions of topic t until its most-loaded holder has at
// most one partition more than its least-loaded subscriber. It reports
// whether anything moved.
func (r *repairer) repairTopic(g *group, owner []int32, t int32) bool {
	subs := g.subscribers(t)
	load := r.load
	b, e := g.base[t], g.base[t+1]
	minL := int32(1<<31 - 1)
	for _, m := range subs {
		minL = min(minL, load[m])
	}
	maxH := int32(-1)
	for p := b; p < e; p++ {
		if o := owner[p]; o >= 0 {
			maxH = max(maxH, load[o])
		}
	}
	if maxH < minL+2 {
		return false
	}

	// Build the heaps.
	r.light = append(r.light[:0], subs...)
	for i, m := range r.light {
		r.lightPos[m] = int32(i)
	}
	for i := len(r.light)/2 - 1; i >= 0; i-- {
		r.lightDown(i)
	}
	r.heavy = r.heavy[:0]
	for p := b; p < e; p++ {
		o := owner[p]
		if o < 0 || load[o] < minL+2 {
			continue
		}
		if r.heavyPos[o] < 0 {
			r.heavyPos[o] = int32(len(r.heavy))
			r.heavy = append(r.heavy, o)
		}
		r.stacks[o] = append(r.stacks[o], p)
	}
	for i := len(r.heavy)/2 - 1; i >= 0; i-- {
		r.heavyDown(i)
	}

	for len(r.heavy) > 0 {
		l, h := r.light[0], r.heavy[0]
		if load[h] < load[l]+2 {
			break
		}
		st := r.stacks[h]
		p := st[len(st)-1]
		r.stacks[h] = st[:len(st)-1]
		owner[p] = l
		load[l]++
		load[h]--
		r.lightDown(0)
		r.lightUp(int(r.lightPos[h]))
		if len(r.stacks[h]) == 0 {
			r.heavyRemoveTop()
		} else {
			r.heavyDown(0)
		}
	}

	// Reset scratch.
	for _, m := range r.light {
		r.lightPos[m] = -1
	}
	for _, m := range r.heavy {
		r.heavyPos[m] = -1
		r.stacks[m] = r.stacks[m][:0]
	}
	return true
}

func (r *repairer) lightLess(a, b int32) bool {
	la, lb := r.load[a], r.load[b]
	return la < lb || la == lb && a < b
}

func (r *repairer) lightSwap(i, j int) {
	it := r.light
	it[i], it[j] = it[j], it[i]
	r.lightPos[it[i]] = int32(i)
	r.lightPos[it[j]] = int32(j)
}

func (r *repairer) lightDown(i int) {
	n := len(r.light)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if rr := l + 1; rr < n && r.lightLess(r.light[rr], r.light[l]) {
			c = rr
		}
		if !r.lightLess(r.light[c], r.light[i]) {
			return
		}
		r.lightSwap(i, c)
		i = c
	}
}

func (r *repairer) lightUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !r.lightLess(r.light[i], r.light[p]) {
			return
		}
		r.lightSwap(i, p)
		i = p
	}
}

// heavyLess orders the max-heap: more load first, then the later member
// (so that, symmetric to the fill, the last member in order gives first).
func (r *repairer) heavyLess(a, b int32) bool {
	la, lb := r.load[a], r.load[b]
	return la > lb || la == lb && a > b
}

func (r *repairer) heavySwap(i, j int) {
	it := r.heavy
	it[i], it[j] = it[j], it[i]
	r.heavyPos[it[i]] = int32(i)
	r.heavyPos[it[j]] = int32(j)
}

func (r *repairer) heavyDown(i int) {
	n := len(r.heavy)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if rr := l + 1; rr < n && r.heavyLess(r.heavy[rr], r.heavy[l]) {
			c = rr
		}
		if !r.heavyLess(r.heavy[c], r.heavy[i]) {
			return
		}
		r.heavySwap(i, c)
		i = c
	}
}

func (r *repairer) heavyRemoveTop() {
	n := len(r.heavy) - 1
	top := r.heavy[0]
	r.heavySwap(0, n)
	r.heavy = r.heavy[:n]
	r.heavyPos[top] = -1
	r.stacks[top] = r.stacks[top][:0]
	if n > 0 {
		r.heavyDown(0)
	}
}
