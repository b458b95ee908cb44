package shard

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// placeSeed seeds the random clusters: go test ./shard -run TestPlace
// -place.seed N tries other ones.
var placeSeed = flag.Uint64("place.seed", 41, "seed of the random clusters placement tests place")

// rackMode says how a test cluster's nodes are spread over racks.
type rackMode int

const (
	noRacks    rackMode = iota // every node a rack of its own
	oneRack                    // all nodes in one rack
	evenRacks                  // k racks, nodes round-robin
	unevenRack                 // k racks of random, unequal sizes
	someRacks                  // some nodes in racks, the others without one
	rackModes
)

func (m rackMode) String() string {
	return [...]string{"no racks", "one rack", "even racks", "uneven racks", "some racks"}[m]
}

type cluster struct {
	mode  rackMode
	racks int
	next  int // id of the next node to join
	nodes []Node
}

func newCluster(rng *rand.Rand, mode rackMode, n int) *cluster {
	c := &cluster{mode: mode, racks: 1 + rng.IntN(6)}
	for range n {
		c.join(rng)
	}
	return c
}

// join adds a node and returns it.
func (c *cluster) join(rng *rand.Rand) Node {
	nd := Node{ID: fmt.Sprintf("node-%04d", c.next)}
	c.next++
	switch c.mode {
	case oneRack:
		nd.Rack = "r"
	case evenRacks:
		nd.Rack = fmt.Sprintf("r%d", c.next%c.racks)
	case unevenRack:
		// Rack i is about twice as likely as rack i+1.
		i := 0
		for i < c.racks-1 && rng.IntN(2) == 0 {
			i++
		}
		nd.Rack = fmt.Sprintf("r%d", i)
	case someRacks:
		if rng.IntN(2) == 0 {
			nd.Rack = fmt.Sprintf("r%d", rng.IntN(c.racks))
		}
	}
	c.nodes = append(c.nodes, nd)
	return nd
}

func (c *cluster) remove(rng *rand.Rand) Node {
	i := rng.IntN(len(c.nodes))
	nd := c.nodes[i]
	c.nodes = slices.Delete(slices.Clone(c.nodes), i, i+1)
	return nd
}

func mustPlace(t testing.TB, shards, rf int, nodes []Node, cur Placement) Placement {
	t.Helper()
	p, err := Place(shards, rf, nodes, cur)
	if err != nil {
		t.Fatalf("Place(%d shards, rf %d, %d nodes): %v", shards, rf, len(nodes), err)
	}
	return p
}

// rackKeys names each node's rack as Place sees it: a node without a
// rack is a rack of its own.
func rackKeys(nodes []Node) map[string]string {
	m := make(map[string]string, len(nodes))
	for _, n := range nodes {
		if n.Rack == "" {
			m[n.ID] = "\x00" + n.ID
		} else {
			m[n.ID] = n.Rack
		}
	}
	return m
}

func pairs(c int) int { return c * (c - 1) / 2 }

// rackPairs is the least number of same-rack replica pairs a rack with
// load replicas can hold over S shards: as even as can be, ⌊load/S⌋ or
// one more of each shard.
func rackPairs(load, shards int) int {
	q, rem := load/shards, load%shards
	return rem*pairs(q+1) + (shards-rem)*pairs(q)
}

// minPairs is the fewest same-rack replica pairs of any placement whose
// node loads are even (⌊T/N⌋ or ⌈T/N⌉): a dynamic program over how many
// of the T mod N extra replicas each rack takes, written apart from
// Place's greedy choice so that one checks the other.
func minPairs(nodes []Node, shards, r int) int {
	size := map[string]int{}
	for _, k := range rackKeys(nodes) {
		size[k]++
	}
	total := shards * r
	base, extra := total/len(nodes), total%len(nodes)
	const inf = 1 << 60
	dp := make([]int, extra+1)
	for e := 1; e <= extra; e++ {
		dp[e] = inf
	}
	keys := make([]string, 0, len(size))
	for k := range size {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		n := size[k]
		nd := make([]int, extra+1)
		for e := range nd {
			nd[e] = inf
			for x := 0; x <= min(n, e); x++ {
				if dp[e-x] < inf {
					nd[e] = min(nd[e], dp[e-x]+rackPairs(base*n+x, shards))
				}
			}
		}
		dp = nd
	}
	return dp[extra]
}

// check asserts the placement rules: R = min(rf, N) distinct replicas a
// shard on known nodes, node loads within one of each other (⌊T/N⌋ or
// ⌈T/N⌉), and no more same-rack pairs than the fewest any even
// placement has.
func check(t testing.TB, shards, rf int, nodes []Node, p Placement) {
	t.Helper()
	r := min(rf, len(nodes))
	if len(p.Replicas) != shards {
		t.Fatalf("%d shards placed, want %d", len(p.Replicas), shards)
	}
	racks := rackKeys(nodes)
	load := map[string]int{}
	got := 0
	for s, reps := range p.Replicas {
		if len(reps) != r {
			t.Fatalf("shard %d has %d replicas %v, want %d", s, len(reps), reps, r)
		}
		in := map[string]int{}
		for i, id := range reps {
			if _, ok := racks[id]; !ok {
				t.Fatalf("shard %d on unknown node %q", s, id)
			}
			if slices.Index(reps, id) != i {
				t.Fatalf("shard %d twice on %q: %v", s, id, reps)
			}
			load[id]++
			in[racks[id]]++
		}
		for _, c := range in {
			got += pairs(c)
		}
	}
	total := shards * r
	lo, hi := total/len(nodes), (total+len(nodes)-1)/len(nodes)
	for _, n := range nodes {
		if l := load[n.ID]; l < lo || l > hi {
			t.Fatalf("node %s holds %d replicas, want %d..%d (%d shards, R %d, %d nodes)", n.ID, l, lo, hi, shards, r, len(nodes))
		}
	}
	leads := map[string]int{}
	for _, reps := range p.Replicas {
		leads[reps[0]]++
	}
	for id, l := range leads {
		if limit := (shards + len(nodes) - 1) / len(nodes); l > limit {
			t.Fatalf("node %s is first in %d shards, more than %d", id, l, limit)
		}
	}
	if want := minPairs(nodes, shards, r); got != want {
		t.Fatalf("%d same-rack replica pairs, the fewest an even placement has is %d", got, want)
	}
}

// added counts replicas that to places on a node that from did not:
// each is a replica to copy.
func added(from, to Placement) int {
	n := 0
	for _, m := range Moves(from, to) {
		if m.To != "" {
			n++
		}
	}
	return n
}

// fewestAdded is a lower bound on the replicas any placement of shards
// on nodes that meets the rules must add to cur: each shard short of R
// must gain what it lacks, and the replicas cur keeps are at most, on
// each node, what the node may hold (⌈T/N⌉ on at most T mod N nodes,
// ⌊T/N⌋ on the others).
func fewestAdded(shards, rf int, nodes []Node, cur Placement) int {
	r := min(rf, len(nodes))
	here := map[string]bool{}
	for _, n := range nodes {
		here[n.ID] = true
	}
	short := 0
	keep := map[string]int{}
	for _, reps := range cur.Replicas {
		live := 0
		for _, id := range reps {
			if here[id] {
				live++
				keep[id]++
			}
		}
		short += max(0, r-live)
	}
	total := shards * r
	base, extra := total/len(nodes), total%len(nodes)
	kept, above := 0, 0
	for _, n := range nodes {
		kept += min(keep[n.ID], base)
		if keep[n.ID] > base {
			above++
		}
	}
	kept += min(extra, above)
	return max(short, total-kept)
}

// checkSticky asserts that going from cur to next added at most 10% more
// replicas than any placement meeting the rules must: the larger of
// fewestAdded and fewestCopies, both lower bounds whichever nodes take
// the extra replicas. It records the worst ratio seen.
func checkSticky(t testing.TB, what string, mode rackMode, shards, rf int, nodes []Node, cur, next Placement) (moved, least int) {
	t.Helper()
	moved = added(cur, next)
	least = max(fewestAdded(shards, rf, nodes, cur), fewestCopies(shards, rf, nodes, cur))
	if least > 0 {
		worstRatio = max(worstRatio, float64(moved)/float64(least))
	}
	if moved > least+least/10 {
		t.Fatalf("%s: %d replicas moved, at least %d needed (%d shards, rf %d, %d nodes, %s)", what, moved, least, shards, rf, len(nodes), mode)
	}
	return moved, least
}

// worstRatio is the most replicas a join or removal moved, as a ratio of
// the fewest it had to, in the test running.
var worstRatio float64

// diff names the first difference between two placements.
func diff(a, b Placement) string {
	for s := range min(len(a.Replicas), len(b.Replicas)) {
		if !slices.Equal(a.Replicas[s], b.Replicas[s]) {
			return fmt.Sprintf("shard %d on %v, then %v", s, a.Replicas[s], b.Replicas[s])
		}
	}
	if len(a.Replicas) != len(b.Replicas) {
		return fmt.Sprintf("%d shards, then %d", len(a.Replicas), len(b.Replicas))
	}
	return fmt.Sprintf("version %d, then %d", a.Version, b.Version)
}

func shuffled(rng *rand.Rand, nodes []Node) []Node {
	out := slices.Clone(nodes)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// placeCase runs one cluster through a first placement, a shuffled
// input, a second run on the result, a join and a removal.
func placeCase(t *testing.T, rng *rand.Rand, mode rackMode, n, shards, rf int) (moved, least int) {
	t.Helper()
	c := newCluster(rng, mode, n)
	p := mustPlace(t, shards, rf, c.nodes, Placement{})
	check(t, shards, rf, c.nodes, p)
	if p.Version != 1 {
		t.Fatalf("first placement has version %d, want 1", p.Version)
	}
	if q := mustPlace(t, shards, rf, shuffled(rng, c.nodes), Placement{}); !reflect.DeepEqual(p, q) {
		t.Fatalf("shuffled nodes place otherwise:\n%s", diff(p, q))
	}
	if q := mustPlace(t, shards, rf, shuffled(rng, c.nodes), p); !reflect.DeepEqual(p, q) {
		t.Fatalf("placing a placement again changes it:\n%s", diff(p, q))
	}

	c.join(rng)
	j := mustPlace(t, shards, rf, c.nodes, p)
	check(t, shards, rf, c.nodes, j)
	m, l := checkSticky(t, "join", mode, shards, rf, c.nodes, p, j)
	moved, least = moved+m, least+l
	if q := mustPlace(t, shards, rf, shuffled(rng, c.nodes), j); !reflect.DeepEqual(j, q) {
		t.Fatalf("placing a placement again after a join changes it:\n%s", diff(j, q))
	}

	if len(c.nodes) > 1 {
		c.remove(rng)
		d := mustPlace(t, shards, rf, c.nodes, j)
		check(t, shards, rf, c.nodes, d)
		m, l := checkSticky(t, "removal", mode, shards, rf, c.nodes, j, d)
		moved, least = moved+m, least+l
		if q := mustPlace(t, shards, rf, shuffled(rng, c.nodes), d); !reflect.DeepEqual(d, q) {
			t.Fatalf("placing a placement again after a removal changes it:\n%s", diff(d, q))
		}
	}
	return moved, least
}

// TestPlaceProperties places random clusters: up to 1,000 nodes, 1,024
// shards, replication factors 1 to 5, every rack mode.
func TestPlaceProperties(t *testing.T) {
	worstRatio = 0
	moved, least := 0, 0
	for i := range 45 {
		rng := rand.New(rand.NewPCG(*placeSeed, uint64(i))) // each case on its own
		mode := rackMode(i % int(rackModes))
		n := 1 + rng.IntN(12)
		if i%3 == 0 {
			n = 1 + rng.IntN(200)
		}
		if i%20 == 0 {
			n = 1 + rng.IntN(1000)
		}
		shards, rf := 1+rng.IntN(1024), 1+rng.IntN(5)
		t.Run(fmt.Sprintf("%d/%s/n%d/s%d/rf%d", i, mode, n, shards, rf), func(t *testing.T) {
			m, l := placeCase(t, rng, mode, n, shards, rf)
			moved, least = moved+m, least+l
		})
	}
	t.Logf("joins and removals moved %d replicas, at least %d needed; the worst moved %.3f times what it had to", moved, least, worstRatio)
}

// TestPlaceExtremes runs the largest and smallest sizes once each. It
// takes several seconds under the race detector, which the same code
// already runs under in TestPlaceProperties, so it runs without it.
func TestPlaceExtremes(t *testing.T) {
	if raceOn {
		t.Skip("the race detector makes the largest sizes slow; run without -race")
	}
	rng := rand.New(rand.NewPCG(*placeSeed, 8))
	for _, c := range []struct {
		mode      rackMode
		n, shards int
		rf        int
	}{
		{noRacks, 1000, 1024, 5},
		{unevenRack, 1000, 1024, 3},
		{oneRack, 1000, 1, 5},
		{noRacks, 1, 1024, 3},
		{noRacks, 2, 1024, 3},
		{evenRacks, 3, 1, 1},
	} {
		t.Run(fmt.Sprintf("%s/n%d/s%d/rf%d", c.mode, c.n, c.shards, c.rf), func(t *testing.T) {
			placeCase(t, rng, c.mode, c.n, c.shards, c.rf)
		})
	}
}

// TestPlaceGrowAndShrink grows a cluster one node at a time and shrinks
// it again, each step from the last placement.
func TestPlaceGrowAndShrink(t *testing.T) {
	worstRatio = 0
	rng := rand.New(rand.NewPCG(*placeSeed, 9))
	for mode := range rackModes {
		t.Run(mode.String(), func(t *testing.T) {
			const shards, rf = 64, 3
			c := newCluster(rng, mode, 1)
			p := mustPlace(t, shards, rf, c.nodes, Placement{})
			for range 11 {
				c.join(rng)
				q := mustPlace(t, shards, rf, c.nodes, p)
				check(t, shards, rf, c.nodes, q)
				checkSticky(t, "join", mode, shards, rf, c.nodes, p, q)
				p = q
			}
			for len(c.nodes) > 1 {
				c.remove(rng)
				q := mustPlace(t, shards, rf, c.nodes, p)
				check(t, shards, rf, c.nodes, q)
				checkSticky(t, "removal", mode, shards, rf, c.nodes, p, q)
				p = q
			}
		})
	}
	t.Logf("the worst step moved %.3f times what it had to", worstRatio)
}

// TestPlaceBigChanges takes a third of a cluster away at once, raises
// the replication factor, and adds the nodes back: each step copies no
// more than the 10% rule allows. Large racks pool their new replicas
// here, which the smaller cases rarely reach. It runs without the race
// detector, as TestPlaceExtremes does.
func TestPlaceBigChanges(t *testing.T) {
	if raceOn {
		t.Skip("the race detector makes the largest sizes slow; run without -race")
	}
	worstRatio = 0
	rng := rand.New(rand.NewPCG(*placeSeed, 12))
	for mode := range rackModes {
		t.Run(mode.String(), func(t *testing.T) {
			const shards = 1024
			c := newCluster(rng, mode, 200)
			p := mustPlace(t, shards, 3, c.nodes, Placement{})
			for range 60 {
				c.remove(rng)
			}
			q := mustPlace(t, shards, 3, c.nodes, p)
			check(t, shards, 3, c.nodes, q)
			checkSticky(t, "removing 60 nodes", mode, shards, 3, c.nodes, p, q)
			r := mustPlace(t, shards, 5, c.nodes, q)
			check(t, shards, 5, c.nodes, r)
			checkSticky(t, "rf 3 to 5", mode, shards, 5, c.nodes, q, r)
			for range 60 {
				c.join(rng)
			}
			s := mustPlace(t, shards, 5, c.nodes, r)
			check(t, shards, 5, c.nodes, s)
			checkSticky(t, "adding 60 nodes", mode, shards, 5, c.nodes, r, s)
		})
	}
	t.Logf("the worst step moved %.3f times what it had to", worstRatio)
}

func TestPlaceBadInput(t *testing.T) {
	nodes := []Node{{ID: "a"}, {ID: "b"}}
	for _, c := range []struct {
		name   string
		shards int
		rf     int
		nodes  []Node
		cur    Placement
	}{
		{"no shards", 0, 3, nodes, Placement{}},
		{"rf 0", 4, 0, nodes, Placement{}},
		{"no nodes", 4, 3, nil, Placement{}},
		{"node without id", 4, 3, []Node{{ID: "a"}, {Rack: "r"}}, Placement{}},
		{"node twice", 4, 3, []Node{{ID: "a"}, {ID: "b"}, {ID: "a", Rack: "r"}}, Placement{}},
		{"current of another shard count", 4, 3, nodes, Placement{Replicas: make([][]string, 3)}},
	} {
		if p, err := Place(c.shards, c.rf, c.nodes, c.cur); !errors.Is(err, ErrPlaceInput) {
			t.Errorf("%s: Place = %v, %v; want ErrPlaceInput", c.name, p, err)
		}
	}
}

// A lower replication factor drops followers: without racks or in one
// rack it copies nothing and every preferred leader stays; with racks,
// whose shares change with R, it copies no more than the rule allows.
func TestPlaceRFFalls(t *testing.T) {
	rng := rand.New(rand.NewPCG(*placeSeed, 11))
	for mode := range rackModes {
		c := newCluster(rng, mode, 12)
		p := mustPlace(t, 64, 3, c.nodes, Placement{})
		q := mustPlace(t, 64, 2, c.nodes, p)
		check(t, 64, 2, c.nodes, q)
		checkSticky(t, "rf 3 to 2", mode, 64, 2, c.nodes, p, q)
		if mode != noRacks && mode != oneRack {
			continue
		}
		for s := range p.Replicas {
			if q.Replicas[s][0] != p.Replicas[s][0] {
				t.Fatalf("%s: shard %d led by %s, then %s", mode, s, p.Replicas[s][0], q.Replicas[s][0])
			}
		}
		if n := added(p, q); n != 0 {
			t.Fatalf("%s: rf 3 to 2 copied %d replicas: %v", mode, n, Moves(p, q))
		}
	}
}

// A cluster smaller than the replication factor has every shard on every
// node; one more node and each shard leaves one of them.
func TestPlaceFewerNodesThanRF(t *testing.T) {
	nodes := []Node{{ID: "b"}, {ID: "a"}}
	p := mustPlace(t, 4, 3, nodes, Placement{})
	for s, reps := range p.Replicas {
		if got := slices.Sorted(slices.Values(reps)); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("shard %d on %v, want a and b", s, reps)
		}
	}
	q := mustPlace(t, 4, 3, append(nodes, Node{ID: "c"}), p)
	if q.Version != 2 || len(Moves(p, q)) != 4 {
		t.Fatalf("a third node: version %d, moves %v; want version 2 and one new replica a shard", q.Version, Moves(p, q))
	}
	for _, m := range Moves(p, q) {
		if m.From != "" || m.To != "c" {
			t.Fatalf("move %+v, want every shard to gain c", m)
		}
	}
}

// Three racks of two nodes, replication factor 3: every shard in every
// rack. A node lost: only its replicas move, and evenness wins over
// racks: its rack, now one node, takes no more than that node's share
// (⌈48/5⌉ = 10 of the 16 shards), so 6 shards end with two replicas in
// one rack, the fewest an even placement allows.
func TestPlaceRacks(t *testing.T) {
	var nodes []Node
	for i := range 6 {
		nodes = append(nodes, Node{ID: fmt.Sprintf("n%d", i), Rack: fmt.Sprintf("r%d", i%3)})
	}
	rack := rackKeys(nodes)
	p := mustPlace(t, 16, 3, nodes, Placement{})
	for s, reps := range p.Replicas {
		if rack[reps[0]] == rack[reps[1]] || rack[reps[1]] == rack[reps[2]] || rack[reps[0]] == rack[reps[2]] {
			t.Fatalf("shard %d on %v: two in one rack", s, reps)
		}
	}
	q := mustPlace(t, 16, 3, nodes[1:], p)
	check(t, 16, 3, nodes[1:], q)
	held := 0
	for _, reps := range p.Replicas {
		if slices.Contains(reps, "n0") {
			held++
		}
	}
	moves := Moves(p, q)
	if len(moves) != held {
		t.Fatalf("n0 held %d replicas; %d moves: %v", held, len(moves), moves)
	}
	doubled := 0
	for _, reps := range q.Replicas {
		if len(map[string]bool{rack[reps[0]]: true, rack[reps[1]]: true, rack[reps[2]]: true}) < 3 {
			doubled++
		}
	}
	if doubled != 6 {
		t.Fatalf("%d shards with two replicas in a rack, want 6", doubled)
	}
}

func TestMoves(t *testing.T) {
	from := Placement{Replicas: [][]string{{"a", "b", "c"}, {"a", "b"}, {"c"}}}
	to := Placement{Replicas: [][]string{{"b", "d", "c"}, {"a", "b", "e"}, {}}}
	want := []Move{{0, "a", "d"}, {1, "", "e"}, {2, "c", ""}}
	if got := Moves(from, to); !slices.Equal(got, want) {
		t.Fatalf("Moves = %v, want %v", got, want)
	}
}

// BenchmarkPlace places 1,024 shards at replication factor 3 on 1,000
// nodes in 3 racks, then again after a node joins.
func BenchmarkPlace(b *testing.B) {
	var nodes []Node
	for i := range 1000 {
		nodes = append(nodes, Node{ID: fmt.Sprintf("node-%04d", i), Rack: fmt.Sprintf("r%d", i%3)})
	}
	first := mustPlace(b, 1024, 3, nodes, Placement{})
	joined := append(slices.Clone(nodes), Node{ID: "node-1000", Rack: "r0"})
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			mustPlace(b, 1024, 3, nodes, Placement{})
		}
	})
	b.Run("join", func(b *testing.B) {
		for b.Loop() {
			mustPlace(b, 1024, 3, joined, first)
		}
	})
}
