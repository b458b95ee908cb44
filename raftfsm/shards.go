package raftfsm

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// MaxShards bounds the shard count: hashicorp/raft sends each group's
// heartbeats on their own, so every shard costs each node a steady trickle
// of CPU and RPCs even when idle (docs/operations.md, sizing).
const MaxShards = 256

// ErrShardCount is returned when the shard count asked for is not the one
// the data dir was created with.
var ErrShardCount = errors.New("shard count")

// shardsFile records a sharded data dir's shard count, next to the meta
// group's log.
const shardsFile = "shard-count"

// ShardDir is where shard k of a sharded node keeps its log and snapshots.
func ShardDir(dir string, k int) string {
	return filepath.Join(dir, "shards", fmt.Sprintf("%02d", k))
}

// ShardCount returns the shard count a data dir was created with: 1 for a
// dir written before shards existed (its meta group holds the groups), 0
// for a dir with no Raft state yet.
func ShardCount(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, shardsFile))
	if errors.Is(err, os.ErrNotExist) {
		if HasState(dir) {
			return 1, nil
		}
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	k, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || k < 2 || k > MaxShards {
		return 0, fmt.Errorf("%s holds no valid shard count: %q", filepath.Join(dir, shardsFile), b)
	}
	return k, nil
}

// shardCount settles the shard count of the data dir in dir: the one it
// was created with, or want for a new one. Asking an existing dir for
// another count is refused: a group's shard is a hash over the count, so a
// new count would look groups up where they are not.
func shardCount(dir string, want int) (int, error) {
	if want < 0 || want > MaxShards {
		return 0, fmt.Errorf("%w: %d shards: between 1 and %d", ErrShardCount, want, MaxShards)
	}
	have, err := ShardCount(dir)
	if err != nil {
		return 0, err
	}
	switch {
	case have == 0 && want <= 1:
		return 1, nil
	case have == 0:
		if err := os.WriteFile(filepath.Join(dir, shardsFile), []byte(strconv.Itoa(want)+"\n"), 0o644); err != nil {
			return 0, err
		}
		return want, nil
	case want == 0 || want == have:
		return have, nil
	default:
		return 0, fmt.Errorf("%w: this data dir (%s) holds a cluster of %d shard(s); its shard count was fixed when it was created and cannot change to %d: start it without --shards, or with --shards %d", ErrShardCount, dir, have, want, have)
	}
}

// Shards returns the replicas that hold the cluster's groups, by shard.
// With one shard it is the meta replica.
func (n *Node) Shards() []*Replica { return n.shards }

// ShardCount returns how many shards hold the cluster's groups.
func (n *Node) ShardCount() int { return len(n.shards) }

// peerNames tells the mux which node id a peer's certificate must name
// when it dials an address: the PeerAddrs entry it came from, or the
// member of the meta group's configuration at that address.
type peerNames struct {
	byAddr map[raft.ServerAddress]string
	raft   atomic.Pointer[raft.Raft]
}

func newPeerNames(peers map[string]string) *peerNames {
	p := &peerNames{byAddr: map[raft.ServerAddress]string{}}
	for id, a := range peers {
		p.byAddr[raft.ServerAddress(a)] = id
	}
	return p
}

func (p *peerNames) lookup(address raft.ServerAddress) string {
	if id, ok := p.byAddr[address]; ok {
		return id
	}
	if r := p.raft.Load(); r != nil {
		if f := r.GetConfiguration(); f.Error() == nil {
			for _, srv := range f.Configuration().Servers {
				if srv.Address == address {
					return string(srv.ID)
				}
			}
		}
	}
	host, _, err := net.SplitHostPort(string(address))
	if err != nil {
		return string(address)
	}
	return host
}

// ReconcileVoters makes this replica's voters those of the meta group
// (every shard on every voter): voters the meta group has and the shard
// lacks are added, voters the meta group dropped are removed. It returns
// the changes made. Leader of the shard only; a no-op with one shard.
func (n *Node) ReconcileVoters(r *Replica) (added, removed []string, err error) {
	if r == n.Replica || !r.IsLeader() {
		return nil, nil, nil
	}
	want, err := n.Servers()
	if err != nil {
		return nil, nil, err
	}
	have, err := r.Servers()
	if err != nil {
		return nil, nil, err
	}
	for _, s := range want {
		if s.Voter && !slices.Contains(have, s) {
			if err := raftError(r.raft.AddVoter(raft.ServerID(s.ID), raft.ServerAddress(s.Addr), 0, membershipTimeout).Error()); err != nil {
				return added, removed, err
			}
			added = append(added, s.ID)
		}
	}
	for _, s := range have {
		if s.ID == r.ID() || slices.ContainsFunc(want, func(w Server) bool { return w.ID == s.ID && w.Voter }) {
			continue
		}
		if err := raftError(r.raft.RemoveServer(raft.ServerID(s.ID), 0, membershipTimeout).Error()); err != nil {
			return added, removed, err
		}
		removed = append(removed, s.ID)
	}
	return added, removed, nil
}
