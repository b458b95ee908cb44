package assignor

import (
	"fmt"
	"testing"
)

// Fixed sticky and cooperative-sticky cases, with the outcomes Kafka's
// AbstractStickyAssignorTest / StickyAssignorTest / CooperativeStickyAssignorTest
// expect for the same inputs.

func TestStickySameGenerationClaimInvalidated(t *testing.T) {
	topics := map[string]int32{"topic": 3}
	// topic-0 is claimed by consumer1 and consumer2 in the same generation.
	eager := []Member{
		dyn("consumer1", stickySub("topic-0, topic-1", 1, "topic")),
		dyn("consumer2", stickySub("topic-0, topic-2", 1, "topic")),
		dyn("consumer3", stickySub("", 1, "topic")),
	}
	plan := Sticky().Balance(eager, topics)
	checkValid(t, Sticky(), eager, topics, plan)
	assertPlan(t, plan, map[string]string{"consumer1": "topic-1", "consumer2": "topic-2", "consumer3": "topic-0"})

	coop := []Member{
		dyn("consumer1", coopSub("topic-0, topic-1", 1, "topic")),
		dyn("consumer2", coopSub("topic-0, topic-2", 1, "topic")),
		dyn("consumer3", coopSub("", 1, "topic")),
	}
	plan = CooperativeSticky().Balance(coop, topics)
	checkValid(t, CooperativeSticky(), coop, topics, plan)
	// Nobody gets topic-0 this round: both claimants may still consume it.
	assertPlan(t, plan, map[string]string{"consumer1": "topic-1", "consumer2": "topic-2", "consumer3": ""})
	// Next round: the claimants no longer claim it, consumer3 gets it.
	next := followUp(coop, plan, 2)
	assertPlan(t, CooperativeSticky().Balance(next, topics), map[string]string{"consumer1": "topic-1", "consumer2": "topic-2", "consumer3": "topic-0"})
}

func TestStickyHigherGenerationWins(t *testing.T) {
	topics := map[string]int32{"topic": 3, "topic2": 3}
	for _, gen2 := range []int32{DefaultGeneration, 9, -7} {
		for _, bal := range []Balancer{Sticky(), CooperativeSticky()} {
			mk := stickySub
			if bal.IsCooperative() {
				mk = coopSub
			}
			members := []Member{
				dyn("consumer1", mk("topic-0, topic-2, topic2-1", 10, "topic", "topic2")),
				dyn("consumer2", mk("topic-0, topic-2, topic2-1", gen2, "topic", "topic2")),
			}
			plan := bal.Balance(members, topics)
			checkValid(t, bal, members, topics, plan)
			assertPlan(t, plan, map[string]string{
				"consumer1": "topic-0, topic-2, topic2-1",
				"consumer2": "topic-1, topic2-0, topic2-2",
			})
		}
	}
}

func TestStickyThreeGenerations(t *testing.T) {
	// Every ordering of generations 1, 2, 3 over three members that all
	// claim overlapping partitions: the highest claim wins each partition,
	// everyone ends with 2 partitions, nothing is duplicated.
	topics := map[string]int32{"t": 6}
	owned := []string{"t-0, t-1, t-2", "t-1, t-2, t-3", "t-3, t-4, t-5"}
	perms := [][3]int32{{1, 2, 3}, {1, 3, 2}, {2, 1, 3}, {2, 3, 1}, {3, 1, 2}, {3, 2, 1}}
	for _, g := range perms {
		var members []Member
		for i := range 3 {
			members = append(members, dyn(fmt.Sprintf("c%d", i), coopSub(owned[i], g[i], "t")))
		}
		for _, bal := range []Balancer{CooperativeSticky()} {
			plan := bal.Balance(members, topics)
			checkValid(t, bal, members, topics, plan)
			// After the follow-up round everyone has exactly 2.
			final := CooperativeSticky().Balance(followUp(members, plan, 4), topics)
			checkValid(t, bal, members, topics, final)
			for i, c := range counts(final) {
				if c != 2 {
					t.Fatalf("gens %v: member %d has %d: %v", g, i, c, render(final))
				}
			}
		}
	}
}

func TestStickyAddRemoveConsumerOneTopic(t *testing.T) {
	topics := map[string]int32{"topic": 3}
	one := []Member{dyn("consumer1", sub("topic"))}
	plan := Sticky().Balance(one, topics)
	assertPlan(t, plan, map[string]string{"consumer1": "topic-0, topic-1, topic-2"})

	two := []Member{dyn("consumer1", stickySub("topic-0, topic-1, topic-2", 1, "topic")), dyn("consumer2", sub("topic"))}
	plan = Sticky().Balance(two, topics)
	assertPlan(t, plan, map[string]string{"consumer1": "topic-0, topic-1", "consumer2": "topic-2"})

	ctwo := []Member{dyn("consumer1", coopSub("topic-0, topic-1, topic-2", 1, "topic")), dyn("consumer2", sub("topic"))}
	plan = CooperativeSticky().Balance(ctwo, topics)
	assertPlan(t, plan, map[string]string{"consumer1": "topic-0, topic-1", "consumer2": ""})
	plan = CooperativeSticky().Balance(followUp(ctwo, plan, 2), topics)
	assertPlan(t, plan, map[string]string{"consumer1": "topic-0, topic-1", "consumer2": "topic-2"})

	// consumer1 leaves: consumer2 takes everything and keeps what it had.
	left := []Member{dyn("consumer2", coopSub("topic-2", 2, "topic"))}
	plan = CooperativeSticky().Balance(left, topics)
	assertPlan(t, plan, map[string]string{"consumer2": "topic-0, topic-1, topic-2"})
}

// KAFKA-16277: with two topics of 12 partitions and consumers going
// 1 -> 2 -> 4 -> 2, every consumer holds exactly 12/k of each topic.
func TestStickyTopicBalanceAfterReassignment(t *testing.T) {
	topics := map[string]int32{"topic1": 12, "topic2": 12}
	for _, bal := range []Balancer{Sticky(), CooperativeSticky()} {
		var members []Member
		gen := int32(1)
		for _, k := range []int{1, 2, 4, 2} {
			members = resize(members, k, "topic1", "topic2")
			plan := bal.Balance(members, topics)
			if bal.IsCooperative() {
				plan = bal.Balance(followUp(members, plan, gen), topics)
				gen++
			}
			checkValid(t, bal, members, topics, plan)
			for _, a := range plan.Members() {
				for _, tp := range a.Topics {
					if len(tp.Partitions) != 12/k {
						t.Fatalf("%s k=%d: %s has %d of %s: %v", bal.ProtocolName(), k, a.MemberID, len(tp.Partitions), tp.Topic, render(plan))
					}
				}
				if len(a.Topics) != 2 {
					t.Fatalf("%s k=%d: %v", bal.ProtocolName(), k, render(plan))
				}
			}
			members = withHistory(bal, members, plan, gen)
			gen++
		}
	}
}

func TestStickyIgnoresBadClaims(t *testing.T) {
	topics := map[string]int32{"t": 2, "empty": 0}
	for _, bal := range []Balancer{Sticky(), CooperativeSticky()} {
		mk := stickySub
		if bal.IsCooperative() {
			mk = coopSub
		}
		s := mk("gone-0, t-5, t--1, t-1, t-1, empty-0", 3, "t", "empty", "gone")
		members := []Member{dyn("a", sub("t")), dyn("b", s), dyn("b", sub()), dyn("c", sub())}
		plan := bal.Balance(members, topics)
		checkValid(t, bal, members, topics, plan)
		assertPlan(t, plan, map[string]string{"a": "t-0", "b": "t-1", "c": ""})
	}
	// Unparsable sticky userData means no history.
	bad := sub("t")
	bad.UserData = []byte{0, 0, 0, 9, 1}
	members := []Member{dyn("a", stickySub("t-1", 1, "t")), dyn("b", bad)}
	assertPlan(t, Sticky().Balance(members, topics), map[string]string{"a": "t-1", "b": "t-0"})
	// V0 sticky userData (no generation) is still history.
	v0 := sub("t")
	u := StickyUserData{Owned: tp("t-0")}
	v0.UserData = u.AppendTo(nil)[:len(u.AppendTo(nil))-4]
	members = []Member{dyn("a", sub("t")), dyn("b", v0)}
	assertPlan(t, Sticky().Balance(members, topics), map[string]string{"a": "t-1", "b": "t-0"})
	// Cooperative v1 subscription: generation from the 4-byte userData.
	v1 := coopSub("t-0", 0, "t")
	v1.Version = 1
	v1.UserData = AppendCooperativeUserData(nil, 8)
	members = []Member{dyn("a", coopSub("t-0", 7, "t")), dyn("b", v1)}
	assertPlan(t, CooperativeSticky().Balance(members, topics), map[string]string{"a": "t-1", "b": "t-0"})
}

func TestStickyNonUniform(t *testing.T) {
	// Kafka's javadoc example for non-uniform subscriptions, where
	// roundrobin is unbalanced: sticky gives C0 t0, C1 both t1 partitions,
	// and C2 all of t2.
	topics := map[string]int32{"t0": 1, "t1": 2, "t2": 3}
	members := []Member{dyn("C0", sub("t0")), dyn("C1", sub("t0", "t1")), dyn("C2", sub("t0", "t1", "t2"))}
	plan := Sticky().Balance(members, topics)
	checkValid(t, Sticky(), members, topics, plan)
	assertPlan(t, plan, map[string]string{"C0": "t0-0", "C1": "t1-0, t1-1", "C2": "t2-0, t2-1, t2-2"})

	// A member stops subscribing to a topic: its partitions of that topic
	// move; the others stay.
	members = []Member{
		dyn("a", coopSub("x-0, x-1, y-0", 1, "x")),
		dyn("b", coopSub("x-2, y-1", 1, "x", "y")),
	}
	topics = map[string]int32{"x": 3, "y": 2}
	plan = CooperativeSticky().Balance(members, topics)
	checkValid(t, CooperativeSticky(), members, topics, plan)
	// y-0 is still owned by a, so b cannot get it this round.
	assertPlan(t, plan, map[string]string{"a": "x-0, x-1", "b": "x-2, y-1"})
	plan = CooperativeSticky().Balance(followUp(members, plan, 2), topics)
	assertPlan(t, plan, map[string]string{"a": "x-0, x-1", "b": "x-2, y-0, y-1"})
}

// resize keeps the first k members (adding fresh ones named c0..ck-1).
func resize(members []Member, k int, topics ...string) []Member {
	if len(members) > k {
		return members[:k]
	}
	for i := len(members); i < k; i++ {
		members = append(members, dyn(fmt.Sprintf("c%d", i), sub(topics...)))
	}
	return members
}

// withHistory returns members whose subscriptions carry plan as their
// current assignment at generation gen, in the format the balancer reads.
func withHistory(b Balancer, members []Member, plan *Plan, gen int32) []Member {
	byID := map[string][]TopicPartitions{}
	for _, a := range plan.Members() {
		byID[a.MemberID] = a.Topics
	}
	out := make([]Member, len(members))
	for i, m := range members {
		s, err := DecodeSubscription(b.Metadata(MemberState{Topics: m.Subscription.Topics, Owned: byID[m.ID], Generation: gen}))
		if err != nil {
			panic(err)
		}
		out[i] = Member{ID: m.ID, InstanceID: m.InstanceID, Subscription: s}
	}
	return out
}

// followUp is the cooperative follow-up round: every member now owns what the
// plan gave it.
func followUp(members []Member, plan *Plan, gen int32) []Member {
	return withHistory(CooperativeSticky(), members, plan, gen)
}
