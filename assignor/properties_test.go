package assignor

import (
	"fmt"
	"slices"
	"testing"
)

// Property tests (checkProp, prop_test.go) for the quality goals: validity, balance, minimal
// movement, per-topic spread, cooperative safety and convergence, and
// independence from input order.

type world struct {
	names   []string
	topics  map[string]int32
	members []Member // without history
}

func genWorld(t *propT, uniform bool, maxMembers int) world {
	nt := drawInt(t, 1, 6, "topics")
	w := world{topics: map[string]int32{}}
	for i := range nt {
		name := fmt.Sprintf("t%d", i)
		w.names = append(w.names, name)
		w.topics[name] = int32(drawInt(t, 0, 16, "partitions"))
	}
	nm := drawInt(t, 1, maxMembers, "members")
	for i := range nm {
		ts := w.names
		if !uniform {
			ts = nil
			for _, n := range w.names {
				if drawBool(t, "subscribes") {
					ts = append(ts, n)
				}
			}
		}
		m := dyn(fmt.Sprintf("m%02d", i), sub(ts...))
		if drawInt(t, 0, 3, "static") == 0 {
			m.InstanceID = fmt.Sprintf("i%02d", nm-i)
		}
		w.members = append(w.members, m)
	}
	return w
}

// claim is one (member, partition, generation) ownership claim.
type claim struct {
	member int
	topic  string
	part   int32
	gen    int32
}

// genClaims draws arbitrary ownership claims, including conflicts, stale and
// missing generations, unknown topics and out-of-range partitions.
func genClaims(t *propT, w world) []claim {
	var cs []claim
	n := drawInt(t, 0, 40, "claims")
	for range n {
		topic := drawFrom(t, append(w.names, "gone"), "ctopic")
		cs = append(cs, claim{
			member: drawInt(t, 0, len(w.members)-1, "cmember"),
			topic:  topic,
			part:   int32(drawInt(t, -1, 17, "cpart")),
			gen:    int32(drawInt(t, -2, 3, "cgen")),
		})
	}
	return cs
}

// apply builds subscriptions carrying the claims. A member's generation is
// that of its last claim (one generation per member, as on the wire).
func apply(b Balancer, w world, cs []claim) []Member {
	owned := make([][]TopicPartitions, len(w.members))
	gens := make([]int32, len(w.members))
	for i := range gens {
		gens[i] = DefaultGeneration
	}
	for _, c := range cs {
		owned[c.member] = append(owned[c.member], TopicPartitions{Topic: c.topic, Partitions: []int32{c.part}})
		gens[c.member] = c.gen
	}
	out := make([]Member, len(w.members))
	for i, m := range w.members {
		var s Subscription
		if b.IsCooperative() {
			s = coopSub("", gens[i], m.Subscription.Topics...)
			s.OwnedPartitions = owned[i]
		} else {
			s = sub(m.Subscription.Topics...)
			if len(owned[i]) > 0 {
				u := StickyUserData{Owned: owned[i], Generation: gens[i]}
				s.UserData = u.AppendTo(nil)
			}
		}
		out[i] = Member{ID: m.ID, InstanceID: m.InstanceID, Subscription: s}
	}
	return out
}

func shuffled(t *propT, ms []Member) []Member {
	return drawPermutation(t, ms, "order")
}

func allBalancers() []Balancer {
	return []Balancer{Range(), RoundRobin(), Sticky(), CooperativeSticky()}
}

// Q1 validity and Q7 determinism, for every assignor, on arbitrary inputs
// with arbitrary (even contradictory) history.
func TestPropValidAndDeterministic(t *testing.T) {
	checkProp(t, func(t *propT) {
		w := genWorld(t, drawBool(t, "uniform"), 10)
		cs := genClaims(t, w)
		for _, b := range allBalancers() {
			members := apply(b, w, cs)
			plan := b.Balance(members, w.topics)
			checkValid(t, b, members, w.topics, plan)
			again := b.Balance(shuffled(t, members), w.topics)
			if fmt.Sprint(render(plan)) != fmt.Sprint(render(again)) {
				t.Fatalf("%s: order-dependent:\n%v\n%v", b.ProtocolName(), render(plan), render(again))
			}
		}
	})
}

// Q6 cooperative safety on arbitrary history: a partition is only assigned
// to the member that wins its claim (if anyone claims it), a partition tied
// at the highest generation is assigned to nobody, and a partition is left
// out only if someone claims it.
func TestPropCooperativeSafety(t *testing.T) {
	checkProp(t, func(t *propT) {
		w := genWorld(t, drawBool(t, "uniform"), 10)
		cs := genClaims(t, w)
		b := CooperativeSticky()
		members := apply(b, w, cs)
		plan := b.Balance(members, w.topics)
		checkValid(t, b, members, w.topics, plan)

		// Resolve claims the slow way.
		type key struct {
			t string
			p int32
		}
		gens := map[int]int32{}
		for _, c := range cs {
			gens[c.member] = max(c.gen, DefaultGeneration)
		}
		best := map[key]int32{}
		winners := map[key]map[string]bool{}
		for _, c := range cs {
			if c.part < 0 || c.part >= w.topics[c.topic] {
				continue
			}
			k := key{c.topic, c.part}
			g := gens[c.member]
			id := w.members[c.member].ID
			cur, ok := best[k]
			switch {
			case !ok || g > cur:
				best[k] = g
				winners[k] = map[string]bool{id: true}
			case g == cur:
				winners[k][id] = true
			}
		}
		assigned := map[key]string{}
		for _, a := range plan.Members() {
			for _, tpa := range a.Topics {
				for _, p := range tpa.Partitions {
					assigned[key{tpa.Topic, p}] = a.MemberID
				}
			}
		}
		for k, ws := range winners {
			o, ok := assigned[k]
			if len(ws) > 1 && ok {
				t.Fatalf("%v tied between %v but assigned to %s", k, ws, o)
			}
			if ok && !ws[o] {
				t.Fatalf("%v owned by %v but assigned to %s in the same round", k, ws, o)
			}
		}
		subscribed := map[string]bool{}
		for _, m := range members {
			for _, tn := range m.Subscription.Topics {
				subscribed[tn] = true
			}
		}
		for tn, n := range w.topics {
			for p := range n {
				k := key{tn, p}
				if _, ok := assigned[k]; !ok && subscribed[tn] && winners[k] == nil {
					t.Fatalf("%v unclaimed and unassigned", k)
				}
			}
		}
	})
}

// Q2 and Q4: balance. Uniform: max-min <= 1 (roundrobin, sticky, and
// cooperative-sticky once it converged). Otherwise Kafka's one-hop rule.
func TestPropBalance(t *testing.T) {
	checkProp(t, func(t *propT) {
		uniform := drawBool(t, "uniform")
		w := genWorld(t, uniform, 10)
		cs := genClaims(t, w)
		for _, b := range []Balancer{RoundRobin(), Sticky(), CooperativeSticky()} {
			if !uniform && b.ProtocolName() == "roundrobin" {
				continue
			}
			members := apply(b, w, cs)
			plan := b.Balance(members, w.topics)
			if b.IsCooperative() {
				// Even from contradictory history, one follow-up round
				// completes the assignment.
				members = followUp(members, plan, 10)
				plan = b.Balance(members, w.topics)
				checkValid(t, Sticky(), members, w.topics, plan) // complete
			}
			if uniform && spread(plan) > 1 {
				t.Fatalf("%s: counts %v", b.ProtocolName(), counts(plan))
			}
			if v := oneHopViolation(members, plan); v != "" {
				t.Fatalf("%s: %s: %v", b.ProtocolName(), v, render(plan))
			}
		}
	})
}

// Q3: on uniform groups with consistent history (each partition owned by at
// most one member), the number of partitions kept by their owner is exactly
// K* = sum(min(owned_i, minQ)) + min(E, #{owned_i > minQ}). The cooperative
// round keeps exactly as many, and nothing else moves.
func TestPropMinimalMovement(t *testing.T) {
	checkProp(t, func(t *propT) {
		w := genWorld(t, true, 12)
		var cs []claim
		for _, name := range w.names {
			for p := range w.topics[name] {
				if m := drawInt(t, -1, len(w.members)-1, "owner"); m >= 0 {
					cs = append(cs, claim{member: m, topic: name, part: p, gen: 1})
				}
			}
		}
		owned := make([]int, len(w.members))
		P := 0
		for _, n := range w.topics {
			P += int(n)
		}
		for _, c := range cs {
			owned[c.member]++
		}
		M := len(w.members)
		minQ, E := P/M, P%M
		kstar, over := 0, 0
		for _, o := range owned {
			kstar += min(o, minQ)
			if o > minQ {
				over++
			}
		}
		kstar += min(E, over)
		for _, b := range []Balancer{Sticky(), CooperativeSticky()} {
			members := apply(b, w, cs)
			plan := b.Balance(members, w.topics)
			got := mapOf(plan)
			kept := 0
			for _, c := range cs {
				if slices.Contains(got[w.members[c.member].ID][c.topic], c.part) {
					kept++
				}
			}
			if kept != kstar {
				t.Fatalf("%s: kept %d, want K* = %d (owned %v, P %d)", b.ProtocolName(), kept, kstar, owned, P)
			}
		}
	})
}

// Q6 convergence: starting from a settled assignment, members join, leave
// and change subscriptions; cooperative-sticky converges with one
// follow-up rebalance: the follow-up revokes nothing and assigns everything,
// and the result is balanced.
func TestPropCooperativeConvergence(t *testing.T) {
	checkProp(t, func(t *propT) {
		uniform := drawBool(t, "uniform")
		w := genWorld(t, uniform, 10)
		b := CooperativeSticky()
		members := w.members
		plan := b.Balance(members, w.topics) // fresh: nothing owned, complete
		checkValid(t, Sticky(), members, w.topics, plan)
		gen := int32(1)
		members = followUp(members, plan, gen)
		for round := range 3 {
			// Change the group: drop some members, add some.
			var next []Member
			for _, m := range members {
				switch drawInt(t, 0, 5, "change") {
				case 0: // leaves
				case 1: // changes its subscription (keeps what it owns)
					if !uniform {
						var ts []string
						for _, n := range w.names {
							if drawBool(t, "resubscribes") {
								ts = append(ts, n)
							}
						}
						m.Subscription.Topics = ts
					}
					next = append(next, m)
				default:
					next = append(next, m)
				}
			}
			for i := range drawInt(t, 0, 3, "join") {
				ts := w.names
				if !uniform {
					ts = nil
					for _, n := range w.names {
						if drawBool(t, "subscribes") {
							ts = append(ts, n)
						}
					}
				}
				next = append(next, dyn(fmt.Sprintf("j%d-%d", round, i), sub(ts...)))
			}
			if len(next) == 0 {
				continue
			}
			members = next
			allowed := 1
			plan = b.Balance(members, w.topics)
			checkValid(t, b, members, w.topics, plan)
			for follow := 1; ; follow++ {
				gen++
				members = followUp(members, plan, gen)
				next := b.Balance(members, w.topics)
				checkValid(t, b, members, w.topics, next)
				revoked := false
				g1, g2 := mapOf(plan), mapOf(next)
				for id, tm := range g1 {
					for tn, ps := range tm {
						for _, p := range ps {
							if !slices.Contains(g2[id][tn], p) {
								revoked = true
							}
						}
					}
				}
				plan = next
				if !revoked {
					checkValid(t, Sticky(), members, w.topics, plan) // complete
					break
				}
				if follow >= allowed {
					var subs []string
					for _, m := range members {
						subs = append(subs, fmt.Sprintf("%s%v", m.ID, m.Subscription.Topics))
					}
					t.Fatalf("round %d: follow-up %d still revokes:\ntopics %v\nsubs %v\nbefore %v\nafter %v", round, follow, w.topics, subs, g1, render(plan))
				}
			}
			if uniform && spread(plan) > 1 {
				t.Fatalf("unbalanced: %v", counts(plan))
			}
			if v := oneHopViolation(members, plan); v != "" {
				t.Fatalf("%s", v)
			}
			gen++
			members = followUp(members, plan, gen)
		}
	})
}

// Q5: equal-sized topics, uniform subscriptions, members added and removed
// from scratch: each member's count of each topic stays within one of every
// other member's.
func TestPropTopicSpread(t *testing.T) {
	checkProp(t, func(t *propT) {
		nt := drawInt(t, 1, 4, "topics")
		n := int32(drawFrom(t, []int{12, 24, 60}, "n"))
		topics := map[string]int32{}
		var names []string
		for i := range nt {
			names = append(names, fmt.Sprintf("t%d", i))
			topics[names[i]] = n
		}
		for _, b := range []Balancer{Sticky(), CooperativeSticky()} {
			var members []Member
			gen := int32(1)
			for step := range 4 {
				k := drawFrom(t, []int{1, 2, 3, 4, 6, 12}, "k")
				members = resize(members, k, names...)
				plan := b.Balance(members, topics)
				if b.IsCooperative() {
					plan = b.Balance(followUp(members, plan, gen), topics)
					gen++
				}
				for _, name := range names {
					lo, hi := int(n), 0
					for _, a := range plan.Members() {
						c := 0
						for _, tpa := range a.Topics {
							if tpa.Topic == name {
								c = len(tpa.Partitions)
							}
						}
						lo, hi = min(lo, c), max(hi, c)
					}
					if hi-lo > 1 {
						t.Fatalf("%s step %d k=%d: topic %s counts range %d..%d: %v", b.ProtocolName(), step, k, name, lo, hi, render(plan))
					}
				}
				members = withHistory(b, members, plan, gen)
				gen++
			}
		}
	})
}

func mapOf(p *Plan) map[string]map[string][]int32 { return p.Map() }
