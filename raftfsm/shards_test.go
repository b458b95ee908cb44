package raftfsm

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The shard count is settled once per data dir: a new dir takes the count
// asked for (1 when none is), an existing one keeps its own, and asking it
// for another is refused with ErrShardCount.
func TestShardCountIsFixedPerDataDir(t *testing.T) {
	for _, c := range []struct {
		name       string
		legacy     bool // the dir holds a raft.db and no shard-count file
		recorded   string
		want, got  int
		refused    bool
		afterCount int // ShardCount of the dir afterwards
	}{
		{name: "new dir, no count", want: 0, got: 1, afterCount: 0},
		{name: "new dir, one shard", want: 1, got: 1, afterCount: 0},
		{name: "new dir, 16", want: 16, got: 16, afterCount: 16},
		{name: "legacy dir", legacy: true, want: 0, got: 1, afterCount: 1},
		{name: "legacy dir asked for 16", legacy: true, want: 16, refused: true, afterCount: 1},
		{name: "16-shard dir, no count asked", recorded: "16\n", want: 0, got: 16, afterCount: 16},
		{name: "16-shard dir asked for 8", recorded: "16\n", want: 8, refused: true, afterCount: 16},
		{name: "16-shard dir asked for 1", recorded: "16\n", want: 1, refused: true, afterCount: 16},
		{name: "too many", want: MaxShards + 1, refused: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.legacy {
				if err := os.WriteFile(filepath.Join(dir, "raft.db"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if c.recorded != "" {
				if err := os.WriteFile(filepath.Join(dir, shardsFile), []byte(c.recorded), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := shardCount(dir, c.want)
			if c.refused {
				if !errors.Is(err, ErrShardCount) {
					t.Fatalf("shardCount(%d) = %d, %v; want ErrShardCount", c.want, got, err)
				}
			} else if err != nil || got != c.got {
				t.Fatalf("shardCount(%d) = %d, %v; want %d", c.want, got, err, c.got)
			}
			if after, err := ShardCount(dir); err != nil || after != c.afterCount {
				t.Fatalf("ShardCount afterwards = %d, %v; want %d", after, err, c.afterCount)
			}
		})
	}
}

// A shard-count file that does not hold a count is an error, not a guess.
func TestShardCountFileGarbage(t *testing.T) {
	dir := t.TempDir()
	for _, bad := range []string{"", "x", "1", "-3", "100000"} {
		if err := os.WriteFile(filepath.Join(dir, shardsFile), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if k, err := ShardCount(dir); err == nil {
			t.Errorf("shard-count %q read as %d", bad, k)
		}
	}
}
