package assignor

import "encoding/binary"

// Plan is the result of Balance: one assignment per member, in member order
// (static members by instance id, then dynamic members by member id).
//
// It is stored compactly in a few integer arrays, without per-topic
// allocations, so that building it and encoding it from it cost O(P + M)
// with no pointer-heavy structures for the garbage collector to scan. Use
// Topics or Members for the familiar per-topic lists and Encode for
// SyncGroup. A Plan is immutable and safe for concurrent readers.
type Plan struct {
	memberIDs  []string
	topicNames []string
	memberRuns []int32 // len M+1: member i's runs are memberRuns[i]..memberRuns[i+1]
	runTopic   []int32 // topic index of each run (a run is one topic of one member)
	runStart   []int32 // len runs+1: run r's partitions are parts[runStart[r]:runStart[r+1]]
	parts      []int32
}

// Len returns the number of members.
func (p *Plan) Len() int { return len(p.memberIDs) }

// MemberID returns the id of member i.
func (p *Plan) MemberID(i int) string { return p.memberIDs[i] }

// Count returns the number of partitions assigned to member i.
func (p *Plan) Count(i int) int {
	return int(p.runStart[p.memberRuns[i+1]] - p.runStart[p.memberRuns[i]])
}

// Topics returns member i's assignment: topics in name order, partitions in
// ascending order, only topics with partitions. The partition slices alias
// the plan and must not be modified.
func (p *Plan) Topics(i int) []TopicPartitions {
	lo, hi := p.memberRuns[i], p.memberRuns[i+1]
	if lo == hi {
		return nil
	}
	out := make([]TopicPartitions, 0, hi-lo)
	for r := lo; r < hi; r++ {
		s, e := p.runStart[r], p.runStart[r+1]
		out = append(out, TopicPartitions{Topic: p.topicNames[p.runTopic[r]], Partitions: p.parts[s:e:e]})
	}
	return out
}

// Members returns every member's assignment.
func (p *Plan) Members() []MemberAssignment {
	out := make([]MemberAssignment, p.Len())
	for i := range out {
		out[i] = MemberAssignment{MemberID: p.memberIDs[i], Topics: p.Topics(i)}
	}
	return out
}

// Map returns the plan as member id -> topic -> partitions.
func (p *Plan) Map() map[string]map[string][]int32 {
	m := make(map[string]map[string][]int32, p.Len())
	for i := range p.Len() {
		tm := make(map[string][]int32)
		for _, tp := range p.Topics(i) {
			tm[tp.Topic] = tp.Partitions
		}
		m[p.memberIDs[i]] = tm
	}
	return m
}

// EncodedSize returns the size of member i's version 3 assignment.
func (p *Plan) EncodedSize(i int) int {
	n := 2 + 4 + 4 // version, topic count, null userData
	for r := p.memberRuns[i]; r < p.memberRuns[i+1]; r++ {
		n += 2 + len(p.topicNames[p.runTopic[r]]) + 4 + 4*int(p.runStart[r+1]-p.runStart[r])
	}
	return n
}

// AppendAssignment appends member i's ConsumerProtocol assignment (version
// 3, null userData) to dst.
func (p *Plan) AppendAssignment(dst []byte, i int) []byte {
	lo, hi := p.memberRuns[i], p.memberRuns[i+1]
	dst = binary.BigEndian.AppendUint16(dst, uint16(MaxConsumerProtocolVersion))
	dst = binary.BigEndian.AppendUint32(dst, uint32(hi-lo))
	for r := lo; r < hi; r++ {
		dst = appendString(dst, p.topicNames[p.runTopic[r]])
		s, e := p.runStart[r], p.runStart[r+1]
		dst = binary.BigEndian.AppendUint32(dst, uint32(e-s))
		for _, x := range p.parts[s:e] {
			dst = binary.BigEndian.AppendUint32(dst, uint32(x))
		}
	}
	return binary.BigEndian.AppendUint32(dst, 0xffffffff) // null userData
}

// Encode returns every member's encoded assignment, in plan order. All of
// them share one buffer.
func (p *Plan) Encode() [][]byte {
	total := 0
	for i := range p.Len() {
		total += p.EncodedSize(i)
	}
	buf := make([]byte, 0, total)
	out := make([][]byte, p.Len())
	for i := range out {
		start := len(buf)
		buf = p.AppendAssignment(buf, i)
		out[i] = buf[start:len(buf):len(buf)]
	}
	return out
}

// plan turns owner (global partition -> member, or negative for none) into a
// Plan in O(P + M).
func (g *group) plan(owner []int32) *Plan {
	M := g.M()
	pl := &Plan{memberIDs: make([]string, M), topicNames: g.topicNames, memberRuns: make([]int32, M+1)}
	for m := range M {
		pl.memberIDs[m] = g.member(int32(m)).ID
	}
	T := g.T()
	// Pass 1: partitions and runs per member.
	nparts := make([]int32, M+1)
	last := make([]int32, M)
	for i := range last {
		last[i] = -1
	}
	for t := range int32(T) {
		for p := g.base[t]; p < g.base[t+1]; p++ {
			m := owner[p]
			if m < 0 {
				continue
			}
			nparts[m+1]++
			if last[m] != t {
				last[m] = t
				pl.memberRuns[m+1]++
			}
		}
	}
	for m := range M {
		nparts[m+1] += nparts[m]
		pl.memberRuns[m+1] += pl.memberRuns[m]
	}
	runs := pl.memberRuns[M]
	pl.runTopic = make([]int32, runs)
	pl.runStart = make([]int32, runs+1)
	pl.parts = make([]int32, nparts[M])
	pl.runStart[runs] = nparts[M]
	// Pass 2: scatter global partition indices to their member's range (one
	// write per partition).
	cur := last // reuse as per-member cursors
	copy(cur, nparts[:M])
	for p, m := range owner[:g.P] {
		if m >= 0 {
			pl.parts[cur[m]] = int32(p)
			cur[m]++
		}
	}
	// Pass 3: per member, sequentially, split into topic runs and turn
	// global indices into partition numbers.
	r := int32(0)
	for m := range M {
		t := int32(0)
		lastT := int32(-1)
		for k := nparts[m]; k < nparts[m+1]; k++ {
			p := pl.parts[k]
			if p >= g.base[t+1] {
				t = g.advanceTopic(t, p)
			}
			if t != lastT {
				lastT = t
				pl.runTopic[r] = t
				pl.runStart[r] = k
				r++
			}
			pl.parts[k] = p - g.base[t]
		}
	}
	return pl
}

// advanceTopic returns the topic of global partition p, which lies in topic
// t or later: a few linear steps, then a binary search.
func (g *group) advanceTopic(t, p int32) int32 {
	for range 4 {
		t++
		if p < g.base[t+1] {
			return t
		}
	}
	lo, hi := int(t)+1, len(g.topicNames)-1
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
