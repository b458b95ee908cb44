// Package clustertest runs real cohortd processes as a cluster on 127.0.0.1
// and drives Kafka group clients against them.
//
// A Cluster starts N cohortd binaries (built once per test binary) with their
// own data directories and ports, and can kill, stop, restart and add nodes.
// Member emulators speak the Kafka group protocol with franz-go's kmsg
// request types, rediscover the coordinator like a real client, and record
// every JoinGroup, SyncGroup and OffsetCommit answer in a History whose
// checkers assert the safety invariants of the group protocol across
// failovers.
package clustertest
