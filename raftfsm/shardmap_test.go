package raftfsm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
	"github.com/cohort-coord/cohort/shard"
)

func shardMapCmd(t testing.TB, shards uint32, hash string) []byte {
	return mustCommand(t, raftpb.CommandType_COMMAND_TYPE_SHARD_MAP, &raftpb.ShardMap{Shards: shards, Hash: hash})
}

// The shard map is recorded once and never changes: the same map again is
// a no-op, another is refused, an invalid one too, and a snapshot keeps it.
func TestShardMapIsRecordedOnce(t *testing.T) {
	f := NewFSM(catalog.New(), quiet)
	f.expectShards(16)
	if f.ShardMap() != nil {
		t.Fatal("a new FSM has a shard map")
	}
	want := &raftpb.ShardMap{Shards: 16, Hash: shard.Hash}
	if res := applyAt(f, 1, shardMapCmd(t, 16, shard.Hash)); res.Err != nil {
		t.Fatal(res.Err)
	}
	if res := applyAt(f, 2, shardMapCmd(t, 16, shard.Hash)); res.Err != nil {
		t.Fatalf("the same map again: %v", res.Err)
	}
	for i, m := range []*raftpb.ShardMap{{Shards: 8, Hash: shard.Hash}, {Shards: 16, Hash: "fnv"}, {Shards: 0, Hash: shard.Hash}, {Shards: MaxShards + 1, Hash: shard.Hash}, {Shards: 16}} {
		res := applyAt(f, uint64(3+i), shardMapCmd(t, m.GetShards(), m.GetHash()))
		if !errors.Is(res.Err, ErrShardCount) || !errors.Is(res.Err, ErrInvalidRequest) {
			t.Fatalf("map %v: %v, want ErrShardCount", m, res.Err)
		}
	}
	if !proto.Equal(f.ShardMap(), want) || f.HaltErr() != nil {
		t.Fatalf("map %v, halt %v", f.ShardMap(), f.HaltErr())
	}
	g := NewFSM(catalog.New(), quiet)
	g.expectShards(16)
	if err := g.Restore(io.NopCloser(bytes.NewReader(encoded(t, f)))); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(g.ShardMap(), want) || g.Hash() != f.Hash() {
		t.Fatalf("restored map %v, hash %s against %s", g.ShardMap(), g.Hash(), f.Hash())
	}
}

// A node whose data dir holds another shard count than the cluster's map
// (or whose version hashes otherwise) halts, from the log or from a
// snapshot, instead of looking groups up in the wrong shard.
func TestShardMapHaltsANodeOfAnotherLayout(t *testing.T) {
	f := NewFSM(catalog.New(), quiet)
	f.expectShards(4)
	res := applyAt(f, 1, shardMapCmd(t, 16, shard.Hash))
	if !errors.Is(res.Err, ErrShardCount) || !errors.Is(f.HaltErr(), ErrHalted) || !errors.Is(f.HaltErr(), ErrShardCount) {
		t.Fatalf("apply: %v, halt %v", res.Err, f.HaltErr())
	}
	// Halted, it applies nothing more, and restoring does not halt it twice.
	if res := applyAt(f, 2, shardMapCmd(t, 4, shard.Hash)); !errors.Is(res.Err, ErrHalted) {
		t.Fatalf("after the halt: %v", res.Err)
	}

	src := NewFSM(catalog.New(), quiet)
	src.expectShards(16)
	if res := applyAt(src, 1, shardMapCmd(t, 16, shard.Hash)); res.Err != nil {
		t.Fatal(res.Err)
	}
	g := NewFSM(catalog.New(), quiet)
	g.expectShards(1)
	err := g.Restore(io.NopCloser(bytes.NewReader(encoded(t, src))))
	if !errors.Is(err, ErrShardCount) || !errors.Is(g.HaltErr(), ErrHalted) {
		t.Fatalf("restore: %v, halt %v", err, g.HaltErr())
	}
	if err := g.Restore(io.NopCloser(bytes.NewReader(encoded(t, src)))); !errors.Is(err, ErrShardCount) {
		t.Fatalf("restoring again: %v", err)
	}

	h := NewFSM(catalog.New(), quiet)
	h.expectShards(16)
	if res := applyAt(h, 1, shardMapCmd(t, 16, "fnv32a-mod")); !errors.Is(res.Err, ErrShardCount) || h.HaltErr() == nil {
		t.Fatalf("another hash: %v, halt %v", res.Err, h.HaltErr())
	}
}

// A bootstrapped node records its shard map once the log format allows,
// on the registration that raises it; a one-shard node records one shard.
func TestNodeRecordsItsShardMap(t *testing.T) {
	for _, shards := range []int{1, 4} {
		cfg := testConfig(t.TempDir())
		cfg.NodeID, cfg.Bootstrap, cfg.Shards = "node1", true, shards
		n, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "node1 to lead", n.IsLeader)
		if err := n.Register(context.Background(), &raftpb.NodeRegister{NodeId: "node1", RaftAddr: n.Addr(), LogFormat: LogFormat}); err != nil {
			t.Fatal(err)
		}
		want := &raftpb.ShardMap{Shards: uint32(shards), Hash: shard.Hash}
		if got := n.FSM.ShardMap(); !proto.Equal(got, want) {
			t.Fatalf("%d shard(s): map %v, want %v", shards, got, want)
		}
		n.Close()
	}
}
