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
