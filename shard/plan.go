package shard

import "slices"

// explicitPairs bounds the shard × node pairs of one rack (of all
// single-node racks together) that the plan's network gives an edge of
// their own. A larger rack shares one pool among its nodes (see plan).
const explicitPairs = 1 << 15

// shares says what rules 2 and 3 leave open. Every node holds base =
// ⌊T/N⌋ replicas, and extra = T mod N of them one more. Adding a
// replica to a rack whose L replicas are spread evenly over the S shards
// adds ⌊L/S⌋ same-rack pairs, a cost that does not fall as L grows, so
// rack r's j-th extra node (j = 0, 1, ...) costs ⌊(base·|r| + j)/S⌋ and
// the fewest pairs come from the extra cheapest units: with θ the cost
// of the last one, all forced_r units of rack r that cost less than θ,
// and any m of the tie_r units that cost θ. (A choice with a dearer
// unit, or without a cheaper one, trades it for a cheaper one and has
// fewer pairs.) Whichever of its units it takes, rack r holds lo_r of
// every shard and one more of some (when ones_r): the tied units cost
// θ = lo_r, so its load stays in (lo_r·S, (lo_r+1)·S]. A shard has d =
// R - Σ lo_r replicas above the lo_r's, each in a different rack.
type shares struct {
	base, extra, m int
	forced, tie    []int
	lo             []int
	ones           []bool
	d              int
}

func (p *placer) shares() shares {
	nn, k := len(p.ids), len(p.racks)
	total := p.s * p.r
	sh := shares{base: total / nn, extra: total % nn, forced: make([]int, k), tie: make([]int, k),
		lo: make([]int, k), ones: make([]bool, k), d: p.r}
	unit := func(r, j int) int { return (sh.base*len(p.racks[r].nodes) + j) / p.s }
	if sh.extra > 0 {
		units := make([]int, 0, nn)
		for r, rk := range p.racks {
			for j := range len(rk.nodes) {
				units = append(units, unit(r, j))
			}
		}
		slices.Sort(units)
		theta := units[sh.extra-1]
		sh.m = sh.extra
		for r, rk := range p.racks {
			for j := range len(rk.nodes) {
				switch u := unit(r, j); {
				case u < theta:
					sh.forced[r]++
					sh.m--
				case u == theta:
					sh.tie[r]++
				}
			}
		}
	}
	for r, rk := range p.racks {
		least := sh.base*len(rk.nodes) + sh.forced[r]
		sh.lo[r] = least / p.s
		sh.ones[r] = least+sh.tie[r] > sh.lo[r]*p.s
		sh.d -= sh.lo[r]
	}
	return sh
}

// plan decides, in one min-cost flow, what stickiness hangs on: which
// nodes take the extra replicas, how many replicas of each shard each
// rack holds, and which current replicas stay. It sets the targets and
// the racks' shares, drops the current replicas that do not stay,
// places the new replicas the network names a node for, and leaves the
// rest to fill, with the counts per pool the network chose (want). It
// reports false, with targets set, if the network cannot carry every
// replica, which the argument below rules out.
//
// The network, a unit of flow being one replica (see shares):
//
//	source -> cell (s, r)   capacity lo_r: rack r holds lo_r of shard s,
//	source -> shard s       capacity d,
//	shard s -> cell (s, r)  capacity 1: and one more in d racks (ones_r);
//	cell (s, r) -> node n   capacity 1, if n holds s now: it stays, at
//	                        cost 0 for s's preferred leader, 1 for others;
//	cell (s, r) -> node n   capacity 1, cost W, otherwise: a new replica;
//	node n -> sink          capacity base;
//	node n -> extra r       capacity 1, extra r -> sink forced_r,
//	extra r -> ties         tie_r, ties -> sink m: the extra replicas.
//
// A rack of one node that holds lo_r = 0 of every shard has no cells:
// the shard's vertex feeds its node. The even, fewest-pair placements are
// the flows that fill this network, so the cheapest flow moves fewest,
// and a stripe is one, so the network carries all T replicas. To stay
// small, the network joins the new replicas of a large rack in a pool
// (cell -> pool, cost W; pool -> node), which does not see whether a
// node already holds the shard; only nodes with room for two or more
// new replicas (a node that joined) keep an edge per pair. A shard's
// second new replica through one pool costs W + T+1, so that the
// network spreads new replicas over shards where it can; fill places
// the pooled ones, almost always as planned.
//
// W = (T+1)², more than all other costs together: the cheapest flow
// copies fewest, then pools fewest second replicas of a shard, then
// keeps the most preferred leaders. It starts warm from the current
// replicas (see the warm start below), which spares most of the work.
// The networks' memory is kept for the next Place (networks).
func (p *placer) plan(current Placement) bool {
	sh := p.shares()
	nn, k := len(p.ids), len(p.racks)
	total := p.s * p.r
	f := networks.Get().(*network)
	defer networks.Put(f)
	f.reset()
	src, snk := f.vertex(), f.vertex()
	shardV := f.vertices(p.s)
	// Racks with a cell per shard, and the single-node racks that may
	// hold a replica.
	var cellRacks, singles []int
	cellOf := make([]int, k) // rack -> first cell vertex, or -1
	for r, rk := range p.racks {
		cellOf[r] = -1
		switch {
		case len(rk.nodes) > 1 || sh.lo[r] > 0:
			cellRacks = append(cellRacks, r)
			cellOf[r] = f.vertices(p.s)
		case sh.ones[r]:
			singles = append(singles, rk.nodes[0])
		}
	}
	nodeV := f.vertices(nn)
	tiesV := f.vertex()
	extraV := make([]int, k)
	for r := range p.racks {
		extraV[r] = -1
		if sh.forced[r]+sh.tie[r] > 0 {
			extraV[r] = f.vertex()
		}
	}
	edges := p.s*(4*len(cellRacks)+3) + 3*nn + 2*k
	for _, reps := range p.reps {
		edges += len(reps)
	}
	f.arcs = slices.Grow(f.arcs, 2*edges)
	const follower = 1
	dup := int64(total + 1)
	w := dup * dup

	// The edges the warm start follows, -1 where there is none.
	none := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = -1
		}
		return s
	}
	fromSrc := none(p.s * len(cellRacks)) // source -> cell, by cell rack and shard
	toCell := none(p.s * len(cellRacks))  // shard -> cell
	toShard := none(p.s)                  // source -> shard
	for c, r := range cellRacks {
		for s := range p.s {
			if sh.lo[r] > 0 {
				fromSrc[c*p.s+s] = f.edge(src, cellOf[r]+s, sh.lo[r], 0)
			}
		}
	}
	for s := range p.s {
		if sh.d > 0 {
			toShard[s] = f.edge(src, shardV+s, sh.d, 0)
		}
		for c, r := range cellRacks {
			if sh.ones[r] && sh.d > 0 {
				toCell[c*p.s+s] = f.edge(shardV+s, cellOf[r]+s, 1, 0)
			}
		}
	}
	cellIdx := none(k) // rack -> its index in cellRacks
	for c, r := range cellRacks {
		cellIdx[r] = c
	}
	// Replicas that may stay, each with its edge (or -1) and its way in.
	type staying struct {
		e, in1, in2 int
		single      bool // fed by the shard's vertex
	}
	stayAt := make([]int, p.s+1)
	for s, reps := range p.reps {
		stayAt[s+1] = stayAt[s] + len(reps)
	}
	stay := make([]staying, stayAt[p.s])
	for s, reps := range p.reps {
		for i, n := range reps {
			st := staying{-1, -1, -1, false}
			r := p.rackOf[n]
			cost := int64(follower)
			if i == 0 && p.ids[n] == current.Replicas[s][0] {
				cost = 0
			}
			if c := cellIdx[r]; c >= 0 {
				st = staying{f.edge(cellOf[r]+s, nodeV+n, 1, cost), fromSrc[c*p.s+s], toCell[c*p.s+s], false}
			} else if sh.d > 0 && sh.ones[r] {
				st = staying{f.edge(shardV+s, nodeV+n, 1, cost), -1, -1, true}
			}
			stay[stayAt[s]+i] = st
		}
	}

	// New replicas: an edge per pair where the pairs are few, else a
	// pool, and an edge per pair still for the few nodes that may take
	// two or more.
	type pair struct{ s, n, e int }
	var fresh []pair
	explicit := func(from func(s int) int, nodes []int) {
		order := slices.Clone(nodes)
		for s := range p.s {
			slices.SortFunc(order, func(a, b int) int {
				ha, hb := p.hrw(s, a), p.hrw(s, b)
				if ha != hb {
					if ha > hb {
						return -1
					}
					return 1
				}
				return a - b
			})
			for _, n := range order {
				if !p.has(s, n) {
					fresh = append(fresh, pair{s, n, f.edge(from(s), nodeV+n, 1, w)})
				}
			}
		}
	}
	most := func(n int) int {
		if extraV[p.rackOf[n]] >= 0 {
			return sh.base + 1
		}
		return sh.base
	}
	p.group = none(k)
	var poolE []int // per pool and shard, its two edges into the pool
	pool := func(from func(s int) int, capacity int, nodes []int) {
		if p.s*len(nodes) <= explicitPairs {
			explicit(from, nodes)
			return
		}
		room := func(n int) int { return most(n) - min(p.load[n], most(n)) }
		var wide []int
		for _, n := range nodes {
			if room(n) > 1 {
				wide = append(wide, n)
			}
		}
		if len(wide) > explicitPairs/p.s {
			wide = nil
		}
		explicit(from, wide)
		g := p.groups
		p.groups++
		v := f.vertex()
		for _, n := range nodes {
			if !slices.Contains(wide, n) {
				p.group[p.rackOf[n]] = g
				f.edge(v, nodeV+n, most(n), 0)
			}
		}
		for s := range p.s {
			poolE = append(poolE, f.edge(from(s), v, 1, w), -1)
			if capacity > 1 {
				poolE[len(poolE)-1] = f.edge(from(s), v, capacity-1, w+dup)
			}
		}
	}
	for _, r := range cellRacks {
		capacity := sh.lo[r]
		if sh.ones[r] {
			capacity++
		}
		pool(func(s int) int { return cellOf[r] + s }, capacity, p.racks[r].nodes)
	}
	if len(singles) > 0 && sh.d > 0 {
		pool(func(s int) int { return shardV + s }, sh.d, singles)
	}

	toSink, toExtra := none(nn), none(nn)
	for n := range p.ids {
		if sh.base > 0 {
			toSink[n] = f.edge(nodeV+n, snk, sh.base, 0)
		}
		if x := extraV[p.rackOf[n]]; x >= 0 {
			toExtra[n] = f.edge(nodeV+n, x, 1, 0)
		}
	}
	forcedE, tieE := none(k), none(k)
	for r, x := range extraV {
		if x < 0 {
			continue
		}
		if sh.forced[r] > 0 {
			forcedE[r] = f.edge(x, snk, sh.forced[r], 0)
		}
		if sh.tie[r] > 0 {
			tieE[r] = f.edge(x, tiesV, sh.tie[r], 0)
		}
	}
	tiesE := -1
	if sh.m > 0 {
		tiesE = f.edge(tiesV, snk, sh.m, 0)
	}

	// Warm start: the current replicas stay while every edge on their way
	// has room, the preferred leaders first, then as many more leaders as
	// a maximum flow over the edges that cost nothing lets stay, then the
	// followers. No flow of the same size keeps more leaders (the
	// leaders' part of any flow is a flow of leaders), so this one costs
	// least for its size, which is all run needs to go on from it.
	f.prepare()
	warm := 0
	var buf [6]int
	open := func(e int) bool { return e >= 0 && f.arcs[e].cap > 0 }
	stayAll := func(leaders bool) {
		for s, reps := range p.reps {
			lead := len(reps) > 0 && p.ids[reps[0]] == current.Replicas[s][0]
			for i, n := range reps {
				st := stay[stayAt[s]+i]
				if (i == 0 && lead) != leaders || st.e < 0 {
					continue
				}
				way := append(buf[:0], st.e)
				switch {
				case st.single && open(toShard[s]):
					way = append(way, toShard[s])
				case open(st.in1):
					way = append(way, st.in1)
				case open(st.in2) && open(toShard[s]):
					way = append(way, st.in2, toShard[s])
				default:
					continue
				}
				r := p.rackOf[n]
				switch {
				case open(toSink[n]):
					way = append(way, toSink[n])
				case open(toExtra[n]) && open(forcedE[r]):
					way = append(way, toExtra[n], forcedE[r])
				case open(toExtra[n]) && open(tieE[r]) && open(tiesE):
					way = append(way, toExtra[n], tieE[r], tiesE)
				default:
					continue
				}
				for _, e := range way {
					f.arcs[e].cap--
					f.arcs[e^1].cap++
				}
				warm++
			}
		}
	}
	stayAll(true)
	warm += f.free(src, snk, total-warm)
	stayAll(false)

	if warm+f.run(src, snk, total-warm) != total {
		p.defaultTargets(sh)
		return false
	}
	for n := range p.ids {
		p.target[n] = 0
		if e := toSink[n]; e >= 0 {
			p.target[n] += f.flow(e)
		}
		if e := toExtra[n]; e >= 0 {
			p.target[n] += f.flow(e)
		}
	}
	p.setShares()
	for s := range p.reps {
		for i := len(p.reps[s]) - 1; i >= 0; i-- {
			if e := stay[stayAt[s]+i].e; e < 0 || f.flow(e) == 0 {
				p.remove(s, p.reps[s][i])
			}
		}
	}
	for _, fr := range fresh {
		if f.flow(fr.e) > 0 {
			p.add(fr.s, fr.n)
			p.fresh[[2]int{fr.s, fr.n}] = true
		}
	}
	p.want = make([]int, p.s*p.groups)
	for s := range p.s {
		for _, n := range p.reps[s] {
			if g := p.group[p.rackOf[n]]; g >= 0 {
				p.want[s*p.groups+g]++
			}
		}
		for g := range p.groups {
			for _, e := range poolE[2*(g*p.s+s):][:2] {
				if e >= 0 {
					p.want[s*p.groups+g] += f.flow(e)
				}
			}
		}
	}
	return true
}

// setShares sets each rack's share from its nodes' targets, and counts
// the shards it holds more than lo of.
func (p *placer) setShares() {
	for ri := range p.racks {
		rk := &p.racks[ri]
		load := 0
		for _, n := range rk.nodes {
			load += p.target[n]
		}
		rk.lo, rk.hiCap, rk.hi = load/p.s, load%p.s, 0
	}
	for s := range p.reps {
		for i, n := range p.reps[s] {
			r := p.rackOf[n]
			first := true
			for _, o := range p.reps[s][:i] {
				if p.rackOf[o] == r {
					first = false
				}
			}
			if first && p.inRack(s, r) > p.racks[r].lo {
				p.racks[r].hi++
			}
		}
	}
}

// defaultTargets gives the extra replicas to the forced units and the
// first tied ones, in rack order, each rack's to its first nodes.
func (p *placer) defaultTargets(sh shares) {
	m := sh.m
	for r, rk := range p.racks {
		x := sh.forced[r] + min(sh.tie[r], m)
		m -= min(sh.tie[r], m)
		for i, n := range rk.nodes {
			p.target[n] = sh.base
			if i < x {
				p.target[n]++
			}
		}
	}
	p.setShares()
}
