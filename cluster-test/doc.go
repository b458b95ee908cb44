// Package clustertest runs real cohortd processes as a cluster on 127.0.0.1
// and drives Kafka group clients against them.
//
// A Cluster starts N cohortd binaries (built once per test binary) with their
// own data directories and ports, and can kill, stop, restart and add nodes.
// Each process's output goes to a file; the tail of every node's log is
// written to the test log when a test fails, and all of them are copied to
// $COHORT_CLUSTER_LOG_DIR when it is set.
//
// Member emulators speak the Kafka group protocol with franz-go's kmsg
// request types, rediscover the coordinator like a real client, and record
// every JoinGroup, SyncGroup, Heartbeat and OffsetCommit in a History.
// Its checkers assert the safety invariants across failovers: no generation
// answered with two memberships or overlapping assignments (CheckGenerations),
// generation fencing in real time (CheckFencing), and no acknowledged commit
// lost (CheckOffsets).
//
//	go -C cluster-test test .                                     # the tests (also in make test)
//	COHORT_CLUSTER_BENCH=1 go -C cluster-test test . -run TestBench -v -timeout 30m
//	COHORT_CLUSTER_CHAOS=3m go -C cluster-test test . -run TestChaos -v -timeout 30m
//
// BENCHMARKS.md has the benchmark settings and the measured numbers. The
// chaos suite (fault proxies, nemeses, invariant checkers) is in ./chaos and
// its runner in ./cmd/chaos.
//
// cluster-test is a module of its own (it replaces cohort with the folder
// above), so that cohort's go.mod does not require what only these tests
// use (kfake, porcupine, the interop clients). It also holds the member
// library's tests against clusters and kfake (./member) and the Kafka
// listener's benchmarks against kfake (./kafkabench). The commands it starts
// are built in the cohort module, with cohort's go.mod.
package clustertest
