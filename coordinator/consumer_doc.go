// Consumer groups (KIP-848, the "consumer" group protocol).
//
// ConsumerGroup (consumer*.go) is the pure state machine of one group that
// uses ConsumerGroupHeartbeat, next to the classic Group and in its shape:
// no goroutines, no I/O, no clock. Its owner calls
//
//   - Heartbeat(req, now, fx) for each ConsumerGroupHeartbeat; it writes
//     fx.Records (replicated, in order) and only then sends the response;
//   - OnTimer(kind, member, now, fx) when a ConsumerTimer fires (a stale
//     fire is ignored or re-armed for the rest);
//   - SetTopics(topics, now, fx) when the catalog changes (topic ->
//     partitions), and before the regex timer (ConsumerTimerRegex) fires;
//   - RestoreConsumerGroup(records) then ArmAll(now, fx) after a takeover.
//
// Rules, as Kafka's group coordinator applies them (issue 30 links the
// implementation reference written from Kafka's source):
//
//   - Validation in Kafka's order, before anything changes: INVALID_REQUEST
//     for malformed fields, UNSUPPORTED_ASSIGNOR for an assignor not in
//     ConsumerConfig.Assignors; then GROUP_ID_NOT_FOUND, UNKNOWN_MEMBER_ID,
//     FENCED_INSTANCE_ID, UNRELEASED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED,
//     FENCED_MEMBER_EPOCH and INVALID_REGULAR_EXPRESSION (Go's RE2, full
//     match: the regex must match the whole topic name). An error changes
//     nothing and emits nothing.
//   - Member epoch 0 joins (a known member may rejoin at 0, as Kafka trunk
//     allows since KAFKA-19233), -1 leaves, -2 is a static member's
//     temporary leave: it keeps its seat and partitions, no epoch bump,
//     until its session timeout. A join with the instance id of a member at
//     -2 takes its place, assignment included, without an epoch bump when
//     the subscription is the same. A static member rejoining at 0 with its
//     own id is handled in place (apache/kafka#23542). A -2 without an
//     instance id is the static leave of the member it names when that
//     member is static (franz-go v1.22.3 leaves that way; Kafka answers
//     INVALID_REQUEST, and the kgo member could not restart within its
//     session), and INVALID_REQUEST otherwise, as in Kafka.
//   - A new member, a removed member, a changed subscription (names, regex,
//     preferred assignor), a change of the subscribed topics in the
//     catalog or a regex resolution that finds other topics bumps the group
//     epoch; the target assignment is computed at once (assignment interval
//     0) by the assignor most members prefer.
//   - Regexes are resolved off the heartbeat path, batched per group, at
//     most once per RegexRefreshMinInterval (consumer_regex.go): a member
//     with a new regex gets its topics at the resolution its join arms.
//   - Each member reconciles on its own heartbeats (Kafka's
//     CurrentAssignmentBuilder): STABLE at its epoch; UNREVOKED_PARTITIONS
//     keeps its old epoch and must stop reporting the partitions being
//     revoked before it moves on (its rebalance timeout runs, and fences it
//     if it does not); UNRELEASED_PARTITIONS is at the new epoch and waits
//     for partitions that their previous owner still holds.
//   - A heartbeat at the member's previous epoch is accepted when it reports
//     only partitions the member holds (its last answer was lost).
//   - The session timeout removes a member that stops heartbeating (also a
//     static member parked at -2). Removal frees its partitions, bumps the
//     epoch and reassigns. An empty group keeps assignment epoch = epoch.
//
// Migration (consumer_classic.go, consumer_migrate.go; the reference's
// section 4), under ConsumerConfig.MigrationPolicy (Kafka's
// group.consumer.migration.policy; empty groups convert whatever it says):
//
//   - Classic members live inside a consumer group: ClassicJoin takes the
//     subscription and owned partitions from the ConsumerProtocol metadata
//     of the member's first protocol and reconciles the member exactly like
//     a consumer member; the answer is immediate (generation = member
//     epoch, no leader, no member list), ClassicSync answers the current
//     assignment in the member's protocol version, ClassicHeartbeat answers
//     REBALANCE_IN_PROGRESS when the member must rejoin to move on. Their
//     session timeouts are their JoinGroup's; join and sync timeouts
//     (ConsumerTimerJoin, ConsumerTimerSync) fence members that do not
//     come back. Their JoinGroup data is replicated in the member record.
//   - Upgrade: a consumer join to a classic group with members converts it
//     (group epoch = generation, members STABLE holding their last
//     assignment) or answers GROUP_ID_NOT_FOUND with Kafka's reason; the
//     same write retires the classic members (an empty GroupRecord).
//   - Downgrade: when the last consumer-protocol member is removed and
//     classic members remain, tombstones remove every consumer record and
//     the classic group is written, then rebalances. Its generation is the
//     highest member epoch of its members; a member behind it (it had not
//     rejoined since an earlier removal) keeps its own epoch as its
//     generation until the rebalance forms the next one, so no classic
//     member is told ILLEGAL_GENERATION (Kafka takes the group epoch, and
//     such a member loses its partitions). A classic static member whose
//     JoinGroup takes the seat of the last consumer-protocol member
//     downgrades the group in the same write (Kafka's
//     validateOnlineDowngradeWithReplacedMember): Stable, without a
//     rebalance, when every member holds its target at the group epoch;
//     rebalancing otherwise (a changed subscription, as Kafka trunk).
//   - Group.ConsumerHeartbeat, Group.ServeClassic and Group.ConsumerTimer are
//     the owner's entry points. consumer_migrate_test.go runs rolling upgrades and
//     downgrades of eager and cooperative clients and checks that no
//     partition is ever held by two clients.
//
// Invariants (checked after every step by consumer_harness_test.go and the
// randomized consumer_prop_test.go):
//
//   - No partition is ever in two members' assigned or pending-revocation
//     sets: a partition joins a member's set only when no other member holds
//     it (setAssignment panics otherwise), and leaves the previous owner's
//     set only when that member reported it gone or was removed. So no two
//     clients ever hold a partition, whatever answers are lost.
//   - After every call the assignment epoch equals the group epoch.
//   - Replaying the records written so far (RestoreConsumerGroup) rebuilds
//     the same group: epochs, members, targets, current assignments.
//   - Once members heartbeat normally, the group converges: Stable, each
//     member holding its target, every subscribed partition owned.
//
// Where Kafka versions differ, this machine does as Kafka 4.0-4.2 for the
// first epoch (a new group's first member gets epoch 1; trunk gives 2) and
// as trunk for rejoins. Simplifications to revisit: regexes have no
// per-principal filtering, and their resolutions are rebuilt on a takeover
// rather than replicated (consumer_regex.go); the subscribed-topics signature
// (names and partition counts) stands in for Kafka's metadata hash (no
// racks); topics are named, so a topic deleted and created again under the
// same name between two catalog updates is not noticed.
//
// Replicated: consumer_persist.go converts the five ConsumerRecord types to
// and from protobuf records (cohort.group.v1: ConsumerGroupMetadata,
// ConsumerGroupMemberMetadata, ConsumerGroupTargetAssignmentMember,
// ConsumerGroupTargetAssignmentMetadata, ConsumerGroupCurrentMemberAssignment,
// as Kafka names its records); raftfsm applies them (from log format 4,
// which the cluster reaches once every node applies it: below it the store
// refuses such writes with ErrStoreUnavailable), keeps each group's records
// compacted, apart from its classic record, in snapshots too, and reads them
// back (ConsumerRecords on raftfsm's FSM, Store and MemoryStore) in an order
// that ConsumerRecordsFromProto and RestoreConsumerGroup rebuild the same
// group from. A GroupTombstone removes a group's records of both types.
//
// Where the machine runs: the group actor (actors/consumer.go) hands the
// Group every ConsumerGroupHeartbeat, every classic request while a
// consumer group is attached, and every consumer timer (consumer_migrate.go),
// writes each call's records in one write before any answer, and loads the
// group again from the store after a failed write or a takeover. The Kafka
// listener (kafka/consumer.go) maps ConsumerGroupHeartbeat and
// ConsumerGroupDescribe (API keys 68 and 69) to the native messages, topic
// ids to names through the catalog. Commits and fetches (OffsetCommit and
// OffsetFetch v9+) are checked against member epochs (consumer_host.go); a
// consumer-protocol member's OffsetCommit below v9 is UNSUPPORTED_VERSION,
// a commit with an epoch to a group that does not exist GROUP_ID_NOT_FOUND
// from v9 on (ILLEGAL_GENERATION below), and DescribeGroups of a consumer
// group is state Dead with GROUP_ID_NOT_FOUND from v6 on, no error below
// (the listener passes the request's version).
//
// Left to do: Kafka 4.3's
// per-partition commit check (KIP-1251: a commit at an older epoch for
// partitions the member still holds) in place of 4.0's epoch equality;
// rack-aware assignment.

package coordinator
