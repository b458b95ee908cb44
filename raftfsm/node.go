package raftfsm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
	"github.com/cohort-coord/cohort/raftfsm/raftmux"
	"github.com/cohort-coord/cohort/tlsconfig"
)

// Config configures a Raft node.
type Config struct {
	NodeID string
	// RaftAddr is the address to bind for Raft traffic; port 0 picks a free
	// port the first time and reuses it on every restart of this data dir.
	RaftAddr string
	Dir      string
	// Bootstrap makes this node the first voter of a new cluster (ignored
	// when the data dir already holds Raft state).
	Bootstrap          bool
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// ApplyTimeout bounds the replication of one write.
	ApplyTimeout time.Duration
	// PeerAddrs, when set, are the addresses this node dials for the
	// listed peers (by node id) instead of the ones the cluster
	// configuration names; peers not listed are dialed as configured. The
	// cluster tests route every Raft link through its own fault-injection
	// proxy this way.
	PeerAddrs map[string]string
	// SnapshotInterval, SnapshotThreshold and TrailingLogs override
	// hashicorp/raft's defaults when positive (tests force snapshots and
	// snapshot installs with small values).
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
	// LogFormat is the highest log format this node registers (0:
	// LogFormat, the newest this version applies). 1 keeps the cluster
	// writing plain entries, so that every node can still be rolled back
	// to a version that predates log formats; registering the newest again
	// (a restart without it) lets the format rise.
	LogFormat uint32
	// Shards is how many Raft groups hold the cluster's consumer groups,
	// chosen when the data dir is first used and fixed from then on (0:
	// what the data dir holds, 1 for a new one). With 1 the meta group
	// holds the groups too: the layout of every data dir written before
	// shards existed. See ShardCount.
	Shards int
	// LogCache is how many of the most recent log entries are kept in
	// memory as well as in the log file (0: DefaultLogCache; negative: none).
	// A leader reads every entry back once per follower to send it, and a
	// follower once to apply it; from the cache that is neither a read of
	// the file nor a decode.
	LogCache int
	Logger   *slog.Logger
	// TLS, when set, carries Raft over TLS with client certificates
	// required both ways: a peer is trusted when its certificate chains to
	// the source's CA and names the peer's node id as a DNS name.
	TLS *tlsconfig.Source
}

// DefaultLogCache is Config.LogCache's default: more than the entries in
// flight to followers that keep up (the group-commit store proposes at
// most maxInFlight entries at a time, each a batch of writes), few enough
// that the entries it keeps after they are applied cost little memory. A
// follower further behind reads from the file.
const DefaultLogCache = 64

// peerAddrs is a raft.ServerAddressProvider over Config.PeerAddrs.
type peerAddrs map[string]string

func (p peerAddrs) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	if a, ok := p[string(id)]; ok {
		return raft.ServerAddress(a), nil
	}
	return "", fmt.Errorf("no dial override for %s", id)
}

// DefaultConfig returns the default timings: half of hashicorp/raft's
// (heartbeat and election 500 ms, leader lease 250 ms). A follower notices
// a dead leader after 0.5-1 s instead of 1-2 s; on a loaded two-core
// machine the first group request after a leader SIGKILL was answered
// within 1.42 s at p99 (cluster-test/BENCHMARKS.md), and heartbeats,
// sent every 50 ms, still have ten chances before a follower gives up.
func DefaultConfig() Config {
	return Config{
		NodeID:             "node1",
		RaftAddr:           "127.0.0.1:7946",
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond,
		ApplyTimeout:       5 * time.Second,
	}
}

// Node is a running Raft member: the node's one Replica, which also
// applies the cluster-wide state (topic catalog, node registry, security,
// log format), and the Raft listener it is reached on.
type Node struct {
	*Replica
	Catalog   *catalog.Catalog
	cfg       Config
	addr      raft.ServerAddress
	transport *raft.NetworkTransport
	logs      *raftboltdb.BoltStore // the meta group's
	// shardLog holds the logs of a sharded node's shards; nil with one
	// shard.
	shardLog *sharedLog
	// mux carries every Raft group of a sharded node on the one port; nil
	// with one shard (the meta group hosts the groups, as before shards).
	mux *raftmux.Mux
	// shards are the replicas that hold groups, by shard: the meta
	// replica itself when the cluster has one shard.
	shards []*Replica
	// unregister undoes RegisterMetrics on Close.
	unregister []func()
	logged     []*raftpb.NodeRegister
	// formatMu orders a join's log format check and voter change against
	// raising the format (RaiseLogFormat), on the leader.
	formatMu sync.Mutex
}

// Open starts a Raft node over real files: the meta group's log and stable
// store in raft-boltdb, the shards' in the node's shared log (sharedLog),
// both with fsync on every write, and file snapshots.
func Open(cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LogFormat > LogFormat {
		return nil, fmt.Errorf("log format %d: this version writes formats %d to %d", cfg.LogFormat, LogFormatPlain, LogFormat)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("raft dir: %w", err)
	}
	bind, err := stickyAddr(cfg.Dir, cfg.RaftAddr)
	if err != nil {
		return nil, err
	}
	shards, err := shardCount(cfg.Dir, cfg.Shards)
	if err != nil {
		return nil, err
	}
	hl := newHclog(cfg.Logger, "raft")
	tc := raft.NetworkTransportConfig{MaxPool: 3, Timeout: 10 * time.Second, Logger: hl}
	var peers peerAddrs
	if len(cfg.PeerAddrs) > 0 {
		peers = maps.Clone(peerAddrs(cfg.PeerAddrs))
		tc.ServerAddressProvider = peers
	}
	n := &Node{Catalog: catalog.New(), cfg: cfg}
	var stream *tlsStream
	switch {
	case shards > 1:
		// Every Raft group of the node shares one port: the meta group is
		// shard 0 of the mux, group shard k is k+1.
		mcfg := raftmux.Config{TLS: cfg.TLS, Logger: cfg.Logger}
		names := newPeerNames(cfg.PeerAddrs)
		mcfg.ServerName = names.lookup
		if n.mux, err = raftmux.Listen(bind, mcfg); err != nil {
			return nil, fmt.Errorf("raft listener on %s: %w", bind, err)
		}
		defer func() { names.raft.Store(n.Replica.raftOrNil()) }()
		layer, _ := n.mux.Shard(0)
		mtc := tc
		mtc.Stream = layer
		n.transport = raft.NewNetworkTransportWithConfig(&mtc)
	case cfg.TLS != nil:
		if stream, err = newTLSStream(bind, cfg.TLS, cfg.PeerAddrs, cfg.Logger); err != nil {
			return nil, fmt.Errorf("raft listener on %s: %w", bind, err)
		}
		ttc := tc
		ttc.Stream = stream
		n.transport = raft.NewNetworkTransportWithConfig(&ttc)
	default:
		ttc := tc
		if n.transport, err = raft.NewTCPTransportWithConfig(bind, nil, &ttc); err != nil {
			return nil, fmt.Errorf("raft listener on %s: %w", bind, err)
		}
	}
	n.addr = n.transport.LocalAddr()
	if _, ok := peers[cfg.NodeID]; peers != nil && !ok {
		// The transport asks the provider for this node's own address on
		// every RPC it sends (and logs a warning when it has none).
		peers[cfg.NodeID] = string(n.addr)
	}
	if err := os.WriteFile(filepath.Join(cfg.Dir, "raft-addr"), []byte(n.addr), 0o644); err != nil {
		n.closeTransports()
		return nil, err
	}
	mfsm := NewFSM(n.Catalog, cfg.Logger)
	mfsm.expectShards(shards)
	mlogs, err := openBoltLog(filepath.Join(cfg.Dir, "raft.db"))
	if err != nil {
		n.closeTransports()
		return nil, err
	}
	meta, err := openReplica(cfg, cfg.Dir, n.transport, mfsm, n.addr, hl, mlogs)
	if err != nil {
		n.closeTransports()
		return nil, err
	}
	n.Replica, n.logs = meta, mlogs
	if stream != nil {
		stream.names.raft.Store(meta.raft)
	}
	if shards > 1 {
		if n.shardLog, err = openSharedLog(cfg.Dir); err != nil {
			n.Close()
			return nil, err
		}
		for k := range shards {
			logs, err := n.shardLog.shard(k)
			if err == nil {
				err = moveShardLog(filepath.Join(ShardDir(cfg.Dir, k), "raft.db"), logs, cfg.Logger)
			}
			if err != nil {
				n.Close()
				return nil, fmt.Errorf("shard %d: %w", k, err)
			}
			layer, _ := n.mux.Shard(uint16(k + 1))
			stc := tc
			stc.Stream = layer
			tr := raft.NewNetworkTransportWithConfig(&stc)
			// A shard's FSM applies group writes only; its catalog stays
			// empty (the meta group's is the cluster's).
			rep, err := openReplica(cfg, ShardDir(cfg.Dir, k), tr, NewFSM(catalog.New(), cfg.Logger.With("shard", k)), n.addr, hl.Named(fmt.Sprintf("shard-%02d", k)), logs)
			if err != nil {
				tr.Close()
				n.Close()
				return nil, fmt.Errorf("shard %d: %w", k, err)
			}
			rep.shard = k
			n.shards = append(n.shards, rep)
		}
	} else {
		n.shards = []*Replica{meta}
	}
	if err := n.readLoggedNodes(); err != nil {
		n.Close()
		return nil, fmt.Errorf("read the node registry from the log: %w", err)
	}
	n.Catalog.SetProposer(n.ProposeTopic)
	return n, nil
}

// openReplica opens one Raft group's replica in dir over transport: the
// log and stable store in logs (fsync on every write), file snapshots in
// dir, and the group-commit store. The replica owns transport and logs
// from here on, also when it fails.
func openReplica(cfg Config, dir string, transport *raft.NetworkTransport, fsm *FSM, addr raft.ServerAddress, hl hclog.Logger, logs replicaLog) (_ *Replica, err error) {
	defer func() {
		if err != nil {
			transport.Close()
			if logs != nil {
				logs.Close()
			}
		}
	}()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("raft dir: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hl)
	if err != nil {
		return nil, fmt.Errorf("raft snapshots: %w", err)
	}
	leaderCh := make(chan bool, 16)
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hl
	rc.NotifyCh = leaderCh
	if cfg.HeartbeatTimeout > 0 {
		rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	}
	if cfg.ElectionTimeout > 0 {
		rc.ElectionTimeout = cfg.ElectionTimeout
	}
	if cfg.LeaderLeaseTimeout > 0 {
		rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	}
	if cfg.SnapshotInterval > 0 {
		rc.SnapshotInterval = cfg.SnapshotInterval
	}
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	if cfg.TrailingLogs > 0 {
		rc.TrailingLogs = cfg.TrailingLogs
	}
	if rc.LeaderLeaseTimeout > rc.HeartbeatTimeout {
		rc.LeaderLeaseTimeout = rc.HeartbeatTimeout
	}
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, err
	}
	existing, err := raft.HasExistingState(logs, logs, snaps)
	if err != nil {
		return nil, err
	}
	var logStore raft.LogStore = logs
	if size := cmp.Or(cfg.LogCache, DefaultLogCache); size > 0 {
		if logStore, err = raft.NewLogCache(size, logs); err != nil {
			return nil, err
		}
	}
	r, err := raft.NewRaft(rc, fsm, logStore, logs, snaps, transport)
	if err != nil {
		return nil, err
	}
	timeout := cfg.ApplyTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	rep := &Replica{raft: r, FSM: fsm, id: cfg.NodeID, logStore: logs, leaderCh: leaderCh, timeout: timeout, logs: logs, transport: transport}
	if cfg.Bootstrap && !existing {
		boot := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: addr}}}
		if err := r.BootstrapCluster(boot).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			rep.close()
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
	}
	rep.Store = NewStore(r, fsm, timeout)
	rep.watchPeers()
	return rep, nil
}

// replicaLog is a replica's Raft log and stable store.
type replicaLog interface {
	raft.LogStore
	raft.StableStore
	Close() error
}

// openBoltLog opens (or creates) the raft-boltdb file at path.
func openBoltLog(path string) (*raftboltdb.BoltStore, error) {
	logs, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: boltOptions()})
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, fmt.Errorf("raft log %s is held by another process (is a cohortd already running on this data dir?)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("raft log: %w", err)
	}
	return logs, nil
}

// HasState reports whether dir already holds Raft state.
func HasState(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "raft.db"))
	return err == nil
}

// stickyAddr returns the address to bind: addr, or, when addr asks for port
// 0 and this data dir already chose a port, that port again (the cluster
// configuration names it).
func stickyAddr(dir, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("raft addr %q: %w", addr, err)
	}
	if port != "0" {
		return addr, nil
	}
	if b, err := os.ReadFile(filepath.Join(dir, "raft-addr")); err == nil {
		if h, p, err := net.SplitHostPort(strings.TrimSpace(string(b))); err == nil && h == host {
			return net.JoinHostPort(h, p), nil
		}
	}
	return addr, nil
}

// Addr returns the Raft address of this node.
func (n *Node) Addr() string { return string(n.addr) }

// apply proposes one command on this node (which must lead) and waits until
// it is applied, or ctx ends.
func (n *Node) apply(ctx context.Context, t raftpb.CommandType, payload proto.Message) error {
	data, err := encodeCommand(t, payload)
	if err != nil {
		return err
	}
	return n.Propose(ctx, data)
}

// AgreedLogFormat is the highest log format this node agrees to, and
// registers: Config.LogFormat, or the newest this version applies.
func (n *Node) AgreedLogFormat() uint32 {
	if n.cfg.LogFormat == 0 {
		return LogFormat
	}
	return n.cfg.LogFormat
}

// Register records (or updates) how to reach a node and the log format it
// applies, then raises the cluster's format when every voter now applies a
// higher one. Leader only.
func (n *Node) Register(ctx context.Context, reg *raftpb.NodeRegister) error {
	if err := n.register(ctx, reg); err != nil {
		return err
	}
	n.RaiseLogFormat(ctx)
	return nil
}

func (n *Node) register(ctx context.Context, reg *raftpb.NodeRegister) error {
	if cur, ok := n.FSM.Node(reg.GetNodeId()); ok && proto.Equal(cur, reg) {
		return nil
	}
	return n.apply(ctx, raftpb.CommandType_COMMAND_TYPE_NODE_REGISTER, reg)
}

// RaiseLogFormat raises the cluster's log format to LogFormat once every
// voter of the latest configuration has registered that it applies it, and
// reports whether the format is LogFormat now. Leader only; a failure
// leaves the format as it was (the next registration tries again).
func (n *Node) RaiseLogFormat(ctx context.Context) bool {
	raised := n.RaiseShardLogFormat(ctx, n.Replica)
	if raised {
		n.recordShardMap(ctx)
	}
	return raised
}

// RaiseShardLogFormat is RaiseLogFormat for one replica's log: each shard's
// log has its own format entry, raised by the shard's leader once every
// voter of the shard registered (in the meta group) that it applies it.
func (n *Node) RaiseShardLogFormat(ctx context.Context, r *Replica) bool {
	n.formatMu.Lock()
	defer n.formatMu.Unlock()
	if r.FSM.LogFormat() >= LogFormat {
		return true
	}
	voters := r.Voters()
	if len(voters) == 0 {
		return false
	}
	for _, id := range voters {
		if reg, ok := n.FSM.Node(id); !ok || registeredFormat(reg) < LogFormat {
			return false
		}
	}
	data, err := encodeCommand(raftpb.CommandType_COMMAND_TYPE_LOG_FORMAT, &raftpb.LogFormat{Format: LogFormat})
	if err == nil {
		err = r.Propose(ctx, data)
	}
	if err != nil {
		n.cfg.Logger.Warn("raise the log format", "format", LogFormat, "shard", r.shard, "err", err)
		return false
	}
	n.cfg.Logger.Info("log format raised: every voter applies it", "format", LogFormat, "voters", len(voters), "shard", r.shard)
	return true
}

// Unregister forgets a node. Leader only.
func (n *Node) Unregister(ctx context.Context, id string) error {
	return n.apply(ctx, raftpb.CommandType_COMMAND_TYPE_NODE_REMOVE, &raftpb.NodeRemove{NodeId: id})
}

// Close shuts the node down: every shard's replica, then the meta group's,
// then the shared Raft port.
func (n *Node) Close() error {
	for _, f := range n.unregister {
		f()
	}
	var errs []error
	for _, r := range n.shards {
		if r != n.Replica {
			errs = append(errs, r.close())
		}
	}
	if n.Replica != nil {
		errs = append(errs, n.Replica.close())
	} else {
		n.closeTransports()
	}
	if n.shardLog != nil {
		errs = append(errs, n.shardLog.close())
	}
	if n.mux != nil {
		n.mux.Close()
	}
	return errors.Join(errs...)
}

// closeTransports closes the meta transport and the mux of a node whose
// replicas did not open.
func (n *Node) closeTransports() {
	if n.transport != nil {
		n.transport.Close()
	}
	if n.mux != nil {
		n.mux.Close()
	}
}

var _ io.Closer = (*Node)(nil)
