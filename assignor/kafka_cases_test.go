package assignor

import (
	"math/rand/v2"
	"testing"
)

// Fixed cases with the outcomes of Kafka's RangeAssignorTest and
// RoundRobinAssignorTest (same inputs, same expected assignments).

type fixedCase struct {
	name    string
	topics  map[string]int32
	members []Member
	want    map[string]string
}

func runFixed(t *testing.T, b Balancer, cases []fixedCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan := b.Balance(c.members, c.topics)
			checkValid(t, b, c.members, c.topics, plan)
			assertPlan(t, plan, c.want)
			// Output does not depend on input order.
			rev := make([]Member, len(c.members))
			for i, m := range c.members {
				rev[len(rev)-1-i] = m
			}
			assertPlan(t, b.Balance(rev, c.topics), c.want)
		})
	}
}

func static(id, instance string, s Subscription) Member {
	return Member{ID: id, InstanceID: instance, Subscription: s}
}

func dyn(id string, s Subscription) Member { return Member{ID: id, Subscription: s} }

func commonCases() []fixedCase {
	return []fixedCase{
		{"OneConsumerNoTopic", map[string]int32{}, []Member{dyn("consumer1", sub())}, map[string]string{"consumer1": ""}},
		{"OneConsumerNonexistentTopic", map[string]int32{}, []Member{dyn("consumer1", sub("topic1"))}, map[string]string{"consumer1": ""}},
		{"OneConsumerOneTopic", map[string]int32{"topic1": 3}, []Member{dyn("consumer1", sub("topic1"))},
			map[string]string{"consumer1": "topic1-0, topic1-1, topic1-2"}},
		{"OnlyAssignsPartitionsFromSubscribedTopics", map[string]int32{"topic1": 3, "other": 3}, []Member{dyn("consumer1", sub("topic1"))},
			map[string]string{"consumer1": "topic1-0, topic1-1, topic1-2"}},
		{"OneConsumerMultipleTopics", map[string]int32{"topic1": 1, "topic2": 2}, []Member{dyn("consumer1", sub("topic1", "topic2"))},
			map[string]string{"consumer1": "topic1-0, topic2-0, topic2-1"}},
		{"TwoConsumersOneTopicOnePartition", map[string]int32{"topic1": 1},
			[]Member{dyn("consumer1", sub("topic1")), dyn("consumer2", sub("topic1"))},
			map[string]string{"consumer1": "topic1-0", "consumer2": ""}},
		{"TwoConsumersOneTopicTwoPartitions", map[string]int32{"topic1": 2},
			[]Member{dyn("consumer1", sub("topic1")), dyn("consumer2", sub("topic1"))},
			map[string]string{"consumer1": "topic1-0", "consumer2": "topic1-1"}},
		{"MultipleConsumersMixedTopics", map[string]int32{"topic1": 3, "topic2": 2},
			[]Member{dyn("consumer1", sub("topic1")), dyn("consumer2", sub("topic1", "topic2")), dyn("consumer3", sub("topic1"))},
			map[string]string{"consumer1": "topic1-0", "consumer2": "topic1-1, topic2-0, topic2-1", "consumer3": "topic1-2"}},
	}
}

func TestRangeKafkaCases(t *testing.T) {
	six := map[string]int32{"topic1": 3, "topic2": 3}
	both := sub("topic1", "topic2")
	cases := append(commonCases(),
		fixedCase{"TwoConsumersTwoTopicsSixPartitions", six,
			[]Member{dyn("consumer1", both), dyn("consumer2", both)},
			map[string]string{"consumer1": "topic1-0, topic1-1, topic2-0, topic2-1", "consumer2": "topic1-2, topic2-2"}},
		// Static members compare on instance id, not member id.
		fixedCase{"TwoStaticConsumersTwoTopicsSixPartitions", six,
			[]Member{static("consumer-b", "instance1", both), static("consumer-a", "instance2", both)},
			map[string]string{"consumer-b": "topic1-0, topic1-1, topic2-0, topic2-1", "consumer-a": "topic1-2, topic2-2"}},
		// A static member sorts before a dynamic one.
		fixedCase{"OneStaticConsumerAndOneDynamicConsumerTwoTopicsSixPartitions", six,
			[]Member{static("consumer-b", "instance1", both), dyn("consumer-a", both)},
			map[string]string{"consumer-b": "topic1-0, topic1-1, topic2-0, topic2-1", "consumer-a": "topic1-2, topic2-2"}},
		fixedCase{"StaticMemberRangeAssignmentPersistent", map[string]int32{"topic1": 5, "topic2": 4},
			[]Member{static("consumer1", "instance1", both), static("consumer2", "instance2", both),
				static("consumer3", "instance3", both), dyn("consumer4", both)},
			map[string]string{"consumer1": "topic1-0, topic1-1, topic2-0", "consumer2": "topic1-2, topic2-1",
				"consumer3": "topic1-3, topic2-2", "consumer4": "topic1-4, topic2-3"}},
		fixedCase{"StaticMemberRangeAssignmentPersistent/replaced", map[string]int32{"topic1": 5, "topic2": 4},
			[]Member{static("consumer1", "instance1", both), static("consumer2", "instance2", both),
				static("consumer3", "instance3", both), dyn("consumer5", both)},
			map[string]string{"consumer1": "topic1-0, topic1-1, topic2-0", "consumer2": "topic1-2, topic2-1",
				"consumer3": "topic1-3, topic2-2", "consumer5": "topic1-4, topic2-3"}},
		fixedCase{"StaticMemberRangeAssignmentPersistentAfterMemberIdChanges", map[string]int32{"topic1": 5, "topic2": 5},
			[]Member{static("consumer1", "instance1", both), static("consumer2", "instance2", both), static("consumer3", "instance3", both)},
			map[string]string{"consumer1": "topic1-0, topic1-1, topic2-0, topic2-1", "consumer2": "topic1-2, topic1-3, topic2-2, topic2-3",
				"consumer3": "topic1-4, topic2-4"}},
		fixedCase{"StaticMemberRangeAssignmentPersistentAfterMemberIdChanges/switched", map[string]int32{"topic1": 5, "topic2": 5},
			[]Member{static("consumer1", "instance1", both), static("consumer5", "instance2", both), static("consumer4", "instance3", both)},
			map[string]string{"consumer1": "topic1-0, topic1-1, topic2-0, topic2-1", "consumer5": "topic1-2, topic1-3, topic2-2, topic2-3",
				"consumer4": "topic1-4, topic2-4"}},
		// Kafka's rack-aware tests list these as the assignments when rack
		// awareness does not apply.
		fixedCase{"NonRackAware/UniformSubscription", map[string]int32{"t1": 6, "t2": 7, "t3": 2},
			[]Member{dyn("c0", sub("t1", "t2", "t3")), dyn("c1", sub("t1", "t2", "t3")), dyn("c2", sub("t1", "t2", "t3"))},
			map[string]string{"c0": "t1-0, t1-1, t2-0, t2-1, t2-2, t3-0", "c1": "t1-2, t1-3, t2-3, t2-4, t3-1", "c2": "t1-4, t1-5, t2-5, t2-6"}},
		fixedCase{"NonRackAware/NonEqualSubscription", map[string]int32{"t1": 6, "t2": 7, "t3": 2},
			[]Member{dyn("c0", sub("t1", "t2", "t3")), dyn("c1", sub("t1", "t2", "t3")), dyn("c2", sub("t1", "t3"))},
			map[string]string{"c0": "t1-0, t1-1, t2-0, t2-1, t2-2, t2-3, t3-0", "c1": "t1-2, t1-3, t2-4, t2-5, t2-6, t3-1", "c2": "t1-4, t1-5"}},
		fixedCase{"NonRackAware/CoPartitioning", map[string]int32{"t1": 6, "t2": 6, "t3": 2, "t4": 2},
			[]Member{dyn("c0", sub("t1", "t2")), dyn("c1", sub("t1", "t2")), dyn("c2", sub("t3", "t4")), dyn("c3", sub("t3", "t4"))},
			map[string]string{"c0": "t1-0, t1-1, t1-2, t2-0, t2-1, t2-2", "c1": "t1-3, t1-4, t1-5, t2-3, t2-4, t2-5", "c2": "t3-0, t4-0", "c3": "t3-1, t4-1"}},
		// The javadoc example.
		fixedCase{"Javadoc", six, []Member{dyn("C0", both), dyn("C1", both)},
			map[string]string{"C0": "topic1-0, topic1-1, topic2-0, topic2-1", "C1": "topic1-2, topic2-2"}},
	)
	runFixed(t, Range(), cases)
}

func TestRoundRobinKafkaCases(t *testing.T) {
	six := map[string]int32{"topic1": 3, "topic2": 3}
	both := sub("topic1", "topic2")
	cases := append(commonCases(),
		fixedCase{"TwoDynamicConsumersTwoTopicsSixPartitions", six,
			[]Member{dyn("consumer1", both), dyn("consumer2", both)},
			map[string]string{"consumer1": "topic1-0, topic1-2, topic2-1", "consumer2": "topic1-1, topic2-0, topic2-2"}},
		fixedCase{"TwoStaticConsumersTwoTopicsSixPartitions", six,
			[]Member{static("consumer-b", "instance1", both), static("consumer-a", "instance2", both)},
			map[string]string{"consumer-b": "topic1-0, topic1-2, topic2-1", "consumer-a": "topic1-1, topic2-0, topic2-2"}},
		fixedCase{"OneStaticConsumerAndOneDynamicConsumerTwoTopicsSixPartitions", six,
			[]Member{static("consumer-b", "instance1", both), dyn("consumer-a", both)},
			map[string]string{"consumer-b": "topic1-0, topic1-2, topic2-1", "consumer-a": "topic1-1, topic2-0, topic2-2"}},
		fixedCase{"StaticMemberAssignmentPersistent", six,
			[]Member{static("consumer1", "instance1", both), static("consumer2", "instance2", both),
				static("consumer3", "instance3", both), dyn("consumer4", both)},
			map[string]string{"consumer1": "topic1-0, topic2-1", "consumer2": "topic1-1, topic2-2", "consumer3": "topic1-2", "consumer4": "topic2-0"}},
		fixedCase{"StaticMemberAssignmentPersistent/replaced", six,
			[]Member{static("consumer1", "instance1", both), static("consumer2", "instance2", both),
				static("consumer3", "instance3", both), dyn("consumer5", both)},
			map[string]string{"consumer1": "topic1-0, topic2-1", "consumer2": "topic1-1, topic2-2", "consumer3": "topic1-2", "consumer5": "topic2-0"}},
		fixedCase{"StaticMemberAssignmentPersistentAfterMemberIdChanges", six,
			[]Member{static("consumer4", "instance1", both), static("consumer5", "instance2", both), static("consumer1", "instance3", both)},
			map[string]string{"consumer4": "topic1-0, topic2-0", "consumer5": "topic1-1, topic2-1", "consumer1": "topic1-2, topic2-2"}},
		// The javadoc example for non-uniform subscriptions.
		fixedCase{"JavadocNonUniform", map[string]int32{"t0": 1, "t1": 2, "t2": 3},
			[]Member{dyn("C0", sub("t0")), dyn("C1", sub("t0", "t1")), dyn("C2", sub("t0", "t1", "t2"))},
			map[string]string{"C0": "t0-0", "C1": "t1-0", "C2": "t1-1, t2-0, t2-1, t2-2"}},
		// The iterator position carries across topics, skipping non-subscribers.
		fixedCase{"IteratorCarriesAcrossTopics", map[string]int32{"a": 2, "b": 3},
			[]Member{dyn("m1", sub("a", "b")), dyn("m2", sub("b")), dyn("m3", sub("a", "b"))},
			map[string]string{"m1": "a-0, b-0", "m2": "b-1", "m3": "a-1, b-2"}},
	)
	runFixed(t, RoundRobin(), cases)
}

// TestRoundRobinMatchesNaive checks the skip-by-binary-search iterator against
// the literal definition on random non-uniform groups.
func TestRoundRobinMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 300; iter++ {
		members, topics := randomGroup(r, 1+r.IntN(8), 1+r.IntN(6), 6, false)
		plan := RoundRobin().Balance(members, topics)
		checkValid(t, RoundRobin(), members, topics, plan)
		assertMembers(t, plan, naiveRoundRobin(members, topics))
	}
}

// TestRangeMatchesNaive does the same for range.
func TestRangeMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 300; iter++ {
		members, topics := randomGroup(r, 1+r.IntN(8), 1+r.IntN(6), 9, false)
		plan := Range().Balance(members, topics)
		checkValid(t, Range(), members, topics, plan)
		assertMembers(t, plan, naiveRange(members, topics))
	}
}

func assertMembers(t *testing.T, plan *Plan, want []MemberAssignment) {
	t.Helper()
	assertPlan(t, plan, renderMembers(want))
}
