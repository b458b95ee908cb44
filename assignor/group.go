package assignor

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"strings"
	"sync"
)

// group is the dense, integer-indexed view of one Balance call that every
// assignor works on.
//
// Members are numbered 0..M-1 in Kafka's member order. Topics that some member
// subscribes to and that have at least one partition are numbered 0..T-1 in
// name order, and partition p of topic t has the global index base[t]+p, so
// that partitions 0..P-1 are ordered by (topic name, partition) exactly as
// Kafka's assignors enumerate them. Members with identical topic lists share
// one resolved subscription (a "class"), which keeps the string work at
// O(number of distinct lists x topics) instead of O(M x T) map lookups.
type group struct {
	sc    *scratchBufs
	in    []Member
	order []int32 // member index -> index into in

	topicNames []string
	topicIdx   map[string]int32
	base       []int32 // len T+1; base[T] == P
	P          int

	class      []int32   // member -> class
	classTops  [][]int32 // class -> sorted topic indices
	classBits  [][]uint64
	uniform    bool      // every member subscribes to the same topic set
	allTopics  bool      // ... and that set is every topic (always true if uniform)
	tsubs      [][]int32 // topic -> subscribing members, in member order
	subsBuilt  bool
	rackAware  bool
	memberRack []int8   // -1 when the member has no usable rack
	partRacks  []uint64 // global partition -> bitmask of member racks among its replicas
}

func (g *group) M() int { return len(g.order) }
func (g *group) T() int { return len(g.topicNames) }

func (g *group) member(m int32) *Member { return &g.in[g.order[m]] }

// topicOf returns the topic of global partition p by binary search.
func (g *group) topicOf(p int32) int32 {
	lo, hi := 0, len(g.topicNames)-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if g.base[mid] <= p {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return int32(lo)
}

// subscribes reports whether member m subscribes to topic t.
func (g *group) subscribes(m, t int32) bool {
	if g.uniform {
		return true
	}
	b := g.classBits[g.class[m]]
	return b[t>>6]&(1<<(uint(t)&63)) != 0
}

func memberLess(a, b *Member) int {
	switch {
	case a.InstanceID != "" && b.InstanceID == "":
		return -1
	case a.InstanceID == "" && b.InstanceID != "":
		return 1
	case a.InstanceID != b.InstanceID:
		return strings.Compare(a.InstanceID, b.InstanceID)
	}
	return strings.Compare(a.ID, b.ID)
}

func newGroup(in []Member, partitions map[string]int32, racks PartitionRacks) *group {
	g := &group{in: in}

	// Deduplicate member ids (first occurrence wins) and sort.
	order := make([]int32, 0, len(in))
	seen := make(map[string]struct{}, len(in))
	for i := range in {
		if _, dup := seen[in[i].ID]; dup {
			continue
		}
		seen[in[i].ID] = struct{}{}
		order = append(order, int32(i))
	}
	slices.SortFunc(order, func(a, b int32) int { return memberLess(&in[a], &in[b]) })
	g.order = order
	M := len(order)

	// Group members by identical raw topic lists. Consecutive members
	// usually share a list (and, when decoded by one Decoder, the same
	// string memory, which makes the comparison cheap).
	g.class = make([]int32, M)
	var rawClasses [][]string
	var byKey map[string]int32
	for m := range M {
		ts := in[order[m]].Subscription.Topics
		if m > 0 {
			prev := g.class[m-1]
			if sameStrings(rawClasses[prev], ts) {
				g.class[m] = prev
				continue
			}
		}
		if byKey == nil {
			byKey = make(map[string]int32)
		}
		key := strings.Join(ts, "\x00")
		c, ok := byKey[key]
		if !ok {
			c = int32(len(rawClasses))
			byKey[key] = c
			rawClasses = append(rawClasses, ts)
		}
		g.class[m] = c
	}

	// Topics: union of subscribed topics that exist with partitions.
	union := make(map[string]struct{})
	for _, ts := range rawClasses {
		for _, t := range ts {
			if n := partitions[t]; n > 0 {
				union[t] = struct{}{}
			}
		}
	}
	g.topicNames = make([]string, 0, len(union))
	for t := range union {
		g.topicNames = append(g.topicNames, t)
	}
	slices.Sort(g.topicNames)
	T := len(g.topicNames)
	g.topicIdx = make(map[string]int32, T)
	g.base = make([]int32, T+1)
	for i, t := range g.topicNames {
		g.topicIdx[t] = int32(i)
		g.base[i+1] = g.base[i] + partitions[t]
	}
	g.P = int(g.base[T])

	// Resolve classes to sorted topic-index sets; merge classes that resolve
	// to the same set.
	words := (T + 63) / 64
	resolvedKey := make(map[string]int32)
	remap := make([]int32, len(rawClasses))
	for c, ts := range rawClasses {
		idx := make([]int32, 0, len(ts))
		for _, t := range ts {
			if i, ok := g.topicIdx[t]; ok {
				idx = append(idx, i)
			}
		}
		slices.Sort(idx)
		idx = slices.Compact(idx)
		kb := make([]byte, 0, 4*len(idx))
		for _, i := range idx {
			kb = binary.LittleEndian.AppendUint32(kb, uint32(i))
		}
		k := string(kb)
		nc, ok := resolvedKey[k]
		if !ok {
			nc = int32(len(g.classTops))
			resolvedKey[k] = nc
			g.classTops = append(g.classTops, idx)
			bs := make([]uint64, words)
			for _, i := range idx {
				bs[i>>6] |= 1 << (uint(i) & 63)
			}
			g.classBits = append(g.classBits, bs)
		}
		remap[c] = nc
	}
	for m := range g.class {
		g.class[m] = remap[g.class[m]]
	}
	g.uniform = len(g.classTops) <= 1
	g.allTopics = g.uniform // the union of one class is all topics

	g.setupRacks(racks)
	return g
}

// buildSubscribers fills tsubs (topic -> subscribing members in member
// order). A topic subscribed by a single class shares that class's member
// list; other topics merge the lists of their classes. Cost: O(M + sum of
// class sizes) plus the merged lists.
func (g *group) buildSubscribers() {
	if g.subsBuilt {
		return
	}
	g.subsBuilt = true
	T := g.T()
	nc := len(g.classTops)
	classMembers := make([][]int32, nc)
	for m := range g.M() {
		c := g.class[m]
		classMembers[c] = append(classMembers[c], int32(m))
	}
	topicClasses := make([][]int32, T)
	for c, ts := range g.classTops {
		if len(classMembers[c]) == 0 {
			continue
		}
		for _, t := range ts {
			topicClasses[t] = append(topicClasses[t], int32(c))
		}
	}
	g.tsubs = make([][]int32, T)
	for t, cs := range topicClasses {
		if len(cs) == 1 {
			g.tsubs[t] = classMembers[cs[0]]
			continue
		}
		n := 0
		for _, c := range cs {
			n += len(classMembers[c])
		}
		merged := make([]int32, 0, n)
		for _, c := range cs {
			merged = append(merged, classMembers[c]...)
		}
		slices.Sort(merged)
		g.tsubs[t] = merged
	}
}

func (g *group) subscribers(t int32) []int32 { return g.tsubs[t] }

// setupRacks decides whether rack-aware placement applies, following Kafka's
// rule: some member has a rack, some partition has a replica on a member's
// rack, and not every partition has replicas on every member rack.
func (g *group) setupRacks(racks PartitionRacks) {
	if len(racks) == 0 || g.P == 0 {
		return
	}
	rackID := map[string]int8{}
	var names []string
	for m := range g.M() {
		if r := g.member(int32(m)).Subscription.Rack; r != "" {
			if _, ok := rackID[r]; !ok {
				rackID[r] = 0
				names = append(names, r)
			}
		}
	}
	if len(names) == 0 || len(names) > 64 {
		return // no member racks, or more than this implementation tracks
	}
	slices.Sort(names)
	for i, r := range names {
		rackID[r] = int8(i)
	}
	all := uint64(1)<<uint(len(names)) - 1
	if len(names) == 64 {
		all = ^uint64(0)
	}
	pr := make([]uint64, g.P)
	anyMatch, allFull := false, true
	for t, name := range g.topicNames {
		tr := racks[name]
		b := g.base[t]
		for p := range g.base[t+1] - b {
			var mask uint64
			if int(p) < len(tr) {
				for _, r := range tr[p] {
					if id, ok := rackID[r]; ok {
						mask |= 1 << uint(id)
					}
				}
			}
			pr[b+p] = mask
			anyMatch = anyMatch || mask != 0
			allFull = allFull && mask == all
		}
	}
	if !anyMatch || allFull {
		return
	}
	g.rackAware = true
	g.partRacks = pr
	g.memberRack = make([]int8, g.M())
	for m := range g.M() {
		g.memberRack[m] = -1
		if r := g.member(int32(m)).Subscription.Rack; r != "" {
			g.memberRack[m] = rackID[r]
		}
	}
}

// rackMatch reports whether member m shares a rack with partition p.
func (g *group) rackMatch(m, p int32) bool {
	r := g.memberRack[m]
	return r >= 0 && g.partRacks[p]&(1<<uint(r)) != 0
}

// bitsIter calls fn for every set bit of x, lowest first.
func bitsIter(x uint64, fn func(int) bool) {
	for x != 0 {
		i := bits.TrailingZeros64(x)
		if !fn(i) {
			return
		}
		x &= x - 1
	}
}

func trailingZeros(x uint64) int { return bits.TrailingZeros64(x) }

// Scratch buffers of P ints are reused across calls (the plan never aliases
// them), which spares the zeroing and page faults of fresh allocations.
const (
	bufOwner = iota
	bufPrev
	bufGen
	bufOwned
	bufFree
	bufSim
	numBufs
)

type scratchBufs struct{ b [numBufs][]int32 }

var scratchPool = sync.Pool{New: func() any { return new(scratchBufs) }}

// scratch returns buffer i with length n. Its contents are arbitrary.
func (g *group) scratch(i, n int) []int32 {
	if g.sc == nil {
		g.sc = scratchPool.Get().(*scratchBufs)
	}
	if cap(g.sc.b[i]) < n {
		g.sc.b[i] = make([]int32, n)
	}
	return g.sc.b[i][:n]
}

// release returns the scratch buffers; the group must not be used after.
func (g *group) release() {
	if g.sc != nil {
		scratchPool.Put(g.sc)
		g.sc = nil
	}
}

// sameStrings is slices.Equal with a fast path for a shared slice.
func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true
	}
	return slices.Equal(a, b)
}
