package raftfsm

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
	"github.com/cohort-coord/cohort/shard"
)

// The shard map: the cluster's shard count and the hash from group id to
// shard, recorded once in the meta group (from log format 4 on) by the
// leader that raised the format. It never changes: a second map that
// differs is refused. Every node checks it against its own data dir's
// shard count and this version's hash, and a node that disagrees halts
// (and stops) rather than look groups up where they are not.

// ShardMap returns the cluster's shard map; nil until it is recorded.
func (f *FSM) ShardMap() *raftpb.ShardMap {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.shardMap
}

// expectShards tells the FSM the shard count of this node's data dir.
func (f *FSM) expectShards(k int) { f.localShards.Store(int32(k)) }

func (f *FSM) applyShardMap(payload []byte) *ApplyResult {
	var m raftpb.ShardMap
	if err := proto.Unmarshal(payload, &m); err != nil {
		return &ApplyResult{Err: fmt.Errorf("%w: %v", ErrBadCommand, err)}
	}
	if m.GetShards() < 1 || m.GetShards() > MaxShards || m.GetHash() == "" {
		return &ApplyResult{Err: fmt.Errorf("%w: %w: shard map of %d shard(s) by %q", ErrInvalidRequest, ErrShardCount, m.GetShards(), m.GetHash())}
	}
	f.mu.Lock()
	cur := f.shardMap
	if cur == nil {
		f.shardMap = &m
	}
	f.mu.Unlock()
	if cur != nil {
		if proto.Equal(cur, &m) {
			return &ApplyResult{}
		}
		return &ApplyResult{Err: fmt.Errorf("%w: %w: the cluster's shard map is %d shard(s) by %s and cannot change to %d by %s",
			ErrInvalidRequest, ErrShardCount, cur.GetShards(), cur.GetHash(), m.GetShards(), m.GetHash())}
	}
	if err := f.checkShardMap(&m); err != nil {
		return &ApplyResult{Err: err}
	}
	return &ApplyResult{}
}

// checkShardMap halts the FSM when m is not this node's layout.
func (f *FSM) checkShardMap(m *raftpb.ShardMap) error {
	local := max(int(f.localShards.Load()), 1)
	if m.GetHash() == shard.Hash && int(m.GetShards()) == local {
		return nil
	}
	err := fmt.Errorf("%w: the cluster's shard map is %d shard(s) by %s; this node's data dir holds %d shard(s) and this version hashes by %s",
		ErrShardCount, m.GetShards(), m.GetHash(), local, shard.Hash)
	f.log.Error("halting: this node does not match the cluster's shard map", "err", err)
	return f.haltWith(err)
}

// LogFormatShardMap is the log format from which the shard map is recorded.
const LogFormatShardMap = LogFormatConsumer

// recordShardMap writes the shard map once the cluster's format allows it
// and it is not recorded yet. Leader only.
func (n *Node) recordShardMap(ctx context.Context) {
	if n.FSM.ShardMap() != nil || n.FSM.LogFormat() < LogFormatShardMap {
		return
	}
	m := &raftpb.ShardMap{Shards: uint32(max(n.ShardCount(), 1)), Hash: shard.Hash}
	if err := n.apply(ctx, raftpb.CommandType_COMMAND_TYPE_SHARD_MAP, m); err != nil {
		n.cfg.Logger.Warn("record the shard map", "shards", m.GetShards(), "err", err)
		return
	}
	n.cfg.Logger.Info("shard map recorded", "shards", m.GetShards(), "hash", m.GetHash())
}
