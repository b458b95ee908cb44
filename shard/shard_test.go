package shard

import (
	"fmt"
	"testing"
)

// One bucket holds every key.
func TestJumpOneBucket(t *testing.T) {
	for _, c := range []struct {
		key     uint64
		buckets int
		want    int
	}{
		{0, 1, 0}, {1, 1, 0}, {0xdeadbeef, 1, 0}, {^uint64(0), 1, 0},
	} {
		if got := jump(c.key, c.buckets); got != c.want {
			t.Errorf("jump(%#x, %d) = %d, want %d", c.key, c.buckets, got, c.want)
		}
	}
}

// TestStable pins the mapping: a change here moves groups to shards that
// do not hold them.
func TestStable(t *testing.T) {
	want := map[string][3]int{ // shard at 4, 16, 64 shards
		"orders":        {3, 14, 35},
		"payments":      {3, 3, 28},
		"group-0":       {2, 8, 36},
		"group-1":       {2, 2, 55},
		"":              {2, 7, 40},
		"kafka-connect": {1, 15, 15},
	}
	for id, w := range want {
		if got := [3]int{Of(id, 4), Of(id, 16), Of(id, 64)}; got != w {
			t.Errorf("%q: shards %v at 4, 16, 64 shards, pinned %v", id, got, w)
		}
	}
}

func TestOneShard(t *testing.T) {
	for _, id := range []string{"", "a", "orders"} {
		if Of(id, 1) != 0 || Of(id, 0) != 0 || OfBytes([]byte(id), 1) != 0 {
			t.Fatalf("one shard: %q not in shard 0", id)
		}
	}
}

func TestBytesAgree(t *testing.T) {
	for i := range 1000 {
		id := fmt.Sprintf("group-%d", i)
		if Of(id, 16) != OfBytes([]byte(id), 16) {
			t.Fatalf("%s: Of and OfBytes disagree", id)
		}
	}
}

// TestSpread: 16,000 groups over 16 shards, each shard within 10% of the
// mean; going to 17 shards moves about 1/17 of them, and only into the new
// shard.
func TestSpread(t *testing.T) {
	const groups, shards = 16000, 16
	counts := make([]int, shards)
	moved := 0
	for i := range groups {
		id := fmt.Sprintf("consumer-group-%d", i)
		s := Of(id, shards)
		counts[s]++
		if s2 := Of(id, shards+1); s2 != s {
			if s2 != shards {
				t.Fatalf("%s moved from %d to %d, not to the new shard", id, s, s2)
			}
			moved++
		}
	}
	for s, c := range counts {
		if c < groups/shards*9/10 || c > groups/shards*11/10 {
			t.Errorf("shard %d holds %d groups, mean %d", s, c, groups/shards)
		}
	}
	if lo, hi := groups/(shards+1)*8/10, groups/(shards+1)*12/10; moved < lo || moved > hi {
		t.Errorf("%d groups moved going to %d shards, want about %d", moved, shards+1, groups/(shards+1))
	}
}
