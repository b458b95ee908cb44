package raftmux

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
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
	mux    *Mux // nil with a port per shard
	shards []*shardNode
	down   bool
	frames atomic.Uint64 // RPCs sent, with a port per shard
	dir    string        // the shards' directories are dir/shard-NN
}

// sent is the count of RPCs the node has sent.
func (n *testNode) sent() uint64 {
	if n.mux != nil {
		return n.mux.Stats().Frames
	}
	return n.frames.Load()
}

// raftConfig is patient Raft timing (heartbeat, election and leader lease
// 2 s) on hashicorp/raft's defaults: the test is about the mux, and a
// loaded machine turns shorter timings into lost leaderships.
func raftConfig(id string) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(id)
	rc.HeartbeatTimeout = 2 * time.Second
	rc.ElectionTimeout = 2 * time.Second
	rc.LeaderLeaseTimeout = 2 * time.Second
	rc.Logger = hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
	return rc
}

// startCluster starts nodes nodes with shards Raft groups each, all over
// their node's mux, every group bootstrapped with every node as a voter.
func startCluster(tb testing.TB, nodes, shards int, cfg Config) []*testNode {
	return startClusterOn(tb, nodes, shards, cfg, false)
}

// startClusterOn is startCluster, with a port per Raft group instead of
// the mux when ports is set (today's layout: cfg is then unused).
func startClusterOn(tb testing.TB, nodes, shards int, cfg Config, ports bool) []*testNode {
	tb.Helper()
	dir := tb.TempDir()
	ns := make([]*testNode, nodes)
	layers := make([][]raft.StreamLayer, nodes)
	tb.Cleanup(func() {
		for i, n := range ns {
			if n == nil {
				continue
			}
			n.stop()
			for _, l := range layers[i][len(n.shards):] {
				l.Close() // never handed to a transport
			}
		}
	})
	for i := range ns {
		ns[i] = &testNode{id: fmt.Sprintf("n%d", i+1)}
		ns[i].dir = filepath.Join(dir, ns[i].id)
		if !ports {
			m, err := Listen("127.0.0.1:0", cfg)
			if err != nil {
				tb.Fatal(err)
			}
			ns[i].mux = m
		}
		for s := range shards {
			var l raft.StreamLayer
			if ports {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					tb.Fatal(err)
				}
				l = &portLayer{Listener: ln, frames: &ns[i].frames}
			} else {
				ml, err := ns[i].mux.Shard(uint16(s))
				if err != nil {
					tb.Fatal(err)
				}
				l = ml
			}
			layers[i] = append(layers[i], l)
		}
	}
	for s := range shards {
		var servers []raft.Server
		for i, n := range ns {
			servers = append(servers, raft.Server{ID: raft.ServerID(n.id), Address: raft.ServerAddress(layers[i][s].Addr().String())})
		}
		for i, n := range ns {
			sn, err := openShard(n.shardDir(s), n.id, layers[i][s], servers)
			if err != nil {
				tb.Fatal(err)
			}
			n.shards = append(n.shards, sn)
		}
	}
	return ns
}

// portLayer is today's layout, the peer TestIdleCost measures the mux
// against: a listener per Raft group (as raft.NewTCPTransport makes), with
// the writes of its dialed connections counted as the mux counts them.
type portLayer struct {
	net.Listener
	frames *atomic.Uint64
}

func (l *portLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(address), timeout)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, frames: l.frames}, nil
}

// openShard opens one shard's Raft instance on layer, with its own FSM,
// raft-boltdb store and snapshots in dir. The transport owns layer.
func openShard(dir, id string, layer raft.StreamLayer, servers []raft.Server) (*shardNode, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
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
	rc := raftConfig(id)
	if servers == nil { // a restart: the store holds the configuration
	} else if err := raft.BootstrapCluster(rc, logs, logs, snaps, tr, raft.Configuration{Servers: servers}); err != nil {
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

func (n *testNode) shardDir(s int) string { return filepath.Join(n.dir, fmt.Sprintf("shard-%02d", s)) }

// restart opens a stopped node again on its mux's address, every shard
// from its own store, with a fresh FSM that the log (or a snapshot)
// refills.
func (n *testNode) restart(tb testing.TB, cfg Config) {
	tb.Helper()
	m, err := Listen(n.mux.Addr().String(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	// Every shard is registered before the first Raft instance starts, so
	// that no peer reaches a shard the mux does not know yet.
	layers := make([]*Layer, len(n.shards))
	for s := range layers {
		if layers[s], err = m.Shard(uint16(s)); err != nil {
			tb.Fatal(err)
		}
	}
	n.mux, n.shards, n.down = m, nil, false
	for s, l := range layers {
		sn, err := openShard(n.shardDir(s), n.id, l, nil)
		if err != nil {
			tb.Fatal(err)
		}
		n.shards = append(n.shards, sn)
	}
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
	if n.mux != nil {
		n.mux.Close()
	}
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
