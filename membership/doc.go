// Package membership is the pure state machine of one consumer-group member (the
// client side of Kafka's classic group protocol): the join/sync loop, the
// leader's assignment, heartbeats, commits, eager and cooperative revocation,
// explicit rejoin (KIP-568) and static membership (KIP-345).
//
// A Machine is driven by calls of the form (event, now) and answers through an
// Effects value: requests to send, callbacks to run (assigned, revoked, lost),
// timers to arm or cancel, commit results, and whether the member stopped. It
// has no goroutines, does no I/O and never reads the wall clock; its owner
// (the member actor) executes the effects and feeds responses, timer fires and
// callback completions back in. Requests are the native group API messages
// (grouppb) plus FindCoordinator and Metadata; a transport translates them.
//
// Which rebalance protocol a generation follows. Against a coordinator that
// enforces exclusive ownership (it answers a SyncGroup only once the
// partitions it hands out have been released), the member follows the
// protocol of the assignor the group selected: cooperative when that assignor
// supports it. On a downgrade (the member kept partitions through its
// JoinGroup and the group selected an eager assignor) it revokes everything
// before it sends SyncGroup. Against any other coordinator it uses the Java
// consumer's rule: cooperative only when every configured assignor supports
// it, which is safe without help from the coordinator.
//
// Ordering. A revoke or lost callback must return before the member moves on:
// an eager member sends its JoinGroup, a cooperative member its follow-up
// JoinGroup, a downgrading member its SyncGroup only once the callback is
// done. Assigned callbacks do not block the protocol; the owner runs all
// callbacks in the order they were emitted.
//
// Session safety. The member counts its session from the last answer the
// coordinator gave it; when a session timeout passes without one (and no join
// or sync is waiting for its answer), the coordinator may have given its
// partitions to others, so they are reported lost and the member joins again.
package membership
