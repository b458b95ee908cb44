// Package shard maps a consumer group to the shard (Raft group) that holds
// it.
//
// The mapping is xxhash64 of the exact bytes of the group id, then Lamping
// and Veach's jump consistent hash over the cluster's shard count (Redpanda
// maps groups to its group partitions the same way). It is fixed: a
// cluster chooses its shard count when it is bootstrapped and never
// changes it, and this function must return the same shard for the same
// id and count in every version (TestStable pins it), or groups would be
// looked up where they are not.
//
// Place decides which nodes hold each shard's replicas (planned: the
// cluster does not use it yet, and runs every shard on every voter). It
// is a pure function of the shard count, the replication factor, the
// nodes with their racks and the current placement, and keeps, in order:
//
//   - R = min(replication factor, N) replicas a shard, on distinct nodes;
//   - evenness, always: every node holds ⌊S·R/N⌋ or ⌈S·R/N⌉ replicas;
//   - rack diversity wherever evenness allows: no placement that is even
//     has fewer pairs of one shard's replicas in one rack. A rack whose
//     nodes hold L replicas then holds ⌊L/S⌋ or ⌈L/S⌉ of every shard, so
//     when no rack's share exceeds S (no rack holds more than about N/R
//     of the nodes) and there are at least R racks, no two replicas of a
//     shard share a rack. A rack with more nodes than that gets some
//     shards twice: evenness wins, unlike Kafka's rack-aware placement,
//     because a node's share of replicas is its share of the commit
//     work, which is what placement is for;
//   - stickiness: a change copies as few replicas as any placement that
//     keeps the rules above can, and among those keeps the most current
//     preferred leaders. Place finds it as a min-cost flow over shards,
//     racks and nodes (plan.go); in racks too large for an edge per shard
//     and node, the new replicas share a pool per rack, and placing them
//     can cost a few more copies than the least;
//   - a preferred leader (the first replica) on no node for more than
//     ⌈S/N⌉ shards, the current one kept while it can be.
//
// A node without a rack is a rack of its own. New replicas go first to
// the highest rendezvous hash of (shard, node id); the nodes' order in
// the input does not matter. Moves lists the replica changes between two
// placements.
package shard

import "github.com/cespare/xxhash/v2"

// Hash names the hash Of computes. A cluster records it in its shard map
// with its shard count; a version that hashed otherwise would name another.
const Hash = "xxhash64+jump"

// Of returns the shard, in [0, count), of a group id. A count below 2 has
// one shard, 0.
func Of(groupID string, count int) int {
	if count < 2 {
		return 0
	}
	return jump(xxhash.Sum64String(groupID), count)
}

// OfBytes is Of for a group id still in a request's bytes.
func OfBytes(groupID []byte, count int) int {
	if count < 2 {
		return 0
	}
	return jump(xxhash.Sum64(groupID), count)
}

// jump is the jump consistent hash ("A Fast, Minimal Memory, Consistent
// Hash Algorithm", Lamping and Veach, 2014): going from n to n+1 buckets
// moves only 1/(n+1) of the keys.
func jump(key uint64, buckets int) int {
	var b, j int64 = -1, 0
	for j < int64(buckets) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}
