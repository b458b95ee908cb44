// Package assignor implements Kafka's consumer partition assignors ("range",
// "roundrobin", "sticky", "cooperative-sticky") and the ConsumerProtocol
// subscription and assignment codecs (versions 0-3, newer versions read
// through their version 3 prefix).
//
// # Interface
//
// A [Balancer] is the strategy a member library advertises in JoinGroup and
// the leader runs after it: its protocol name, the rebalance protocols it
// supports (EAGER, COOPERATIVE), the subscription metadata a member sends, and
// Balance, which maps decoded member subscriptions and topic partition counts
// to per-member assignments (a [Plan]). Balance is deterministic: it depends
// neither on the order of the members given nor on map iteration order.
//
// A Plan stores all assignments in a few integer arrays and encodes the
// SyncGroup assignments straight from them ([Plan.Encode]); [Plan.Topics]
// and [Plan.Members] give the usual per-topic lists. A [Decoder] decodes the
// members' subscriptions, sharing topic-name memory across members.
//
// Robustness: owned partitions of unknown topics or with out-of-range
// numbers, duplicate member ids (the first is kept), empty subscriptions,
// topics without partitions, version 1 subscriptions missing their owned
// partitions, and unparsable assignor userData (no history) are all tolerated
// and ignored. Malformed bytes are decoding errors wrapping [ErrMalformed];
// nothing panics.
//
// # Common model
//
// Members are ordered as Kafka orders them: static members (with a
// group.instance.id) first by instance id, then dynamic members by member id.
// Subscribed topics that are unknown or have no partitions are skipped.
// Internally a call works on dense integers: members 0..M-1 in that order,
// topics 0..T-1 in name order, and partition p of topic t at global index
// base[t]+p, so partitions 0..P-1 are in (topic, partition) order. Members
// with the same topic list share one resolved subscription, so string work is
// proportional to the number of distinct lists. No hot loop uses maps keyed
// by topic-partition, and no loop runs over partitions times members.
//
// # Algorithms and cost
//
// Range: for each topic, its c subscribers in member order get contiguous
// ranges of n/c partitions, the first n%c one more (identical to Kafka's
// RangeAssignor). O(P + sum of subscription sizes). With replica racks
// (KIP-881), topics with the same subscribers and partition count stay
// co-partitioned, per-topic quotas are unchanged, and a first pass prefers
// rack-matching partition indices.
//
// Roundrobin: partitions in (topic, partition) order are dealt by one
// circular member iterator that skips members not subscribed to the topic
// (identical to Kafka's RoundRobinAssignor). Skipping uses a binary search in
// each topic's subscriber list: O(P + T log M + sum of subscription sizes).
//
// Sticky and cooperative-sticky share one engine. Owned partitions come from
// the sticky userData (eager "sticky") or from the subscription's owned
// partitions and generation (cooperative). A partition claimed by several
// members goes to the claim with the highest generation; a tie at the highest
// generation invalidates it for all of its claimants; a missing generation
// counts as -1, the lowest. Then:
//
//   - uniform subscriptions: quota assignment (minQ = P/M, E = P%M members get
//     one more). Members keep up to their quota, preferring the lowest
//     partition numbers across topics so revocations spread over topics; the
//     rest is dealt round-robin. The result has max-min <= 1 and keeps the
//     optimal number of owned partitions
//     K* = sum(min(owned_i, minQ)) + min(E, #{i: owned_i > minQ}).
//     O(P + M*T) plus linear-time selection for members over quota.
//   - differing subscriptions: keep owned partitions still subscribed, give
//     unassigned partitions to the least-loaded subscriber (a heap per topic,
//     topics with fewer subscribers first), then move partitions from the
//     most-loaded holder to the least-loaded subscriber of each topic until
//     no member holds a partition of a topic that a member with two fewer
//     partitions subscribes to (Kafka's balance criterion).
//     A move away from a partition's previous owner costs a revocation, so
//     the repair first moves partitions that are free of that cost: between
//     non-owners, to a lighter member (a strict improvement) or sideways to
//     a member one lighter (a bounded number of times per partition), and
//     only then an owned one. Fill: O(P log M + sum of subscription sizes);
//     a repair pass: O(P + sum of subscription sizes) plus O(log M) per move.
//
// Cooperative-sticky then removes from the plan every partition that would
// move from a current owner to a new one (and every partition with a tied
// claim): the owner revokes it, and the follow-up rebalance assigns it. With
// uniform subscriptions the follow-up never revokes anything, so the group
// converges in one follow-up round. With differing subscriptions the
// follow-up round starts from exactly the plan handed out (members own what
// they were given), so it is simulated: if it would move an owned partition,
// the simulated plan, adjusted against the real owners, is handed out
// instead (at most three simulations, each one run of the engine).
//
// Racks (KIP-881) apply when members send racks, some partition has a
// replica on a member's rack, and not every partition has replicas on every
// member rack; racks of all replicas count. Range is described above. With
// uniform subscriptions the sticky engine prefers rack-matching owned
// partitions when a member must give some up and deals free partitions to
// rack-matching members first; the differing-subscriptions path ignores
// racks. Round-robin is not rack-aware, as in Kafka.
package assignor
