package assignor

import "slices"

// stickyGeneral is the assignment when subscriptions differ between members
// (the role of Kafka's GeneralAssignmentBuilder). prev gives each partition's
// previous owner; the result is written to owner.
//
//  1. Every member keeps the partitions it owns of topics it still
//     subscribes to.
//  2. Topics are taken in order of increasing subscriber count (then name),
//     and each unassigned partition goes to the least-loaded subscriber
//     (ties to the member with fewer subscribed topics, then the first in
//     member order), using a binary heap per topic.
//  3. Repair: while some topic has a holder with at least two partitions more
//     than one of the topic's subscribers, the lightest subscriber gains a
//     partition or the heaviest holder loses one. Partitions not held by
//     their previous owner move first (they cost no revocation): from the
//     holder itself, by lifting the subscriber with a free partition of
//     another of its topics, or by relieving the holder of a free partition
//     of another topic. Only then does an owned partition move. At the end
//     no member holds a partition of a topic that a member with two or more
//     fewer partitions subscribes to: Kafka's balance criterion. Every move
//     either lowers the sum of squared loads or is one of a bounded number of
//     sideways moves per partition, so this terminates; a pass costs
//     O(P + sum of subscription sizes) plus O(log M) per move.
func (g *group) stickyGeneral(prev, owner []int32) []int32 {
	M, P, T := g.M(), g.P, g.T()
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
	nsubs := func(t int32) int32 { return int32(len(g.tsubs[t])) }
	slices.SortFunc(topics, func(a, b int32) int {
		if d := nsubs(a) - nsubs(b); d != 0 {
			return int(d)
		}
		return int(a - b)
	})

	// Fill.
	width := make([]int32, M)
	for m := range width {
		width[m] = int32(len(g.classTops[g.class[m]]))
	}
	h := minLoadHeap{load: load, width: width}
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
	r := newRepairer(M, load, width)
	r.prev = prev
	// The search for free moves is bounded by a work budget linear in the
	// input, so the repair stays O(P + sum of subscription sizes) apart
	// from the moves themselves.
	r.budget = 4*P + 1024
	for t := range T {
		r.budget += 4 * len(g.tsubs[t])
	}
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

// minLoadHeap is a binary min-heap of members ordered by (load, number of
// subscribed topics, member): at equal load, the member with fewer choices
// takes the partition, since members with more topics can still be balanced
// with partitions of other topics.
type minLoadHeap struct {
	items []int32
	load  []int32
	width []int32
}

func (h *minLoadHeap) less(a, b int32) bool {
	return lighter(h.load, h.width, a, b)
}

func lighter(load, width []int32, a, b int32) bool {
	la, lb := load[a], load[b]
	if la != lb {
		return la < lb
	}
	if wa, wb := width[a], width[b]; wa != wb {
		return wa < wb
	}
	return a < b
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
	load  []int32
	width []int32
	// light: min-heap of a topic's subscribers by (load, member), with
	// positions so that a member's key can decrease.
	light    []int32
	lightPos []int32
	// heavy: max-heap of the topic's holders by (load, -member).
	heavy    []int32
	heavyPos []int32
	stacks   [][]int32 // per member: its partitions of the current topic

	// prev is the previous owner of each partition. Moving a partition away
	// from its previous owner costs a revocation; moving any other partition
	// is free. freeOf lists, per member, partitions it holds but did not
	// own before (entries are checked on use, stale ones skipped).
	prev      []int32
	freeOf    [][]int32
	freeIn    [][]int32 // per topic, partitions that are free to move
	budget    int       // remaining candidate checks for boost and relieve
	sideMoves []uint8   // sideways moves made per partition
	sideFrom  []int32   // the member a partition last moved sideways from
}

// maxSideMoves bounds the sideways moves of one partition, which makes the
// repair terminate: every other move strictly lowers the sum of squared loads.
const maxSideMoves = 4

func newRepairer(M int, load, width []int32) *repairer {
	r := &repairer{load: load, width: width, lightPos: make([]int32, M), heavyPos: make([]int32, M), stacks: make([][]int32, M)}
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
	// Stacks hold partitions that would cost a revocation at the bottom and
	// free ones on top, so free partitions move first.
	for pass := range 2 {
		for p := b; p < e; p++ {
			o := owner[p]
			if o < 0 || load[o] < minL+2 || (r.prev[p] == o) != (pass == 0) {
				continue
			}
			if r.heavyPos[o] < 0 {
				r.heavyPos[o] = int32(len(r.heavy))
				r.heavy = append(r.heavy, o)
			}
			r.stacks[o] = append(r.stacks[o], p)
		}
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
		if owner[p] != h { // moved away by relieve or boost
			r.stacks[h] = st[:len(st)-1]
			if len(r.stacks[h]) == 0 {
				r.heavyRemoveTop()
			} else {
				r.heavyDown(0)
			}
			continue
		}
		if r.prev[p] == h {
			// Every partition of t on h would cost a revocation. Try to
			// lift l with a free partition from a member loaded more than
			// it, or to relieve h with a free partition of another topic.
			if x := r.boost(g, owner, l, t); x >= 0 {
				r.lightDown(int(r.lightPos[l]))
				if i := r.lightPos[x]; i >= 0 {
					r.lightUp(int(i))
				}
				if i := r.heavyPos[x]; i >= 0 {
					r.heavyDown(int(i))
				}
				continue
			}
			if x := r.relieve(g, owner, h, t); x >= 0 {
				if i := r.lightPos[x]; i >= 0 {
					r.lightDown(int(i))
				}
				if i := r.heavyPos[x]; i >= 0 {
					r.heavyUp(int(i))
				}
				r.lightUp(int(r.lightPos[h]))
				if i := r.heavyPos[h]; i >= 0 {
					r.heavyDown(int(i))
				}
				continue
			}
		}
		r.stacks[h] = st[:len(st)-1]
		r.move(g, owner, p, h, l)
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
	return lighter(r.load, r.width, a, b)
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

// buildFree builds the free lists on first use: most calls never need them.
func (r *repairer) buildFree(g *group, owner []int32) {
	if r.freeOf != nil {
		return
	}
	r.freeOf = make([][]int32, len(r.load))
	r.freeIn = make([][]int32, g.T())
	for t := range int32(g.T()) {
		for p := g.base[t]; p < g.base[t+1]; p++ {
			if o := owner[p]; o >= 0 && r.prev[p] != o {
				r.freeOf[o] = append(r.freeOf[o], p)
				r.freeIn[t] = append(r.freeIn[t], p)
			}
		}
	}
}

// move moves p from h to l, keeping loads and free lists current.
func (r *repairer) move(g *group, owner []int32, p, h, l int32) {
	owner[p] = l
	r.load[l]++
	r.load[h]--
	if r.freeOf == nil {
		return
	}
	if r.prev[p] != l {
		r.freeOf[l] = append(r.freeOf[l], p)
	}
	if r.prev[p] == h {
		t := g.topicOf(p)
		r.freeIn[t] = append(r.freeIn[t], p)
	}
}

// sideOK reports whether q may move sideways to x.
func (r *repairer) sideOK(q, x int32) bool {
	return r.sideMoves == nil || r.sideMoves[q] < maxSideMoves && r.sideFrom[q] != x
}

func (r *repairer) noteSide(q, from int32) {
	if r.sideMoves == nil {
		r.sideMoves = make([]uint8, len(r.prev))
		r.sideFrom = make([]int32, len(r.prev))
	}
	r.sideMoves[q]++
	r.sideFrom[q] = from
}

// boost looks for a partition of a topic l subscribes to that is free to
// move and sits on a member x loaded more than l: by two or more (a strict
// improvement) or by one (a sideways move, limited as in relieve). It moves
// the one on the most-loaded such x to l and returns x, or returns -1. It
// examines a bounded number of candidates.
func (r *repairer) boost(g *group, owner []int32, l, vt int32) int32 {
	if r.budget <= 0 {
		return -1
	}
	r.buildFree(g, owner)
	const maxCandidates = 64
	bestQ, bestX := int32(-1), int32(-1)
	seen := 0
	for _, t := range g.classTops[g.class[l]] {
		list := r.freeIn[t]
		w := 0
		for _, q := range list {
			r.budget--
			x := owner[q]
			if x < 0 || r.prev[q] == x {
				continue // stale: no longer free
			}
			list[w] = q
			w++
			if seen >= maxCandidates || x == l {
				continue
			}
			seen++
			if r.load[x] < r.load[l]+1 || r.load[x] == r.load[l]+1 && !r.sideOK(q, l) {
				continue
			}
			// Prefer donors that do not subscribe to the topic being
			// repaired (losing a partition cannot make them its new
			// lightest subscriber), then the most loaded.
			if bestX < 0 || betterDonor(g, r.load, vt, x, bestX) {
				bestQ, bestX = q, x
			}
		}
		r.freeIn[t] = list[:w]
		if seen >= maxCandidates {
			break
		}
	}
	if bestX < 0 {
		return -1
	}
	if r.load[bestX] == r.load[l]+1 {
		r.noteSide(bestQ, bestX)
	}
	r.move(g, owner, bestQ, bestX, l)
	return bestX
}

// relieve looks for a partition h holds free of cost (in any topic) that can
// go to another subscriber x of its topic with a lower load: strictly lower
// by two (a strict improvement), or by one (a sideways move, which swaps the
// two loads; a partition moves sideways at most maxSideMoves times and never
// straight back). It moves it and returns x, or returns -1. It examines a
// bounded number of candidates.
func (r *repairer) relieve(g *group, owner []int32, h, vt int32) int32 {
	if r.budget <= 0 {
		return -1
	}
	r.buildFree(g, owner)
	const maxCandidates = 16
	list := r.freeOf[h]
	bestP, bestX := int32(-1), int32(-1)
	seen := 0
	w := 0
	for _, q := range list {
		if owner[q] != h || r.prev[q] == h {
			continue // stale entry
		}
		list[w] = q
		w++
		if seen >= maxCandidates || bestX >= 0 && r.load[bestX]+2 <= r.load[h] {
			continue
		}
		seen++
		back := int32(-1)
		if r.sideMoves != nil {
			back = r.sideFrom[q]
			if r.sideMoves[q] >= maxSideMoves {
				back = h // only strict moves left for q
			}
		}
		t := g.topicOf(q)
		x := int32(-1)
		r.budget -= len(g.subscribers(t))
		for _, m := range g.subscribers(t) {
			if m != h && m != back && (x < 0 || lighter(r.load, r.width, m, x)) {
				x = m
			}
		}
		if x >= 0 && r.load[x]+1 == r.load[h] && !r.sideOK(q, x) {
			continue
		}
		// Prefer receivers that do not subscribe to the topic being
		// repaired (they cannot become its heaviest holder), then the
		// lightest.
		if x >= 0 && r.load[x]+1 <= r.load[h] && (bestX < 0 || betterReceiver(g, r, vt, x, bestX)) {
			bestP, bestX = q, x
		}
	}
	r.freeOf[h] = list[:w]
	if bestX < 0 {
		return -1
	}
	if r.load[bestX]+1 == r.load[h] {
		r.noteSide(bestP, h)
	}
	r.move(g, owner, bestP, h, bestX)
	return bestX
}

func betterDonor(g *group, load []int32, vt, x, y int32) bool {
	if sx, sy := g.subscribes(x, vt), g.subscribes(y, vt); sx != sy {
		return !sx
	}
	return load[x] > load[y]
}

func betterReceiver(g *group, r *repairer, vt, x, y int32) bool {
	if sx, sy := g.subscribes(x, vt), g.subscribes(y, vt); sx != sy {
		return !sx
	}
	return lighter(r.load, r.width, x, y)
}

func (r *repairer) heavyUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !r.heavyLess(r.heavy[i], r.heavy[p]) {
			return
		}
		r.heavySwap(i, p)
		i = p
	}
}

// heavyLess orders the max-heap: more load first, then the later member
// (so that, symmetric to the fill, the last member in order gives first).
func (r *repairer) heavyLess(a, b int32) bool {
	la, lb := r.load[a], r.load[b]
	if la != lb {
		return la > lb
	}
	// At equal load, a holder whose next partition is free to move first.
	if fa, fb := r.freeTop(a), r.freeTop(b); fa != fb {
		return fa
	}
	return a > b
}

func (r *repairer) freeTop(m int32) bool {
	st := r.stacks[m]
	return len(st) > 0 && r.prev[st[len(st)-1]] != m
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
