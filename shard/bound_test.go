package shard

import (
	"fmt"
	"slices"
)

// fewestCopies is a lower bound on the replicas that any placement of
// shards on nodes meeting rules 1-3 of Place (R distinct replicas a
// shard, even node loads, fewest same-rack pairs) must add to cur: T
// less the most replicas of cur such a placement can keep, found as a
// maximum flow. Unlike rackAdded it holds for every such placement,
// whichever nodes take the T mod N extra replicas.
//
// Which racks may take the extras: adding a replica to a rack that
// holds L spread evenly over S shards adds ⌊L/S⌋ same-rack pairs
// (rackPairs(L+1) - rackPairs(L)), a cost that does not fall as L grows.
// Rack r's j-th extra (j = 0, 1, ...) thus costs ⌊(⌊T/N⌋·|r| + j)/S⌋,
// and rule 3 takes the T mod N cheapest: with θ the cost of the last
// one taken, every unit cheaper than θ (forced_r in rack r) and any m of
// the units costing θ (tie_r in rack r). A placement that took a unit
// dearer than θ, or left one cheaper, could swap it for a cheaper one
// and have fewer pairs. Rule 3 also spreads each rack's load evenly:
// rack r holds ⌊L_r/S⌋ or ⌈L_r/S⌉ of every shard. For every L_r the
// rule allows, that is lo_r = ⌊(⌊T/N⌋·|r| + forced_r)/S⌋ of every
// shard and at most one more (the tied units all cost θ = lo_r, so L_r
// stays within (lo_r·S, (lo_r+1)·S]), and a shard has d = R - Σ lo_r
// replicas above the lo_r's.
//
// The network: source -> (s, r) with capacity lo_r; source -> s with
// capacity d; s -> (s, r) with capacity 1 where rack r may hold lo_r+1;
// (s, r) -> n with capacity 1 for each replica of s that cur has on a
// node n of rack r; n -> sink with capacity ⌊T/N⌋; n -> extra_r with
// capacity 1; extra_r -> sink with capacity forced_r and extra_r ->
// ties with capacity tie_r; ties -> sink with capacity m. The replicas a
// placement P meeting the rules keeps are a flow in it: a cell (s, r)
// keeps at most P's count there, at most lo_r of them from the source
// and any one more from s, which does so in at most d racks (P holds
// lo_r+1 of s in exactly d racks); a node keeps at most its load in P,
// one above ⌊T/N⌋ only if it is one of P's x_r extra nodes in its rack,
// with forced_r <= x_r <= forced_r + tie_r and Σ (x_r - forced_r) = m.
// So no such placement keeps more than the maximum flow.
func fewestCopies(shards, rf int, nodes []Node, cur Placement) int {
	r := min(rf, len(nodes))
	total := shards * r
	base, extra := total/len(nodes), total%len(nodes)
	rackOf := rackKeys(nodes)
	size := map[string]int{}
	for _, k := range rackOf {
		size[k]++
	}
	var keys []string
	for k := range size {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	cost := func(k string, j int) int { return (base*size[k] + j) / shards }
	forced, tie := map[string]int{}, map[string]int{}
	m := 0
	if extra > 0 {
		var all []int
		for _, k := range keys {
			for j := range size[k] {
				all = append(all, cost(k, j))
			}
		}
		slices.Sort(all)
		theta := all[extra-1]
		m = extra
		for _, k := range keys {
			for j := range size[k] {
				if c := cost(k, j); c < theta {
					forced[k]++
					m--
				} else if c == theta {
					tie[k]++
				}
			}
		}
	}
	lo, one := map[string]int{}, map[string]bool{}
	d := r
	for _, k := range keys {
		least := base*size[k] + forced[k]
		lo[k] = least / shards
		one[k] = least+tie[k] > lo[k]*shards
		d -= lo[k]
	}

	// The most replicas a placement keeps, counting only the replicas
	// kept: a cross-check on the network below, which must keep no more.
	g := &maxFlow{}
	src, snk := g.add(), g.add()
	node := map[string]int{}
	for _, n := range nodes {
		v := g.add()
		node[n.ID] = v
		if base > 0 {
			g.edge(v, snk, base)
		}
	}
	ties := g.add()
	if m > 0 {
		g.edge(ties, snk, m)
	}
	for _, k := range keys {
		if forced[k]+tie[k] == 0 {
			continue
		}
		x := g.add()
		g.edge(x, snk, forced[k])
		g.edge(x, ties, tie[k])
		for _, n := range nodes {
			if rackOf[n.ID] == k {
				g.edge(node[n.ID], x, 1)
			}
		}
	}
	for _, reps := range cur.Replicas {
		sv := -1
		cell := map[string]int{}
		for _, id := range reps {
			v, ok := node[id]
			if !ok {
				continue
			}
			k := rackOf[id]
			c, ok := cell[k]
			if !ok {
				c = g.add()
				cell[k] = c
				if lo[k] > 0 {
					g.edge(src, c, lo[k])
				}
				if one[k] && d > 0 {
					if sv < 0 {
						sv = g.add()
						g.edge(src, sv, d)
					}
					g.edge(sv, c, 1)
				}
			}
			g.edge(c, v, 1)
		}
	}
	keepMost := g.run(src, snk)

	// The network with the new replicas too: each costs 1, and goes from
	// its cell to its rack's pool (all single-node racks share one), which
	// feeds the rack's nodes. A placement meeting the rules is a flow in
	// it of cost its new replicas: every cell holds lo_r or lo_r+1
	// replicas, all T arrive. The pools let a shard's new replicas share
	// a node, so the cheapest flow may cost less than any placement, never
	// more.
	var f network
	fsrc, fsnk := f.vertex(), f.vertex()
	nodeV := map[string]int{}
	for _, n := range nodes {
		v := f.vertex()
		nodeV[n.ID] = v
		if base > 0 {
			f.edge(v, fsnk, base, 0)
		}
	}
	fties := f.vertex()
	if m > 0 {
		f.edge(fties, fsnk, m, 0)
	}
	for _, k := range keys {
		if forced[k]+tie[k] == 0 {
			continue
		}
		x := f.vertex()
		f.edge(x, fsnk, forced[k], 0)
		f.edge(x, fties, tie[k], 0)
		for _, n := range nodes {
			if rackOf[n.ID] == k {
				f.edge(nodeV[n.ID], x, 1, 0)
			}
		}
	}
	pool := map[string]int{}
	single := func(k string) bool { return size[k] == 1 && lo[k] == 0 }
	singles := -1
	for _, k := range keys {
		if single(k) {
			if singles < 0 {
				singles = f.vertex()
			}
			pool[k] = singles
		} else {
			pool[k] = f.vertex()
		}
	}
	for _, n := range nodes {
		f.edge(pool[rackOf[n.ID]], nodeV[n.ID], base+1, 0)
	}
	for s := range shards {
		sv := -1
		if d > 0 {
			sv = f.vertex()
			f.edge(fsrc, sv, d, 0)
			if singles >= 0 {
				f.edge(sv, singles, d, 1)
			}
		}
		cell := map[string]int{}
		for _, k := range keys {
			if single(k) {
				continue
			}
			c := f.vertex()
			cell[k] = c
			if lo[k] > 0 {
				f.edge(fsrc, c, lo[k], 0)
			}
			if one[k] && d > 0 {
				f.edge(sv, c, 1, 0)
			}
			f.edge(c, pool[k], lo[k]+1, 1)
		}
		if s >= len(cur.Replicas) {
			continue
		}
		seen := map[string]bool{}
		for _, id := range cur.Replicas[s] {
			v, ok := nodeV[id]
			if !ok || seen[id] {
				continue
			}
			seen[id] = true
			if c, ok := cell[rackOf[id]]; ok {
				f.edge(c, v, 1, 0)
			} else if sv >= 0 && one[rackOf[id]] {
				f.edge(sv, v, 1, 0)
			}
		}
	}
	if got := f.run(fsrc, fsnk, total); got != total {
		panic(fmt.Sprintf("the bound's network carries %d replicas of %d", got, total))
	}
	copies := 0
	for e := 0; e < len(f.arcs); e += 2 {
		copies += f.flow(e) * int(f.arcs[e].cost)
	}
	if total-copies > keepMost {
		panic(fmt.Sprintf("the bound's network keeps %d replicas, more than the %d that can stay", total-copies, keepMost))
	}
	return copies
}

// maxFlow is Dinic's algorithm, kept apart from Place's network.
type maxFlow struct {
	adj   [][]int
	to    []int
	cap   []int
	level []int
	next  []int
}

func (g *maxFlow) add() int {
	g.adj = append(g.adj, nil)
	return len(g.adj) - 1
}

func (g *maxFlow) edge(u, v, c int) {
	g.adj[u] = append(g.adj[u], len(g.to))
	g.adj[v] = append(g.adj[v], len(g.to)+1)
	g.to = append(g.to, v, u)
	g.cap = append(g.cap, c, 0)
}

func (g *maxFlow) run(s, t int) int {
	flow := 0
	for {
		g.level = make([]int, len(g.adj))
		for i := range g.level {
			g.level[i] = -1
		}
		g.level[s] = 0
		q := []int{s}
		for len(q) > 0 {
			u := q[0]
			q = q[1:]
			for _, e := range g.adj[u] {
				if g.cap[e] > 0 && g.level[g.to[e]] < 0 {
					g.level[g.to[e]] = g.level[u] + 1
					q = append(q, g.to[e])
				}
			}
		}
		if g.level[t] < 0 {
			return flow
		}
		g.next = make([]int, len(g.adj))
		for {
			f := g.dfs(s, t, 1<<62)
			if f == 0 {
				break
			}
			flow += f
		}
	}
}

func (g *maxFlow) dfs(u, t, f int) int {
	if u == t {
		return f
	}
	for ; g.next[u] < len(g.adj[u]); g.next[u]++ {
		e := g.adj[u][g.next[u]]
		v := g.to[e]
		if g.cap[e] > 0 && g.level[v] == g.level[u]+1 {
			if got := g.dfs(v, t, min(f, g.cap[e])); got > 0 {
				g.cap[e] -= got
				g.cap[e^1] += got
				return got
			}
		}
	}
	return 0
}
