package assignor

import (
	"fmt"
	"slices"
	"testing"
)

// moved counts partitions whose owner differs between two plans (partitions
// of members absent from after count as moved).
func moved(before, after *Plan) int {
	b, a := before.Map(), after.Map()
	n := 0
	for id, tm := range b {
		for t, ps := range tm {
			for _, p := range ps {
				if !slices.Contains(a[id][t], p) {
					n++
				}
			}
		}
	}
	return n
}

// The Q3 special cases on a uniform group of 20 members, 10 topics x 100
// partitions: a stable group moves nothing, a joining member takes exactly
// floor(P/(M+1)) partitions, and a leaving member's partitions are the only
// ones that move.
func TestStickyMinimalMovementCases(t *testing.T) {
	topics := map[string]int32{}
	var names []string
	for i := range 10 {
		names = append(names, fmt.Sprintf("t%d", i))
		topics[names[i]] = 100
	}
	for _, b := range []Balancer{Sticky(), CooperativeSticky()} {
		var members []Member
		for i := range 20 {
			members = append(members, dyn(fmt.Sprintf("m%02d", i), sub(names...)))
		}
		plan := b.Balance(members, topics)
		members = withHistory(b, members, plan, 1)

		stable := b.Balance(members, topics)
		if n := moved(plan, stable); n != 0 {
			t.Fatalf("%s: stable group moved %d", b.ProtocolName(), n)
		}

		joined := append(slices.Clone(members), dyn("new", sub(names...)))
		next := b.Balance(joined, topics)
		if b.IsCooperative() {
			next = b.Balance(withHistory(b, joined, next, 2), topics)
		}
		if n := moved(plan, next); n != 1000/21 {
			t.Fatalf("%s: join moved %d, want %d", b.ProtocolName(), n, 1000/21)
		}
		if spread(next) > 1 {
			t.Fatalf("%s: counts %v", b.ProtocolName(), counts(next))
		}

		left := members[1:]
		next = b.Balance(left, topics)
		if n, leaver := moved(plan, next), plan.Count(0); n != leaver {
			t.Fatalf("%s: leave moved %d, want the leaver's %d", b.ProtocolName(), n, leaver)
		}
	}
}
