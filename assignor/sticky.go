package assignor

import "slices"

// Markers in the "previous owner" array.
const (
	noOwner   int32 = -1
	conflictd int32 = -2 // claimed by two or more members at the same (highest) generation
)

// assignSticky computes the sticky assignment and, for cooperative, removes
// every partition that would change hands in this round.
func (g *group) assignSticky(coop bool) []int32 {
	prev := g.resolveClaims(coop)
	if g.uniform {
		owner := g.stickyUniform(prev)
		if coop {
			cooperativeAdjust(prev, owner)
		}
		return owner
	}
	owner := g.stickyGeneral(prev, g.scratch(bufOwner, g.P))
	if !coop || cooperativeAdjust(prev, owner) == 0 {
		return owner
	}
	// The follow-up round will start from exactly this plan (members own
	// what they are given), so it can be simulated. If it would move an
	// owned partition, which would need yet another round, take the
	// simulated plan instead, adjusted against the real owners, and check
	// again. A plan the follow-up keeps whole converges in one round.
	sim := g.scratch(bufSim, g.P)
	for range maxSimulations {
		sim = g.stickyGeneral(owner, sim)
		if keepsAll(owner, sim) {
			break
		}
		copy(owner, sim)
		cooperativeAdjust(prev, owner)
	}
	return owner
}

// maxSimulations bounds the follow-up simulations of the cooperative
// differing-subscriptions path.
const maxSimulations = 3

// cooperativeAdjust applies the cooperative rule to owner and returns how
// many partitions it held back. A partition still owned by someone is never
// handed to a new owner in the same round: the owner is told to revoke it
// (it is missing from its assignment) and it is assigned in the follow-up
// round. Partitions claimed by several members in the same generation are
// given to nobody this round, since every claimant may still be consuming
// them.
func cooperativeAdjust(prev, owner []int32) int {
	n := 0
	for p, o := range prev {
		if owner[p] >= 0 && (o == conflictd || (o >= 0 && owner[p] != o)) {
			owner[p] = noOwner
			n++
		}
	}
	return n
}

// keepsAll reports whether next leaves every partition of cur where it is.
func keepsAll(cur, next []int32) bool {
	for p, o := range cur {
		if o >= 0 && next[p] != o {
			return false
		}
	}
	return true
}

// resolveClaims returns, per partition, its previous owner: the member that
// claims it at the strictly highest generation, conflictd if two or more
// members claim it at that generation, or noOwner. Generations below -1 count
// as -1. Claims on unknown topics and out-of-range partitions are ignored.
// The result does not depend on member order.
func (g *group) resolveClaims(coop bool) []int32 {
	prev := g.scratch(bufPrev, g.P)
	for i := range prev {
		prev[i] = noOwner
	}
	if g.P == 0 {
		return prev
	}
	c := claimer{g: g, prev: prev, gen: g.scratch(bufGen, g.P)} // gen is read only where prev is set
	for m := range int32(g.M()) {
		s := &g.member(m).Subscription
		if coop {
			gen := s.Generation
			if s.Version < 2 {
				gen, _ = DecodeCooperativeUserData(s.UserData)
			}
			c.start(m, gen)
			for i := range s.OwnedPartitions {
				t := c.topic(s.OwnedPartitions[i].Topic)
				for _, p := range s.OwnedPartitions[i].Partitions {
					c.claim(t, p)
				}
			}
			continue
		}
		c.stickyUserData(m, s.UserData)
	}
	return prev
}

// claimer applies ownership claims to prev/gen.
type claimer struct {
	g         *group
	prev, gen []int32
	m, mg     int32 // current member and its generation
	t         int32 // last topic resolved, as a hint
}

func (c *claimer) start(m, gen int32) {
	c.m, c.mg, c.t = m, max(gen, DefaultGeneration), -1
}

// topic resolves a topic name, or returns -1. Owned lists are normally
// sorted by topic, so the topic after the previous one is tried before the
// map.
func (c *claimer) topic(name string) int32 {
	g := c.g
	if c.t+1 < int32(g.T()) && g.topicNames[c.t+1] == name {
		c.t++
		return c.t
	}
	if ti, ok := g.topicIdx[name]; ok {
		c.t = ti
		return ti
	}
	return -1
}

func (c *claimer) claim(t, p int32) {
	if t < 0 {
		return
	}
	g := c.g
	b := g.base[t]
	if p < 0 || p >= g.base[t+1]-b {
		return
	}
	gp := b + p
	m, mg := c.m, c.mg
	switch o := c.prev[gp]; {
	case o == noOwner:
		c.prev[gp], c.gen[gp] = m, mg
	case o == m:
	case mg > c.gen[gp]:
		c.prev[gp], c.gen[gp] = m, mg
	case mg == c.gen[gp]:
		c.prev[gp] = conflictd
	}
}

// stickyUserData applies the claims in eager sticky userData without
// materializing it: one pass validates it and finds the generation (schema
// V1; V0 has none), a second applies the claims. Unparsable userData means no
// history.
func (c *claimer) stickyUserData(m int32, b []byte) {
	if len(b) == 0 {
		return
	}
	r := reader{b: b}
	n := r.arrayLen(6)
	for i := 0; i < n && r.err == nil; i++ {
		r.stringBytes()
		r.skip(4 * r.arrayLen(4))
	}
	if r.err != nil {
		return
	}
	gen := DefaultGeneration
	if len(r.b) >= 4 {
		gen = r.int32()
	}
	c.start(m, gen)
	r = reader{b: b}
	n = r.arrayLen(6)
	for range n {
		t := c.topic(string(r.stringBytes()))
		k := r.arrayLen(4)
		for range k {
			c.claim(t, r.int32())
		}
	}
}

// stickyUniform is the assignment when every member subscribes to the same
// topics (Kafka's ConstrainedAssignmentBuilder, made order-independent).
//
// With minQ = P/M and E = P%M members allowed minQ+1: members owning more
// than minQ get the E larger quotas first (in member order), every member
// keeps min(owned, quota) of its partitions (preferring rack matches, then
// the lowest partition numbers across topics, so that revocations are spread
// over topics), and the rest is dealt round-robin, in (topic, partition)
// order, to members under minQ, then one each to members at minQ until E
// members have minQ+1. This keeps exactly
// K* = sum(min(owned_i, minQ)) + min(E, #{owned_i > minQ}) partitions, the
// maximum possible, and yields max-min <= 1.
//
// Cost: O(P + M*T) plus a linear-time selection over the owned lists of
// members that must give partitions up.
func (g *group) stickyUniform(prev []int32) []int32 {
	M, P := g.M(), g.P
	owner := g.scratch(bufOwner, P)
	for i := range owner {
		owner[i] = noOwner
	}
	if M == 0 || P == 0 {
		return owner
	}
	minQ := int32(P / M)
	E := P % M

	// Owned partitions per member (ascending global index) by counting sort.
	off := make([]int32, M+1)
	for _, o := range prev {
		if o >= 0 {
			off[o+1]++
		}
	}
	for m := range M {
		off[m+1] += off[m]
	}
	owned := g.scratch(bufOwned, int(off[M]))
	cur := slices.Clone(off[:M])
	for p, o := range prev {
		if o >= 0 {
			owned[cur[o]] = int32(p)
			cur[o]++
		}
	}

	cnt := make([]int32, M)
	atMax := 0
	var keys []uint64
	for m := range int32(M) {
		mine := owned[off[m]:off[m+1]]
		n := int32(len(mine))
		target := n
		if n > minQ {
			target = minQ
			if atMax < E {
				target = minQ + 1
				atMax++
			}
		}
		if target == n {
			for _, p := range mine {
				owner[p] = m
			}
			cnt[m] = n
			continue
		}
		// Keep the `target` smallest keys: (rack mismatch, partition number,
		// topic).
		keys = keys[:0]
		t := int32(0)
		for _, p := range mine {
			if p >= g.base[t+1] {
				t = g.advanceTopic(t, p)
			}
			k := uint64(p-g.base[t])<<31 | uint64(t)
			if g.rackAware && !g.rackMatch(m, p) {
				k |= 1 << 62
			}
			keys = append(keys, k)
		}
		selectSmallest(keys, int(target))
		for _, k := range keys[:target] {
			t := int32(k & (1<<31 - 1))
			pn := int32(k>>31) & (1<<31 - 1)
			owner[g.base[t]+pn] = m
		}
		cnt[m] = target
	}

	// Unassigned partitions in (topic, partition) order.
	free := g.scratch(bufFree, P)[:0]
	for p, o := range owner {
		if o == noOwner {
			free = append(free, int32(p))
		}
	}

	if g.rackAware {
		free = g.fillRacks(owner, cnt, free, minQ)
	}

	// Round-robin over members under minQ.
	ring := make([]int32, 0, M)
	for m := range int32(M) {
		if cnt[m] < minQ {
			ring = append(ring, m)
		}
	}
	fi := 0
	for len(ring) > 0 && fi < len(free) {
		w := 0
		for _, m := range ring {
			if fi == len(free) {
				ring[w] = m
				w++
				continue
			}
			owner[free[fi]] = m
			fi++
			cnt[m]++
			if cnt[m] < minQ {
				ring[w] = m
				w++
			}
		}
		ring = ring[:w]
	}
	// Extra slots: one each to members at minQ, in member order.
	for m := int32(0); int(m) < M && fi < len(free) && atMax < E; m++ {
		if cnt[m] == minQ {
			owner[free[fi]] = m
			fi++
			cnt[m]++
			atMax++
		}
	}
	return owner
}

// fillRacks gives free partitions to members under minQ that share a rack
// with them, rotating over each rack's members, and returns the partitions
// still free (in order).
func (g *group) fillRacks(owner, cnt, free []int32, minQ int32) []int32 {
	var rings [64][]int32
	for m := range int32(len(cnt)) {
		if r := g.memberRack[m]; r >= 0 && cnt[m] < minQ {
			rings[r] = append(rings[r], m)
		}
	}
	var pos [64]int
	var nonEmpty uint64
	for r := range rings {
		if len(rings[r]) > 0 {
			nonEmpty |= 1 << uint(r)
		}
	}
	rest := free[:0]
	for _, p := range free {
		avail := g.partRacks[p] & nonEmpty
		placed := false
		for avail != 0 && !placed {
			r := trailingZeros(avail)
			avail &= avail - 1
			ring := rings[r]
			// Find the next member of this rack still under minQ.
			for tries := 0; tries < len(ring); tries++ {
				i := pos[r] % len(ring)
				pos[r] = i + 1
				m := ring[i]
				if cnt[m] < minQ {
					owner[p] = m
					cnt[m]++
					placed = true
					break
				}
			}
			if !placed {
				nonEmpty &^= 1 << uint(r)
			}
		}
		if !placed {
			rest = append(rest, p)
		}
	}
	return rest
}

// selectSmallest reorders keys so that its k smallest elements come first
// (in any order), in expected linear time.
func selectSmallest(keys []uint64, k int) {
	lo, hi := 0, len(keys)-1
	if k <= 0 || k >= len(keys) {
		return
	}
	// Few elements to drop: repeatedly move the maximum to the end.
	if d := len(keys) - k; d <= 4 {
		end := len(keys)
		for range d {
			mi := 0
			for i := 1; i < end; i++ {
				if keys[i] > keys[mi] {
					mi = i
				}
			}
			keys[mi], keys[end-1] = keys[end-1], keys[mi]
			end--
		}
		return
	}
	for lo < hi {
		// Median of three as pivot.
		mid := lo + (hi-lo)/2
		if keys[mid] < keys[lo] {
			keys[mid], keys[lo] = keys[lo], keys[mid]
		}
		if keys[hi] < keys[lo] {
			keys[hi], keys[lo] = keys[lo], keys[hi]
		}
		if keys[hi] < keys[mid] {
			keys[hi], keys[mid] = keys[mid], keys[hi]
		}
		pivot := keys[mid]
		i, j := lo, hi
		for i <= j {
			for keys[i] < pivot {
				i++
			}
			for keys[j] > pivot {
				j--
			}
			if i <= j {
				keys[i], keys[j] = keys[j], keys[i]
				i++
				j--
			}
		}
		// Now keys[lo..j] <= pivot <= keys[i..hi].
		switch {
		case k-1 <= j:
			hi = j
		case k-1 >= i:
			lo = i
		default:
			return
		}
	}
}
