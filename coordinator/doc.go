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
// member stops being new. When a timer fires the machine decides from the
// member's current state alone (pending, new, parked in join or sync, or
// neither). Because there is never more than one timer per member and no
// deadline arithmetic, KAFKA-9232 (the new-member timer outliving join
// completion) and KAFKA-9752 (a member left with no session timer after join
// completion) cannot happen. The group has two more timers: the join timer
// (rebalance timeout or initial delay) and the pending-sync timer, and a
// periodic offset-expiry timer.
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
// Deterministic choices where Kafka leaves order to a hash map:
//   - members are kept in join order; when the leader leaves, the oldest
//     remaining member becomes leader; at join completion a leader that did not
//     re-join is replaced by the oldest member that did;
//   - protocol vote ties go to the protocol listed earliest by the leader.
package coordinator
