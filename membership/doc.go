// Package membership is the pure state machine of one consumer-group member:
// Machine speaks Kafka's classic group protocol (the join/sync loop, the
// leader's assignment, heartbeats, commits, eager and cooperative revocation,
// explicit rejoin (KIP-568) and static membership (KIP-345)); Consumer speaks
// the consumer protocol of KIP-848 (see below). Both are StateMachines.
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
//
// The consumer protocol (Consumer, ConsumerGroupHeartbeat v1). The member
// generates its id (NewConsumer's argument) and keeps it: it joins at epoch 0
// with a full request (subscription, rebalance timeout, ServerAssignor, an
// empty owned list), then heartbeats at the interval each answer gives, with
// keepalives (null fields: unchanged) unless what it owns changed or an error
// came, after which it sends a full request. It adopts the epoch of every
// successful answer. An answer's assignment is the member's whole target:
// partitions missing from it are revoked, and the member reports them gone
// (which lets the coordinator hand them out) only once the Revoked callback
// returned; partitions new in it are given at once, since the coordinator
// assigns only partitions nobody holds, and acknowledged at once. Rules:
//
//   - FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID (and STALE_MEMBER_EPOCH or
//     GROUP_ID_NOT_FOUND in the group): everything is lost; once Lost
//     returned the member rejoins at epoch 0 with the same id.
//   - NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a transport error: find the
//     coordinator, go on with a full request; COORDINATOR_LOAD_IN_PROGRESS
//     and unknown codes: back off, the same.
//   - INVALID_REQUEST, GROUP_MAX_SIZE_REACHED, UNSUPPORTED_ASSIGNOR,
//     INVALID_REGULAR_EXPRESSION, UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID,
//     GROUP_AUTHORIZATION_FAILED: the member stops with the error.
//   - UNSUPPORTED_VERSION before any heartbeat succeeded: the coordinator
//     does not serve the protocol; the Consumer hands itself to a classic
//     Machine (same configuration and marks) and GroupProtocol says so.
//   - Session safety: the coordinator keeps the session timeout; the member
//     counts Config.SessionTimeout from the send of the last answered
//     heartbeat (the coordinator's count starts later), and past it reports
//     its partitions lost and rejoins. A revoke that outlasts the rebalance
//     timeout (less an interval) ends the same way once it returned.
//   - Commits carry the member epoch as generation. STALE_MEMBER_EPOCH parks
//     a commit until the next heartbeat answer (one is sent at once), then
//     it goes again at the new epoch without partitions the member no
//     longer owns, at most 10 times (franz-go's rule).
//   - Close revokes, commits the marks, and leaves with epoch -1, or -2 and
//     the instance id for a static member; a leave waits for the heartbeat
//     in flight. EnforceRebalance returns ErrUnsupported: Kafka has no
//     client-triggered rebalance in this protocol.
package membership
