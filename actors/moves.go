package actors

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/cohort-coord/cohort/assignor"
	"github.com/cohort-coord/cohort/coordinator"
)

// baselineOf is what the next diff needs of g's members, which publishView
// asks for only once g is Stable or Empty (no members): their ids and
// consumer-protocol assignments, sorted by id. It reads them from the group
// rather than from a DescribeGroups answer, which would build a message
// per member on every rebalance.
func baselineOf(g *coordinator.Group) []memberAssignment {
	out := make([]memberAssignment, 0, g.NumMembers())
	protocolType := g.ProtocolType()
	g.StableAssignments(func(id string, assignment []byte) {
		out = append(out, memberAssignment{id: id, assignment: consumerAssignment(protocolType, assignment)})
	})
	slices.SortFunc(out, func(a, b memberAssignment) int { return cmp.Compare(a.id, b.id) })
	return out
}

// diffMembers returns the ids in cur but not in prev (joined) and in prev
// but not in cur (left), in id order; both lists are sorted by id. The two
// are counted first, so that each is allocated at its length (nil when
// empty).
func diffMembers(prev, cur []memberAssignment) (joined, left []string) {
	both := 0
	for i, j := 0, 0; i < len(prev) && j < len(cur); {
		switch c := cmp.Compare(prev[i].id, cur[j].id); {
		case c < 0:
			i++
		case c > 0:
			j++
		default:
			both++
			i, j = i+1, j+1
		}
	}
	if n := len(cur) - both; n > 0 {
		joined = make([]string, 0, n)
	}
	if n := len(prev) - both; n > 0 {
		left = make([]string, 0, n)
	}
	for i, j := 0, 0; i < len(prev) || j < len(cur); {
		switch {
		case j == len(cur) || i < len(prev) && prev[i].id < cur[j].id:
			left = append(left, prev[i].id)
			i++
		case i == len(prev) || cur[j].id < prev[i].id:
			joined = append(joined, cur[j].id)
			j++
		default:
			i, j = i+1, j+1
		}
	}
	return joined, left
}

// owner is one partition an assignment gives to a member; the topic points
// into the member's assignment bytes.
type owner struct {
	topic     []byte
	partition int32
	member    string
}

// compareOwners orders owners by topic, then partition.
func compareOwners(a, b owner) int {
	return cmp.Or(bytes.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
}

// owners lists every assigned partition with its member, sorted by topic
// and partition, walking the encoded assignments rather than decoding them.
// A partition in several assignments is the last one's (in ms's order); an
// assignment that does not decode owns nothing.
func owners(ms []memberAssignment) []owner {
	var out []owner
	for _, m := range ms {
		if len(m.assignment) == 0 {
			continue
		}
		start := len(out)
		w := assignor.NewAssignedPartitions(m.assignment)
		for w.Next() {
			out = append(out, owner{topic: w.Topic(), partition: w.Partition(), member: m.id})
		}
		if w.Err() != nil {
			out = out[:start]
		}
	}
	slices.SortStableFunc(out, compareOwners)
	kept := out[:0]
	for i, o := range out {
		if i+1 < len(out) && compareOwners(o, out[i+1]) == 0 {
			continue // a later member's claim wins
		}
		kept = append(kept, o)
	}
	return kept
}

// moves lists the partitions whose owner changed from prev to cur, sorted
// by topic and partition. They are counted first, so that the list is
// allocated at its length (nil when empty).
func moves(prev, cur []memberAssignment) []Move {
	before, after := owners(prev), owners(cur)
	n := 0
	eachMove(before, after, func(owner, string, string) { n++ })
	if n == 0 {
		return nil
	}
	out := make([]Move, 0, n)
	topic := ""
	eachMove(before, after, func(o owner, from, to string) {
		if topic != string(o.topic) { // one string per topic, not per move
			topic = string(o.topic)
		}
		out = append(out, Move{Topic: topic, Partition: o.partition, From: from, To: to})
	})
	return out
}

// eachMove merges two sorted owner lists and calls f, in order, for every
// partition whose owner differs ("" for none).
func eachMove(before, after []owner, f func(o owner, from, to string)) {
	for i, j := 0, 0; i < len(before) || j < len(after); {
		c := 0
		switch {
		case i == len(before):
			c = 1
		case j == len(after):
			c = -1
		default:
			c = compareOwners(before[i], after[j])
		}
		switch {
		case c < 0:
			f(before[i], before[i].member, "")
			i++
		case c > 0:
			f(after[j], "", after[j].member)
			j++
		default:
			if before[i].member != after[j].member {
				f(after[j], before[i].member, after[j].member)
			}
			i, j = i+1, j+1
		}
	}
}
