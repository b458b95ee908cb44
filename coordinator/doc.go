// Package coordinator is the pure state machine of one Kafka consumer group
// (the classic JoinGroup/SyncGroup/Heartbeat protocol).
//
// A Group is driven by calls of the form (request, now) and answers through an
// Effects value: replies to send (immediately or to requests that were parked
// earlier), timers to arm or cancel, and records to persist. The package has
// no goroutines, does no I/O and never reads the wall clock; every Kafka rule
// of the coordinator lives here and only here. The actor that owns a Group
// executes the effects and feeds timer fires and persistence results back in.
//
// Timer model. Each member has exactly one liveness timer, keyed by its member
// id; every liveness event (join completion, heartbeat, commit, sync, static
// replacement) replaces it. A member added by JoinGroup gets the new-member join
// timeout; join completion replaces that with the session timeout before the
// member stops being new. Heartbeats and commits, the frequent events, do not
// touch an armed timer: they move the member's session end, and a timer that
// fires before that end is armed again for the rest (sessions.go), so the
// member expires at the same moment. When a timer fires at a session's end
// the machine decides from the member's current state alone (pending, new,
// parked in join or sync, or neither). Because there is never more than one
// timer per member and every other event replaces it, KAFKA-9232 (the
// new-member timer outliving join completion) and KAFKA-9752 (a member left
// with no session timer after join completion) cannot happen. The group has
// two more timers: the join timer (rebalance timeout or initial delay) and the
// pending-sync timer, and a periodic offset-expiry timer.
//
// Generations are never answered twice. Kafka persists a group only when it
// turns Stable or Empty, so a coordinator that takes over mid-rebalance can
// hand out the same generation again with another membership. Here a
// completed join phase first writes a GenerationReserved record and answers
// the JoinGroups once it is durable; a restored group continues above the
// reserved generation while its members keep the generation they hold.
//
// A takeover does not become a rebalance. Clients that lose their
// coordinator often send JoinGroup again with their member id, and Kafka
// rebalances when that member leads or its metadata changed in any byte. In
// the takeover window (takeover.go: after a group is restored, until each
// member speaks to the new coordinator, at most a session timeout) an
// unchanged rejoin gets the current generation back, the leader's with
// SkipAssignment (KIP-814). Config.DisableTakeoverWindow restores Kafka's
// rules.
//
// Ownership guard (guard.go; Config.OwnershipGuard, on by default; groups of
// protocol type "consumer" only). The classic protocol lets two members own a
// partition at once: the leader may move a partition from A to B in one
// round, and the coordinator answers every SyncGroup together, while A gives
// the partition up only after its own answer arrives (an eager client that
// was cooperative until the group fell back to an eager assignor revokes
// then; Kafka behaves the same). The coordinator sees what every member
// listed as owned in its JoinGroup subscription (ConsumerProtocol v1+, the
// union over all protocols it listed: kgo puts owned partitions only in its
// cooperative assignors' metadata) and every assignment, so it enforces:
//
//   - a SyncGroup answer never gives member B a partition that another
//     member A listed as owned this generation. The partition is left out of
//     B's answer (withheld); B's answer is not delayed, so no pair of members
//     can wait on each other. If the leader also gave the partition to A,
//     A keeps it and nobody is waited for;
//   - A has released it at its first Heartbeat or JoinGroup after its own
//     SyncGroup answer in this generation (its answer says what it keeps, and
//     real clients heartbeat or re-join only once their revoke callbacks have
//     returned), at its LeaveGroup or at its removal. An OffsetCommit is no
//     release: clients commit from inside their revoke callbacks. A heartbeat
//     before A's answer (the Java client heartbeats while it waits) is none
//     either;
//   - once every owner that blocks a withheld partition has released, the
//     group starts a follow-up rebalance (that heartbeat is answered
//     REBALANCE_IN_PROGRESS; a JoinGroup waits in the new join phase), in
//     which the owners no longer list the partitions and the leader's plan
//     goes out whole. A removal starts a rebalance of its own;
//   - a claim outside the assignment the member was last answered is stale
//     (it released the rest when it acknowledged that answer) and is
//     ignored, so a client that keeps listing what it gave up cannot cause
//     follow-up rebalances forever.
//
// Members answered, the group record and DescribeGroups carry what each
// member was actually given. Eager members revoke before they join and list
// nothing, so a group that never falls back from cooperative pays one decode
// of the subscriptions per generation and nothing on heartbeats beyond one
// comparison. The withheld partitions and follow-up rebalances are counted
// (Group.GuardStats) and reported as Effects.Events for the owner to log.
//
// Leader failover in a guarded round: the guard's state is not replicated; it
// is rebuilt. The group record written with withheld answers has
// rebalance_pending set, so a coordinator that loads it starts a rebalance at
// once; every member then lists again what it still owns (a client re-joins
// only after it has processed its last answer) and the guard decides afresh.
// That costs one rebalance after a failover, only while partitions were
// withheld, and cannot hand out a partition on the strength of a heartbeat
// the new coordinator cannot place.
//
// Mixed-assignor groups (mixed.go; Config.MixedAssignors, off by default).
// Kafka admits a member only if one of its assignors is listed by every
// member, so a single rolling bounce from [range] to [cooperative-sticky] (or
// back) refuses each restarted member with INCONSISTENT_GROUP_PROTOCOL until
// the last old member is gone, and the group shrinks to one member. With the
// option, a "consumer" group in which every member lists only built-in
// assignors (range, roundrobin, sticky, cooperative-sticky) admits such a
// member. While no assignor is common to all members:
//
//   - the group's protocol is the leader's first choice, but every member is
//     told (in JoinGroup and SyncGroup) its own first choice unless it lists
//     the group's, so eager clients stay eager and cooperative ones
//     cooperative; SyncGroup v5 must name what the member was told;
//   - the client named leader is sent only itself as member list, and its
//     plan is ignored: at the first SyncGroup of the generation the
//     coordinator assigns the group itself, cooperative-sticky over every
//     member's subscription and owned partitions (the union over its
//     protocols), with partition counts from the topic catalog
//     (Config.TopicPartitions). A partition an owner keeps listing is never
//     moved in one round (cooperative-sticky leaves it out), eager members
//     revoked before joining, and the ownership guard applies as to any plan;
//   - once every member lists a common assignor again, the group is an
//     ordinary group and its leader assigns.
//
// A restored mixed group keeps the member subscriptions under the names they
// were told; its members' next JoinGroup brings their full lists back.
//
// Deterministic choices where Kafka leaves order to a hash map:
//   - members are kept in join order; when the leader leaves, the oldest
//     remaining member becomes leader; at join completion a leader that did not
//     re-join is replaced by the oldest member that did;
//   - protocol vote ties go to the protocol listed earliest by the leader.
package coordinator
