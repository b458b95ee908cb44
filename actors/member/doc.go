// Package member is cohort's group member library: an application embeds
// members to own the partitions (shards of work) of a consumer group.
//
//	m, err := member.Start(system, "orders",
//		member.Topics("orders"), member.Partitions("orders", 12),
//		member.OnAssigned(start), member.OnRevoked(finish), member.OnLost(abandon))
//	...
//	m.Mark("orders", 3, 42)
//	err = m.Commit(ctx, nil)
//	err = m.EnforceRebalance("scaling up")
//	err = m.Close(ctx)
//
// Each member is one protoactor actor that shells the pure protocol machine
// of package github.com/cohort-coord/cohort/membership: it calls the machine
// with the clock's time and carries out what the machine returns. Requests go
// through a Transport and their answers come back as messages; timers
// (heartbeat, session, retry backoff) are time.AfterFunc timers that send a
// message carrying their arming, so stale fires are dropped; callbacks run
// one at a time on a goroutine of their own, and their completion comes back
// as a message, so the member does not move on past a revoke before the
// application has finished with the partitions. An idle member owns no
// goroutine.
//
// Transports: Native (protoactor remote to cohortd; the default, with
// Bootstrap addresses) and Kafka (franz-go kmsg requests over TCP, to
// cohortd's Kafka listener or any Kafka broker). Both find the coordinator
// (the Raft leader's native address from the cluster status; FindCoordinator
// over the Kafka protocol) and find it again, with backoff, after
// NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a connection error; a member
// that keeps heartbeating across a leader failover keeps its generation and
// partitions.
//
// Group protocols: the classic one by default, or the consumer protocol of
// KIP-848 with ConsumerProtocol() (Kafka's group.protocol=consumer), where
// the coordinator assigns (ServerAssignor("uniform" | "range")) and the
// member heartbeats with ConsumerGroupHeartbeat: natively as the grouppb
// message, over Kafka as API 68 v1 with topic ids from Metadata. The
// callbacks and their guarantees are the same: a revoked partition is
// reported gone only after Revoked returned, and the member rejoins only
// after Lost returned. A coordinator that does not serve it answers the first
// heartbeat UNSUPPORTED_VERSION (the Kafka transport answers so itself when
// ApiVersions lacks API 68 v1) and the member speaks the classic protocol
// (GroupProtocol reports which). EnforceRebalance returns ErrUnsupported
// under the consumer protocol.
//
// Under the classic protocol, which rebalance protocol a member follows
// depends on whether the coordinator enforces exclusive ownership: the Kafka
// transport reads the cohort.exclusive-ownership feature from ApiVersions,
// the native transport asks the coordinator (CoordinatorFeaturesRequest).
// With it the member follows the protocol of the assignor the group selected
// (and revokes everything before SyncGroup on a downgrade); without it, the
// Java consumer's rule (cooperative only when every configured assignor
// supports it).
package member
