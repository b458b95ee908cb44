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
	var owner []int32
	if g.uniform {
		owner = g.stickyUniform(prev)
	} else {
		owner = g.stickyGeneral(prev)
	}
	if coop {
		// A partition still owned by someone is never handed to a new owner
		// in the same round: the owner is told to revoke it (it is missing
		// from its assignment) and it is assigned in the follow-up round.
		// Partitions claimed by several members in the same generation are
		// given to nobody this round, since every claimant may still be
		// consuming them.
		for p, o := range prev {
			if o == conflictd || (o >= 0 && owner[p] != o) {
				owner[p] = noOwner
			}
		}
	}
	return owner
}

// claims returns a member's owned partitions and generation as the sticky
// family reads them. Eager "sticky" reads both from its userData (the
// subscription's owned list is empty for eager members). Cooperative reads the
// subscription's owned partitions, with the subscription's generation from v2
// on and otherwise the generation in its 4-byte userData.
func claims(s *Subscription, coop bool, d *Decoder) ([]TopicPartitions, int32) {
	if coop {
		gen := s.Generation
		if s.Version < 2 {
			gen, _ = DecodeCooperativeUserData(s.UserData)
		}
		return s.OwnedPartitions, gen
	}
	if len(s.UserData) == 0 {
		return nil, DefaultGeneration
	}
	u, err := d.DecodeStickyUserData(s.UserData)
	if err != nil {
		return nil, DefaultGeneration // unparsable userData: no history
	}
	return u.Owned, u.Generation
}

// resolveClaims returns, per partition, its previous owner: the member that
// claims it at the strictly highest generation, conflictd if two or more
// members claim it at that generation, or noOwner. Generations below -1 count
// as -1. Claims on unknown topics and out-of-range partitions are ignored.
// The result does not depend on member order.
func (g *group) resolveClaims(coop bool) []int32 {
	prev := make([]int32, g.P)
	for i := range prev {
		prev[i] = noOwner
	}
	if g.P == 0 {
		return prev
	}
	gen := make([]int32, g.P)
	var d Decoder
	T := int32(g.T())
	for m := range int32(g.M()) {
		owned, mg := claims(&g.member(m).Subscription, coop, &d)
		if mg < DefaultGeneration {
			mg = DefaultGeneration
		}
		t := int32(-1)
		for i := range owned {
			name := owned[i].Topic
			// Owned lists are normally sorted by topic, so try the next topic
			// index before falling back to the map.
			if t+1 < T && g.topicNames[t+1] == name {
				t++
			} else if ti, ok := g.topicIdx[name]; ok {
				t = ti
			} else {
				continue
			}
			b, n := g.base[t], g.base[t+1]-g.base[t]
			for _, p := range owned[i].Partitions {
				if p < 0 || p >= n {
					continue
				}
				gp := b + p
				switch o := prev[gp]; {
				case o == noOwner:
					prev[gp], gen[gp] = m, mg
				case o == m:
				case mg > gen[gp]:
					prev[gp], gen[gp] = m, mg
				case mg == gen[gp]:
					prev[gp] = conflictd
				}
			}
		}
	}
	return prev
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
	owner := make([]int32, P)
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
	owned := make([]int32, off[M])
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
			for p >= g.base[t+1] {
				t++
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
	free := make([]int32, 0, P-int(sumInt32(cnt)))
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

func sumInt32(xs []int32) int64 {
	var s int64
	for _, x := range xs {
		s += int64(x)
	}
	return s
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
