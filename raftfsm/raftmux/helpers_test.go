package raftmux

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// recFSM records the entries applied to it, in order.
type recFSM struct {
	mu      sync.Mutex
	entries []string
}

func (f *recFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, string(l.Data))
	return len(f.entries)
}

func (f *recFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &recSnap{entries: slices.Clone(f.entries)}, nil
}

func (f *recFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = splitNul(string(b))
	return nil
}

func (f *recFSM) get() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.entries)
}

type recSnap struct{ entries []string }

func (s *recSnap) Persist(sink raft.SnapshotSink) error {
	for _, e := range s.entries {
		if _, err := sink.Write(append([]byte(e), 0)); err != nil {
			sink.Cancel()
			return err
		}
	}
	return sink.Close()
}

func (s *recSnap) Release() {}

func splitNul(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != 0 {
			i++
		}
		out = append(out, s[:i])
		if i == len(s) {
			break
		}
		s = s[i+1:]
	}
	return out
}

// shardNode is one shard's Raft instance on one node.
type shardNode struct {
	raft      *raft.Raft
	fsm       *recFSM
	transport *raft.NetworkTransport
	logs      *raftboltdb.BoltStore
}

// testNode is one node: a mux and its shards.
type testNode struct {
	id     string
	mux    *Mux
	shards []*shardNode
	down   bool
}

// raftConfig is raftfsm.DefaultConfig's timing (heartbeat and election
// 500 ms, leader lease 250 ms) on hashicorp/raft's defaults.
func raftConfig(id string) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(id)
	rc.HeartbeatTimeout = 500 * time.Millisecond
	rc.ElectionTimeout = 500 * time.Millisecond
	rc.LeaderLeaseTimeout = 250 * time.Millisecond
	rc.Logger = hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
	return rc
}

// startCluster starts nodes nodes with shards Raft groups each, all over
// their node's mux, every group bootstrapped with every node as a voter.
func startCluster(tb testing.TB, nodes, shards int, cfg Config) []*testNode {
	tb.Helper()
	dir := tb.TempDir()
	ns := make([]*testNode, nodes)
	var servers []raft.Server
	for i := range ns {
		m, err := Listen("127.0.0.1:0", cfg)
		if err != nil {
			tb.Fatal(err)
		}
		ns[i] = &testNode{id: fmt.Sprintf("n%d", i+1), mux: m}
		servers = append(servers, raft.Server{ID: raft.ServerID(ns[i].id), Address: raft.ServerAddress(m.Addr().String())})
	}
	for _, n := range ns {
		for s := range shards {
			sn, err := openShard(filepath.Join(dir, n.id, fmt.Sprintf("shard-%02d", s)), n, uint16(s), servers)
			if err != nil {
				tb.Fatal(err)
			}
			n.shards = append(n.shards, sn)
		}
	}
	tb.Cleanup(func() {
		for _, n := range ns {
			n.stop()
		}
	})
	return ns
}

func openShard(dir string, n *testNode, shard uint16, servers []raft.Server) (*shardNode, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	layer, err := n.mux.Shard(shard)
	if err != nil {
		return nil, err
	}
	hl := hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: layer, MaxPool: 3, Timeout: 10 * time.Second, Logger: hl})
	logs, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		tr.Close()
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hl)
	if err != nil {
		tr.Close()
		logs.Close()
		return nil, err
	}
	fsm := &recFSM{}
	rc := raftConfig(n.id)
	if err := raft.BootstrapCluster(rc, logs, logs, snaps, tr, raft.Configuration{Servers: servers}); err != nil {
		tr.Close()
		logs.Close()
		return nil, err
	}
	r, err := raft.NewRaft(rc, fsm, logs, logs, snaps, tr)
	if err != nil {
		tr.Close()
		logs.Close()
		return nil, err
	}
	return &shardNode{raft: r, fsm: fsm, transport: tr, logs: logs}, nil
}

// stop shuts the node's shards down, then its mux.
func (n *testNode) stop() {
	if n.down {
		return
	}
	n.down = true
	var wg sync.WaitGroup
	for _, s := range n.shards {
		wg.Go(func() {
			s.raft.Shutdown().Error()
			s.transport.Close()
			s.logs.Close()
		})
	}
	wg.Wait()
	n.mux.Close()
}

// waitLeaders waits until every shard has a leader among the live nodes
// that the live nodes agree on, and returns each shard's leader node.
func waitLeaders(tb testing.TB, ns []*testNode, timeout time.Duration) []*testNode {
	tb.Helper()
	shards := len(ns[0].shards)
	leaders := make([]*testNode, shards)
	deadline := time.Now().Add(timeout)
	for s := range shards {
		for {
			leaders[s] = nil
			for _, n := range ns {
				if !n.down && n.shards[s].raft.State() == raft.Leader {
					leaders[s] = n
				}
			}
			if leaders[s] != nil {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("shard %d: no leader within %v", s, timeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return leaders
}
