package assignor

import (
	"fmt"
	"testing"
)

// racksFor places partition p of every topic on racks (p+j) % numRacks for
// j < replicas, as Kafka's rack tests place replicas on brokers.
func racksFor(topics map[string]int32, numRacks, replicas int) PartitionRacks {
	pr := PartitionRacks{}
	for t, n := range topics {
		rs := make([][]string, n)
		for p := range int(n) {
			for j := range replicas {
				rs[p] = append(rs[p], fmt.Sprintf("rack%d", (p+j)%numRacks))
			}
		}
		pr[t] = rs
	}
	return pr
}

// rackMatches counts assigned partitions with a replica on their member's rack.
func rackMatches(members []Member, plan *Plan, racks PartitionRacks) int {
	rackOf := map[string]string{}
	for _, m := range members {
		rackOf[m.ID] = m.Subscription.Rack
	}
	n := 0
	for _, a := range plan.Members() {
		for _, tp := range a.Topics {
			for _, p := range tp.Partitions {
				for _, r := range racks[tp.Topic][p] {
					if r == rackOf[a.MemberID] {
						n++
						break
					}
				}
			}
		}
	}
	return n
}

func withRack(m Member, rack string) Member {
	m.Subscription.Rack = rack
	return m
}

func TestRangeRacksKeepQuotasAndCoPartitioning(t *testing.T) {
	topics := map[string]int32{"t1": 6, "t2": 6, "t3": 2}
	all := sub("t1", "t2", "t3")
	members := []Member{
		withRack(dyn("c0", all), "rack0"),
		withRack(dyn("c1", all), "rack1"),
		withRack(dyn("c2", all), "rack2"),
	}
	racks := racksFor(topics, 3, 1)
	plan := Range().BalanceRacks(members, topics, racks)
	checkValid(t, Range(), members, topics, plan)
	// Same per-topic counts as plain range, every partition on its rack,
	// and t1/t2 (same subscribers, same size) co-partitioned.
	assertPlan(t, plan, map[string]string{
		"c0": "t1-0, t1-3, t2-0, t2-3, t3-0",
		"c1": "t1-1, t1-4, t2-1, t2-4, t3-1",
		"c2": "t1-2, t1-5, t2-2, t2-5",
	})
	if got := rackMatches(members, plan, racks); got != 14 {
		t.Fatalf("rack matches %d, want 14", got)
	}
	// Racks on every partition for every member rack: rack awareness is off.
	full := racksFor(topics, 3, 3)
	assertPlan(t, Range().BalanceRacks(members, topics, full), render(Range().Balance(members, topics)))
	// Members without racks: off as well.
	plain := []Member{dyn("c0", all), dyn("c1", all), dyn("c2", all)}
	assertPlan(t, Range().BalanceRacks(plain, topics, racks), render(Range().Balance(plain, topics)))
}

// Rack-aware sticky keeps every guarantee of the plain one (validity,
// max-min <= 1 on uniform groups, K* kept, cooperative safety) and places
// fresh partitions on matching racks when it can.
func TestPropStickyRacks(t *testing.T) {
	checkProp(t, func(t *propT) {
		w := genWorld(t, true, 9)
		nr := drawInt(t, 1, 4, "racks")
		racks := racksFor(w.topics, nr, drawInt(t, 1, 2, "replicas"))
		for i := range w.members {
			if drawInt(t, 0, 5, "norack") != 0 {
				w.members[i].Subscription.Rack = fmt.Sprintf("rack%d", i%nr)
			}
		}
		for _, b := range []Balancer{Sticky(), CooperativeSticky(), Range()} {
			plan := b.BalanceRacks(w.members, w.topics, racks)
			checkValid(t, b, w.members, w.topics, plan)
			if b.ProtocolName() == "range" {
				// Per-topic quotas are those of plain range.
				plain := b.Balance(w.members, w.topics).Members()
				for i, a := range plan.Members() {
					if countOf(a) != countOf(plain[i]) {
						t.Fatalf("range quotas changed: %v vs %v", counts(plan), counts(b.Balance(w.members, w.topics)))
					}
				}
				continue
			}
			if spread(plan) > 1 {
				t.Fatalf("%s: counts %v", b.ProtocolName(), counts(plan))
			}
			again := b.BalanceRacks(shuffled(t, w.members), w.topics, racks)
			if fmt.Sprint(render(plan)) != fmt.Sprint(render(again)) {
				t.Fatalf("order-dependent")
			}
			// Next round with history: still balanced, and a stable group
			// moves nothing.
			members := withHistory(b, w.members, plan, 1)
			next := b.BalanceRacks(members, w.topics, racks)
			if fmt.Sprint(render(plan)) != fmt.Sprint(render(next)) {
				t.Fatalf("%s: stable group moved:\n%v\n%v", b.ProtocolName(), render(plan), render(next))
			}
		}
	})
}

func TestStickyRacksPreferMatches(t *testing.T) {
	topics := map[string]int32{"a": 30, "b": 30}
	racks := racksFor(topics, 3, 1)
	var members []Member
	for i := range 6 {
		members = append(members, withRack(dyn(fmt.Sprintf("m%d", i), sub("a", "b")), fmt.Sprintf("rack%d", i/2)))
	}
	for _, b := range []Balancer{Sticky(), CooperativeSticky()} {
		plan := b.BalanceRacks(members, topics, racks)
		checkValid(t, b, members, topics, plan)
		if spread(plan) != 0 {
			t.Fatalf("counts %v", counts(plan))
		}
		if got := rackMatches(members, plan, racks); got != 60 {
			t.Fatalf("%s: %d of 60 partitions on a matching rack", b.ProtocolName(), got)
		}
		without := rackMatches(members, b.Balance(members, topics), racks)
		if without >= 60 {
			t.Fatalf("test is vacuous: %d matches without racks", without)
		}
	}
}
