package shard

import (
	"math"
	"sync"
)

// network is a min-cost flow network: integer capacities, and costs
// that are never negative on the edges as built. run finds a maximum
// flow of least cost by the primal-dual method: Dijkstra's algorithm on
// costs reduced by vertex potentials gives the length of the shortest
// augmenting path, and a blocking flow (Dinic's algorithm) pushes all
// the flow that paths of that length can carry before the next search.
// Place's networks have few distinct path lengths, so it runs few
// searches. A vertex tries its edges in the order they were added.
type network struct {
	n    int
	arcs []arc // edge e and its reverse e^1

	first, adj  []int32 // vertex v's edges are adj[first[v]:first[v+1]]
	pot, dist   []int64
	level, iter []int32
	heap        []item
	queue       []int32
}

// An arc's fields are 32 bits: Place's networks have a few vertices
// and edges per shard and node, and carry S·R units.
type arc struct {
	to, cap int32
	cost    int64
}

type item struct {
	d int64
	v int32
}

// networks keeps networks' memory for the next Place: a large network
// is most of what Place allocates.
var networks = sync.Pool{New: func() any { return new(network) }}

// reset empties the network, keeping its memory.
func (f *network) reset() {
	f.n = 0
	f.arcs = f.arcs[:0]
}

// grow returns s with length n, reusing its memory when it can, and
// zeroed if clean.
func grow[T any](s []T, n int, clean bool) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	if clean {
		clear(s)
	}
	return s
}

// vertex adds a vertex and returns it.
func (f *network) vertex() int {
	f.n++
	return f.n - 1
}

// vertices adds k vertices and returns the first.
func (f *network) vertices(k int) int {
	f.n += k
	return f.n - k
}

// edge adds an edge u -> v and returns it; edge e^1 is its reverse.
func (f *network) edge(u, v, capacity int, cost int64) int {
	f.arcs = append(f.arcs, arc{int32(v), int32(capacity), cost}, arc{int32(u), 0, -cost})
	return len(f.arcs) - 2
}

// flow is what runs on edge e.
func (f *network) flow(e int) int { return int(f.arcs[e^1].cap) }

// prepare indexes the edges by vertex, once all are added. A flow set
// on edges by hand before run must cost least for its size.
func (f *network) prepare() {
	f.first = grow(f.first, f.n+1, true)
	for e := range f.arcs {
		f.first[f.arcs[e^1].to+1]++
	}
	for v := range f.n {
		f.first[v+1] += f.first[v]
	}
	f.adj = grow(f.adj, len(f.arcs), false)
	f.iter = grow(f.iter, f.n, false)
	copy(f.iter, f.first)
	for e := range f.arcs {
		u := f.arcs[e^1].to
		f.adj[f.iter[u]] = int32(e)
		f.iter[u]++
	}
	f.pot = grow(f.pot, f.n, true)
	f.dist = grow(f.dist, f.n, false)
	f.level = grow(f.level, f.n, false)
}

// run pushes as much flow from s to t as the network carries, at the
// least cost, and returns how much. It stops once it has pushed most.
func (f *network) run(s, t, most int) int {
	if len(f.first) != f.n+1 {
		f.prepare()
	}
	total := f.free(s, t, most)
	for total < most && f.shortest(s, t) {
		total += f.blocking(s, t, most-total)
	}
	return total
}

// free pushes up to most over paths of zero reduced cost, which before
// run's first search are the paths that cost nothing, and returns how
// much.
func (f *network) free(s, t, most int) int {
	return f.blocking(s, t, most)
}

// blocking pushes up to most over edges of zero reduced cost, by
// blocking flows, and returns how much.
func (f *network) blocking(s, t, most int) int {
	total := 0
	for total < most && f.levels(s, t) {
		copy(f.iter, f.first[:f.n])
		for total < most {
			d := int(f.push(int32(s), int32(t), int32(min(most-total, math.MaxInt32))))
			if d == 0 {
				break
			}
			total += d
		}
	}
	return total
}

func (f *network) reduced(e, u int32) int64 {
	return f.arcs[e].cost + f.pot[u] - f.pot[f.arcs[e].to]
}

// shortest computes distances from s on reduced costs and folds them
// into the potentials, so that the edges of shortest paths cost zero
// and no edge with capacity costs less. It reports whether t is
// reachable.
func (f *network) shortest(s, t int) bool {
	for v := range f.dist {
		f.dist[v] = math.MaxInt64
	}
	f.dist[s] = 0
	f.heap = append(f.heap[:0], item{0, int32(s)})
	for len(f.heap) > 0 {
		it := f.pop()
		if it.d > f.dist[it.v] {
			continue
		}
		for _, e := range f.adj[f.first[it.v]:f.first[it.v+1]] {
			if f.arcs[e].cap == 0 {
				continue
			}
			v := f.arcs[e].to
			if d := it.d + f.reduced(e, it.v); d < f.dist[v] {
				f.dist[v] = d
				f.up(item{d, v})
			}
		}
	}
	if f.dist[t] == math.MaxInt64 {
		return false
	}
	for v, d := range f.dist {
		f.pot[v] += min(d, f.dist[t])
	}
	return true
}

// up adds an item to the heap.
func (f *network) up(it item) {
	h := append(f.heap, it)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p].d <= h[i].d {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	f.heap = h
}

// pop takes the nearest item off the heap.
func (f *network) pop() item {
	h := f.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if c+1 < len(h) && h[c+1].d < h[c].d {
			c++
		}
		if h[i].d <= h[c].d {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	f.heap = h
	return top
}

// levels numbers the vertices by their distance from s over edges with
// capacity and zero reduced cost, and reports whether t is among them.
func (f *network) levels(s, t int) bool {
	for v := range f.level {
		f.level[v] = -1
	}
	f.level[s] = 0
	f.queue = append(f.queue[:0], int32(s))
	for i := 0; i < len(f.queue); i++ {
		u := f.queue[i]
		for _, e := range f.adj[f.first[u]:f.first[u+1]] {
			v := f.arcs[e].to
			if f.arcs[e].cap > 0 && f.level[v] < 0 && f.reduced(e, u) == 0 {
				f.level[v] = f.level[u] + 1
				f.queue = append(f.queue, v)
			}
		}
	}
	return f.level[t] >= 0
}

// push sends up to most along one path of rising levels and returns how
// much it sent.
func (f *network) push(u, t, most int32) int32 {
	if u == t {
		return most
	}
	for ; f.iter[u] < f.first[u+1]; f.iter[u]++ {
		e := f.adj[f.iter[u]]
		v := f.arcs[e].to
		if f.arcs[e].cap == 0 || f.level[v] != f.level[u]+1 || f.reduced(e, u) != 0 {
			continue
		}
		if d := f.push(v, t, min(most, f.arcs[e].cap)); d > 0 {
			f.arcs[e].cap -= d
			f.arcs[e^1].cap += d
			return d
		}
	}
	return 0
}
