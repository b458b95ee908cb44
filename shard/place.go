package shard

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// Node is a node that may hold replicas. A node without a rack is a rack
// of its own.
type Node struct {
	ID   string
	Rack string
}

// Placement says which nodes hold each shard: Replicas[k] lists shard k's
// replicas by node id, its preferred leader first. Version counts the
// placements a cluster has had; Place raises it by one when it changes a
// replica list and leaves it alone when it does not.
type Placement struct {
	Version  uint64
	Replicas [][]string
}

// A Move takes one replica of Shard from node From to node To. From is
// empty when a shard gains a replica (it was short, or the replication
// factor grew) and To is empty when it loses one.
type Move struct {
	Shard    int
	From, To string
}

// ErrPlaceInput is wrapped by every error Place returns.
var ErrPlaceInput = errors.New("shard: bad placement input")

// Place returns where the cluster's shards should live on nodes, changing
// current as little as the rules allow. The rules, in order:
//
//  1. every shard has min(rf, len(nodes)) replicas, on distinct nodes;
//  2. even: every node holds ⌊S·R/N⌋ or ⌈S·R/N⌉ replicas (R replicas a
//     shard, S shards, N nodes);
//  3. rack-diverse: among the placements that meet 1 and 2, one with the
//     fewest pairs of a shard's replicas in one rack (see the package doc);
//  4. sticky: it copies the fewest replicas to nodes that did not hold
//     them that any placement meeting 1-3 can (see plan), and among
//     those keeps the most preferred leaders of current;
//  5. a new replica goes, among the nodes that serve equally, to the
//     highest rendezvous hash of (shard, node id).
//
// nodes are the nodes that may hold replicas: a node left out (removed,
// draining, declared dead) has its replicas placed elsewhere. Place is a
// pure function: it reads no clock, no randomness and no map order, and
// its result does not depend on the order of nodes. current may be the
// zero Placement (a first placement); its replica lists may name nodes
// that are gone and may have any length. Place on its own result returns
// that result.
func Place(shards, rf int, nodes []Node, current Placement) (Placement, error) {
	if shards < 1 {
		return Placement{}, fmt.Errorf("%w: %d shards", ErrPlaceInput, shards)
	}
	if rf < 1 {
		return Placement{}, fmt.Errorf("%w: replication factor %d", ErrPlaceInput, rf)
	}
	if len(nodes) == 0 {
		return Placement{}, fmt.Errorf("%w: no nodes", ErrPlaceInput)
	}
	if current.Replicas != nil && len(current.Replicas) != shards {
		return Placement{}, fmt.Errorf("%w: current placement has %d shards, not %d", ErrPlaceInput, len(current.Replicas), shards)
	}
	sorted := slices.Clone(nodes)
	slices.SortFunc(sorted, func(a, b Node) int { return strings.Compare(a.ID, b.ID) })
	for i, n := range sorted {
		if n.ID == "" {
			return Placement{}, fmt.Errorf("%w: a node without an id", ErrPlaceInput)
		}
		if i > 0 && sorted[i-1].ID == n.ID {
			return Placement{}, fmt.Errorf("%w: node %q twice", ErrPlaceInput, n.ID)
		}
	}
	p := newPlacer(shards, min(rf, len(sorted)), sorted)
	p.keep(current)
	if !p.plan(current) || !p.fill() {
		p.stripe()
	}
	p.balanceLeaders(current)
	return p.result(current), nil
}

// Moves lists what turns from into to, shard by shard: each replica that
// leaves a shard paired with one that arrives, in the order of the two
// lists. It does not order moves across shards or limit how many run at
// once: a caller makes one change per shard at a time.
func Moves(from, to Placement) []Move {
	var out []Move
	for k := range max(len(from.Replicas), len(to.Replicas)) {
		var old, cur []string
		if k < len(from.Replicas) {
			old = from.Replicas[k]
		}
		if k < len(to.Replicas) {
			cur = to.Replicas[k]
		}
		var gone, came []string
		for _, id := range old {
			if !slices.Contains(cur, id) {
				gone = append(gone, id)
			}
		}
		for _, id := range cur {
			if !slices.Contains(old, id) {
				came = append(came, id)
			}
		}
		for i := range max(len(gone), len(came)) {
			m := Move{Shard: k}
			if i < len(gone) {
				m.From = gone[i]
			}
			if i < len(came) {
				m.To = came[i]
			}
			out = append(out, m)
		}
	}
	return out
}

// placer holds one run of Place. Nodes are indexes into ids (sorted);
// racks are indexes into racks.
type placer struct {
	s, r   int
	ids    []string
	key    []uint64 // xxhash of each node id
	rackOf []int
	racks  []rack
	target []int
	load   []int
	reps   [][]int         // per shard, its nodes, preferred leader first
	held   [][]int         // per node, its shards
	fresh  map[[2]int]bool // (shard, node) replicas placed anew
	group  []int           // rack -> its pool in plan's network, or -1
	groups int             // how many pools
	want   []int           // per shard and pool, the replicas plan wants there
}

// A rack's share of the replicas is load = Σ targets of its nodes. It
// holds lo = ⌊load/S⌋ replicas of every shard and one more of hiCap
// shards (load mod S); hi counts the shards it holds more than lo of.
type rack struct {
	name  string
	nodes []int
	lo    int
	hiCap int
	hi    int
}

func newPlacer(shards, r int, nodes []Node) *placer {
	p := &placer{s: shards, r: r, fresh: map[[2]int]bool{}}
	n := len(nodes)
	p.ids = make([]string, n)
	p.key = make([]uint64, n)
	p.rackOf = make([]int, n)
	p.target = make([]int, n)
	p.load = make([]int, n)
	p.held = make([][]int, n)
	p.reps = make([][]int, shards)
	named := map[string]int{}
	for i, nd := range nodes {
		p.ids[i] = nd.ID
		p.key[i] = xxhash.Sum64String(nd.ID)
	}
	// Racks in name order (nodes without one, in id order, after), so
	// that rack indexes do not depend on the input's order.
	var names []string
	for _, nd := range nodes {
		if nd.Rack != "" {
			if _, ok := named[nd.Rack]; !ok {
				named[nd.Rack] = 0
				names = append(names, nd.Rack)
			}
		}
	}
	slices.Sort(names)
	for i, name := range names {
		named[name] = i
		p.racks = append(p.racks, rack{name: name})
	}
	for i, nd := range nodes {
		if nd.Rack == "" {
			p.rackOf[i] = len(p.racks)
			p.racks = append(p.racks, rack{})
		} else {
			p.rackOf[i] = named[nd.Rack]
		}
		p.racks[p.rackOf[i]].nodes = append(p.racks[p.rackOf[i]].nodes, i)
	}
	return p
}

// hrw is the rendezvous hash of a shard and a node.
func (p *placer) hrw(s, n int) uint64 {
	x := p.key[n] ^ (uint64(s)+1)*0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func (p *placer) has(s, n int) bool { return slices.Contains(p.reps[s], n) }

// inRack counts shard s's replicas in rack r.
func (p *placer) inRack(s, r int) int {
	c := 0
	for _, n := range p.reps[s] {
		if p.rackOf[n] == r {
			c++
		}
	}
	return c
}

// keep takes current's replicas on nodes that are still here.
func (p *placer) keep(current Placement) {
	idx := make(map[string]int, len(p.ids))
	for i, id := range p.ids {
		idx[id] = i
	}
	for s, ids := range current.Replicas {
		for _, id := range ids {
			if n, ok := idx[id]; ok && !p.has(s, n) {
				p.reps[s] = append(p.reps[s], n)
				p.held[n] = append(p.held[n], s)
				p.load[n]++
			}
		}
	}
}

func (p *placer) remove(s, n int) {
	r := p.rackOf[n]
	if p.inRack(s, r) == p.racks[r].lo+1 {
		p.racks[r].hi--
	}
	i := slices.Index(p.reps[s], n)
	p.reps[s] = slices.Delete(p.reps[s], i, i+1)
	j := slices.Index(p.held[n], s)
	p.held[n] = slices.Delete(p.held[n], j, j+1)
	p.load[n]--
}

func (p *placer) add(s, n int) {
	r := p.rackOf[n]
	if p.inRack(s, r) == p.racks[r].lo {
		p.racks[r].hi++
	}
	p.reps[s] = append(p.reps[s], n)
	p.held[n] = append(p.held[n], s)
	p.load[n]++
}

// rackTakes says whether rack r may take one more replica of shard s.
func (p *placer) rackTakes(s, r int) bool {
	rk := &p.racks[r]
	c := p.inRack(s, r)
	return c < rk.lo || c == rk.lo && rk.hi < rk.hiCap
}

func (p *placer) takes(s, n int) bool {
	return p.load[n] < p.target[n] && !p.has(s, n) && p.rackTakes(s, p.rackOf[n])
}

// fill gives every short shard the replicas plan left to it: each on a
// node with room in a rack plan counted on for the shard (or below its
// share of it) first, then the most room, then the highest rendezvous
// hash. When no node can take a shard it moves a replica placed anew
// along a chain, or makes room by moving another shard's replica
// (swap); it reports false if that fails too.
func (p *placer) fill() bool {
	var open []int
	for n := range p.ids {
		if p.load[n] < p.target[n] {
			open = append(open, n)
		}
	}
	// The shards with the fewest nodes to go to go first.
	var short []int
	choices := make([]int, p.s)
	for s := range p.reps {
		if len(p.reps[s]) < p.r {
			short = append(short, s)
			for _, n := range open {
				if p.takes(s, n) {
					choices[s]++
				}
			}
		}
	}
	slices.SortStableFunc(short, func(a, b int) int { return choices[a] - choices[b] })
	for _, s := range short {
		for len(p.reps[s]) < p.r {
			best := -1
			var bNeed bool
			var bRoom int
			var bHash uint64
			for _, n := range open {
				if !p.takes(s, n) {
					continue
				}
				need := p.planned(s, p.rackOf[n])
				room := p.target[n] - p.load[n]
				h := p.hrw(s, n)
				if best < 0 || need && !bNeed || need == bNeed && (room > bRoom || room == bRoom && h > bHash) {
					best, bNeed, bRoom, bHash = n, need, room, h
				}
			}
			if best < 0 && !p.chain(s) && !p.swap(s, open) {
				return false
			}
			if best >= 0 {
				p.add(s, best)
				p.fresh[[2]int{s, best}] = true
			}
			open = slices.DeleteFunc(open, func(n int) bool { return p.load[n] == p.target[n] })
		}
	}
	return true
}

// planned says whether rack r lacks a replica of shard s that plan
// counted on: one of its pool's, or one of its share lo.
func (p *placer) planned(s, r int) bool {
	g := p.group[r]
	if g < 0 {
		return p.inRack(s, r) < p.racks[r].lo
	}
	c := 0
	for _, n := range p.reps[s] {
		if p.group[p.rackOf[n]] == g {
			c++
		}
	}
	return c < p.want[s*p.groups+g] || p.inRack(s, r) < p.racks[r].lo
}

// hop says how chain reached a node: by moving shard from node from
// (-1: the shard being placed).
type hop struct{ from, shard int }

// chain places one replica of shard s along a path of replicas placed
// anew (moving one costs no extra copy): s goes to a full node
// m1, a fresh replica on m1 moves to m2, and so on to a node with room.
// It searches breadth first and reports whether it found one.
func (p *placer) chain(s int) bool {
	via := make(map[int]hop)
	var queue []int
	for m := range p.ids {
		if !p.has(s, m) && p.rackTakes(s, p.rackOf[m]) {
			via[m] = hop{-1, s}
			queue = append(queue, m)
		}
	}
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		for _, t := range p.held[m] {
			if !p.fresh[[2]int{t, m}] || t == s {
				continue
			}
			for n := range p.ids {
				if _, ok := via[n]; ok || p.has(t, n) {
					continue
				}
				r := p.rackOf[n]
				c := p.inRack(t, r)
				if r == p.rackOf[m] {
					c--
				}
				if rk := &p.racks[r]; !(c < rk.lo || c == rk.lo && rk.hi < rk.hiCap) {
					continue
				}
				via[n] = hop{m, t}
				if p.load[n] < p.target[n] {
					return p.applyChain(n, via)
				}
				queue = append(queue, n)
			}
		}
	}
	return false
}

// applyChain moves the replicas along the path that ends at node end,
// last hop first, and undoes them if a step is no longer allowed.
func (p *placer) applyChain(end int, via map[int]hop) bool {
	type step struct{ shard, from, to int }
	var done []step
	undo := func() {
		for i := len(done) - 1; i >= 0; i-- {
			d := done[i]
			p.remove(d.shard, d.to)
			delete(p.fresh, [2]int{d.shard, d.to})
			if d.from >= 0 {
				p.add(d.shard, d.from)
				p.fresh[[2]int{d.shard, d.from}] = true
			}
		}
	}
	for n := end; n >= 0; {
		h := via[n]
		if h.from >= 0 {
			p.remove(h.shard, h.from)
			delete(p.fresh, [2]int{h.shard, h.from})
		}
		if !p.takes(h.shard, n) {
			if h.from >= 0 {
				p.add(h.shard, h.from)
				p.fresh[[2]int{h.shard, h.from}] = true
			}
			undo()
			return false
		}
		p.add(h.shard, n)
		p.fresh[[2]int{h.shard, n}] = true
		done = append(done, step{h.shard, h.from, n})
		n = h.from
	}
	return true
}

// swap places one replica of shard s by moving a replica of another
// shard t from a node m to a node n with room, then placing s on m. It
// moves a replica placed anew (which costs no extra copy) before one
// that was kept.
func (p *placer) swap(s int, open []int) bool {
	for _, freshOnly := range []bool{true, false} {
		for _, n := range open {
			for m := range p.ids {
				if m == n || p.has(s, m) {
					continue
				}
				for _, t := range slices.Clone(p.held[m]) {
					if t == s || p.has(t, n) || p.fresh[[2]int{t, m}] != freshOnly {
						continue
					}
					reps, held := slices.Clone(p.reps[t]), slices.Clone(p.held[m])
					p.remove(t, m)
					if p.takes(t, n) {
						p.add(t, n)
						if p.takes(s, m) {
							p.add(s, m)
							delete(p.fresh, [2]int{t, m})
							p.fresh[[2]int{t, n}] = true
							p.fresh[[2]int{s, m}] = true
							return true
						}
						p.remove(t, n)
					}
					p.add(t, m)
					p.reps[t], p.held[m] = reps, held
				}
			}
		}
	}
	return false
}

// stripe places every shard afresh: nodes in rack order, each taking its
// target's worth of consecutive slots, slot i going to shard i mod S.
// A node's slots are at most S in a row, so it never holds a shard
// twice, and a rack's slots spread over the shards as evenly as they
// can. It is the fallback when fill cannot keep the current replicas.
func (p *placer) stripe() {
	for s := range p.reps {
		p.reps[s] = p.reps[s][:0]
	}
	for n := range p.held {
		p.held[n] = p.held[n][:0]
		p.load[n] = 0
	}
	for ri := range p.racks {
		p.racks[ri].hi = 0
	}
	slot := 0
	for _, rk := range p.racks {
		for _, n := range rk.nodes {
			for range p.target[n] {
				p.add(slot%p.s, n)
				slot++
			}
		}
	}
}

// balanceLeaders puts a preferred leader first in every shard's list so
// that no node is first in more than ⌈S/N⌉ shards. Such a choice always
// exists: a node holds at most ⌈S·R/N⌉ ≤ R·⌈S/N⌉ replicas, so any k
// shards have replicas on at least k/⌈S/N⌉ nodes (Hall's condition). A
// shard keeps its current first replica while that node is under the
// limit; the others take the replica first in fewest shards so far, and
// when all of a shard's replicas are at the limit, an augmenting path
// hands one of their shards to another of its replicas (Kuhn's
// algorithm).
func (p *placer) balanceLeaders(current Placement) {
	l := leaders{
		p:     p,
		limit: (p.s + len(p.ids) - 1) / len(p.ids),
		of:    make([]int, p.s),
		led:   make([][]int, len(p.ids)),
		seen:  make([]int, len(p.ids)),
	}
	for s := range l.of {
		l.of[s] = -1
	}
	for s, reps := range p.reps {
		if len(current.Replicas) <= s || len(current.Replicas[s]) == 0 {
			continue
		}
		i := slices.IndexFunc(reps, func(n int) bool { return p.ids[n] == current.Replicas[s][0] })
		if i >= 0 && len(l.led[reps[i]]) < l.limit {
			l.set(s, reps[i])
		}
	}
	for s, reps := range p.reps {
		if l.of[s] >= 0 || len(reps) == 0 {
			continue
		}
		best := -1
		for _, n := range reps {
			if len(l.led[n]) < l.limit && (best < 0 || len(l.led[n]) < len(l.led[best]) ||
				len(l.led[n]) == len(l.led[best]) && p.hrw(s, n) > p.hrw(s, best)) {
				best = n
			}
		}
		if best >= 0 {
			l.set(s, best)
			continue
		}
		l.round++
		l.augment(s)
	}
	for s, reps := range p.reps {
		if len(reps) > 0 {
			i := slices.Index(reps, l.of[s])
			reps[0], reps[i] = reps[i], reps[0]
		}
	}
}

type leaders struct {
	p     *placer
	limit int
	of    []int   // shard -> its leader node, -1 for none yet
	led   [][]int // node -> the shards it leads
	seen  []int   // node -> the augment round that last visited it
	round int
}

func (l *leaders) set(s, n int) {
	if o := l.of[s]; o >= 0 {
		i := slices.Index(l.led[o], s)
		l.led[o] = slices.Delete(l.led[o], i, i+1)
	}
	l.of[s] = n
	l.led[n] = append(l.led[n], s)
}

// augment finds shard s a leader, moving other shards' leaders along a
// path to a node under the limit.
func (l *leaders) augment(s int) bool {
	for _, n := range l.p.reps[s] {
		if l.seen[n] == l.round {
			continue
		}
		l.seen[n] = l.round
		if len(l.led[n]) < l.limit {
			l.set(s, n)
			return true
		}
		for _, t := range slices.Clone(l.led[n]) {
			if t != s && l.augment(t) {
				l.set(s, n)
				return true
			}
		}
	}
	return false
}

func (p *placer) result(current Placement) Placement {
	out := Placement{Version: current.Version, Replicas: make([][]string, p.s)}
	same := len(current.Replicas) == p.s
	for s, reps := range p.reps {
		ids := make([]string, len(reps))
		for i, n := range reps {
			ids[i] = p.ids[n]
		}
		out.Replicas[s] = ids
		if same && !slices.Equal(ids, current.Replicas[s]) {
			same = false
		}
	}
	if !same {
		out.Version++
	}
	return out
}
