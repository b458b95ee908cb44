package shard

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// fewestCopies is a lower bound on the replicas that any placement of
// shards on nodes meeting rules 1-3 of Place (R distinct replicas a
// shard, even node loads, fewest same-rack pairs) must add to cur,
// whichever nodes take the T mod N extra replicas: the cost of the
// cheapest flow in a network that every such placement fits. It is
// built and solved here apart from Place's own network and solver, so
// that one checks the other.
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
// The network: source -> cell (s, r) with capacity lo_r; source -> s
// with capacity d; s -> (s, r) with capacity 1 where rack r may hold
// lo_r+1; (s, r) -> n with capacity 1 and cost 0 for each replica of s
// that cur has on a node n of rack r; (s, r) -> pool_r with capacity
// lo_r+1 and cost 1, pool_r -> n for each node of rack r; n -> sink
// with capacity ⌊T/N⌋; n -> extra_r with capacity 1; extra_r -> sink
// with capacity forced_r, extra_r -> ties with capacity tie_r, ties ->
// sink with capacity m. A rack of one node holding lo_r = 0 has no
// cells: s feeds its node, and one pool (cost 1 from s) all such nodes.
//
// A placement P meeting the rules is a flow of all T replicas in it,
// costing the replicas P adds to cur: each replica of P goes through
// its cell (s, r), which P fills with lo_r or lo_r+1, lo_r from the
// source and the one more from s, which P gives one more in exactly d
// racks; through its node, whose load in P is ⌊T/N⌋ or one more, the
// one more through extra_r, P having x_r such nodes in rack r with
// forced_r <= x_r <= forced_r + tie_r and Σ (x_r - forced_r) = m; and
// over the cost-0 edge if cur holds it there, else through the pool at
// cost 1. So no such placement adds fewer replicas than the cheapest
// flow costs. (The pools let a shard's new replicas share a node, so
// the cheapest flow may cost less than any placement.)
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
	unit := func(k string, j int) int { return (base*size[k] + j) / shards }
	forced, tie := map[string]int{}, map[string]int{}
	m := 0
	if extra > 0 {
		var all []int
		for _, k := range keys {
			for j := range size[k] {
				all = append(all, unit(k, j))
			}
		}
		slices.Sort(all)
		theta := all[extra-1]
		m = extra
		for _, k := range keys {
			for j := range size[k] {
				if c := unit(k, j); c < theta {
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

	g := &costFlow{}
	src, snk := g.add(), g.add()
	node := map[string]int{}
	for _, n := range nodes {
		v := g.add()
		node[n.ID] = v
		if base > 0 {
			g.edge(v, snk, base, 0)
		}
	}
	ties := g.add()
	if m > 0 {
		g.edge(ties, snk, m, 0)
	}
	for _, k := range keys {
		if forced[k]+tie[k] == 0 {
			continue
		}
		x := g.add()
		g.edge(x, snk, forced[k], 0)
		g.edge(x, ties, tie[k], 0)
		for _, n := range nodes {
			if rackOf[n.ID] == k {
				g.edge(node[n.ID], x, 1, 0)
			}
		}
	}
	pool := map[string]int{}
	single := func(k string) bool { return size[k] == 1 && lo[k] == 0 }
	singles := -1
	for _, k := range keys {
		if single(k) {
			if singles < 0 {
				singles = g.add()
			}
			pool[k] = singles
		} else {
			pool[k] = g.add()
		}
	}
	for _, n := range nodes {
		g.edge(pool[rackOf[n.ID]], node[n.ID], base+1, 0)
	}
	for s := range shards {
		sv := -1
		if d > 0 {
			sv = g.add()
			g.edge(src, sv, d, 0)
			if singles >= 0 {
				g.edge(sv, singles, d, 1)
			}
		}
		cell := map[string]int{}
		for _, k := range keys {
			if single(k) {
				continue
			}
			c := g.add()
			cell[k] = c
			if lo[k] > 0 {
				g.edge(src, c, lo[k], 0)
			}
			if one[k] && d > 0 {
				g.edge(sv, c, 1, 0)
			}
			g.edge(c, pool[k], lo[k]+1, 1)
		}
		if s >= len(cur.Replicas) {
			continue
		}
		seen := map[string]bool{}
		for _, id := range cur.Replicas[s] {
			v, ok := node[id]
			if !ok || seen[id] {
				continue
			}
			seen[id] = true
			if c, ok := cell[rackOf[id]]; ok {
				g.edge(c, v, 1, 0)
			} else if sv >= 0 && one[rackOf[id]] {
				g.edge(sv, v, 1, 0)
			}
		}
	}
	flow, cost := g.run(src, snk)
	if flow != total {
		panic(fmt.Sprintf("the bound's network carries %d replicas of %d", flow, total))
	}
	return cost
}

// costFlow finds a cheapest maximum flow the plain way: first a maximum
// flow over the edges that cost nothing (Dinic's algorithm), which no
// flow of its size undercuts, then one cheapest augmenting path at a
// time (Bellman-Ford with a queue), which keeps it cheapest for its
// size.
type costFlow struct {
	adj  [][]int
	to   []int
	cap  []int
	cost []int
}

func (g *costFlow) add() int {
	g.adj = append(g.adj, nil)
	return len(g.adj) - 1
}

func (g *costFlow) edge(u, v, c, cost int) {
	g.adj[u] = append(g.adj[u], len(g.to))
	g.adj[v] = append(g.adj[v], len(g.to)+1)
	g.to = append(g.to, v, u)
	g.cap = append(g.cap, c, 0)
	g.cost = append(g.cost, cost, -cost)
}

func (g *costFlow) run(s, t int) (flow, cost int) {
	flow = g.free(s, t)
	n := len(g.adj)
	dist, via := make([]int, n), make([]int, n)
	queued := make([]bool, n)
	for {
		for v := range dist {
			dist[v], via[v] = math.MaxInt, -1
		}
		dist[s] = 0
		queue := []int{s}
		queued[s] = true
		for len(queue) > 0 {
			u := queue[0]
			queue = queue[1:]
			queued[u] = false
			for _, e := range g.adj[u] {
				v := g.to[e]
				if g.cap[e] > 0 && dist[u]+g.cost[e] < dist[v] {
					dist[v], via[v] = dist[u]+g.cost[e], e
					if !queued[v] {
						queued[v] = true
						queue = append(queue, v)
					}
				}
			}
		}
		if dist[t] == math.MaxInt {
			break
		}
		push := math.MaxInt
		for v := t; v != s; v = g.to[via[v]^1] {
			push = min(push, g.cap[via[v]])
		}
		for v := t; v != s; v = g.to[via[v]^1] {
			g.cap[via[v]] -= push
			g.cap[via[v]^1] += push
		}
		flow += push
	}
	for e := 0; e < len(g.to); e += 2 {
		cost += g.cap[e^1] * g.cost[e]
	}
	return flow, cost
}

// free pushes a maximum flow over the edges that cost nothing.
func (g *costFlow) free(s, t int) int {
	flow := 0
	for {
		level := make([]int, len(g.adj))
		for i := range level {
			level[i] = -1
		}
		level[s] = 0
		q := []int{s}
		for len(q) > 0 {
			u := q[0]
			q = q[1:]
			for _, e := range g.adj[u] {
				if g.cap[e] > 0 && g.cost[e] == 0 && level[g.to[e]] < 0 {
					level[g.to[e]] = level[u] + 1
					q = append(q, g.to[e])
				}
			}
		}
		if level[t] < 0 {
			return flow
		}
		next := make([]int, len(g.adj))
		var dfs func(u, f int) int
		dfs = func(u, f int) int {
			if u == t {
				return f
			}
			for ; next[u] < len(g.adj[u]); next[u]++ {
				e := g.adj[u][next[u]]
				v := g.to[e]
				if g.cap[e] > 0 && g.cost[e] == 0 && level[v] == level[u]+1 {
					if got := dfs(v, min(f, g.cap[e])); got > 0 {
						g.cap[e] -= got
						g.cap[e^1] += got
						return got
					}
				}
			}
			return 0
		}
		for {
			f := dfs(s, math.MaxInt)
			if f == 0 {
				break
			}
			flow += f
		}
	}
}

// TestNetwork checks Place's min-cost flow against costFlow on random
// networks with costs that are never negative, as Place builds them:
// both must carry as much, at the same cost, and the first must stop at
// the flow it is asked for.
func TestNetwork(t *testing.T) {
	rng := rand.New(rand.NewPCG(*placeSeed, 10))
	carried := 0
	for i := range 300 {
		n := 2 + rng.IntN(12)
		var f network
		g := &costFlow{}
		f.vertices(n)
		for range n {
			g.add()
		}
		for range 2*n + rng.IntN(4*n) {
			u, v := rng.IntN(n), rng.IntN(n)
			if u == v {
				continue
			}
			c, cost := 1+rng.IntN(3), rng.IntN(4)
			if rng.IntN(3) == 0 {
				cost *= 1000
			}
			f.edge(u, v, c, int64(cost))
			g.edge(u, v, c, cost)
		}
		most := math.MaxInt
		if i%2 == 1 {
			most = rng.IntN(4)
		}
		got := f.run(0, n-1, most)
		gotCost := int64(0)
		for e := 0; e < len(f.arcs); e += 2 {
			gotCost += int64(f.flow(e)) * f.arcs[e].cost
		}
		want, wantCost := g.run(0, n-1)
		if most < want {
			// The cheapest flow of size most: costFlow again, with the
			// source's supply cut to most through one more vertex.
			h := &costFlow{}
			for range n + 1 {
				h.add()
			}
			h.edge(n, 0, most, 0)
			for e := 0; e < len(g.to); e += 2 {
				h.edge(g.to[e^1], g.to[e], g.cap[e]+g.cap[e^1], g.cost[e])
			}
			want, wantCost = h.run(n, n-1)
		}
		if got != want || gotCost != int64(wantCost) {
			t.Fatalf("network %d (%d vertices, most %d): flow %d at cost %d, want %d at cost %d", i, n, most, got, gotCost, want, wantCost)
		}
		carried += got
	}
	if carried < 300 {
		t.Fatalf("the networks carried %d units in all: too few to test anything", carried)
	}
}
