// Package node is the composition root of a cohort coordinator: it builds
// the actor system, the group service and the listeners, and owns the order
// in which they start and stop.
package node

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/cohort-coord/cohort/actors"
	"github.com/cohort-coord/cohort/admin"
	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/coordinator"
	"github.com/cohort-coord/cohort/kafka"
	"github.com/cohort-coord/cohort/ops"
	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
	"github.com/cohort-coord/cohort/raftfsm"
	"github.com/cohort-coord/cohort/tlsconfig"
)

// Config is a node's configuration.
type Config struct {
	// DataDir holds the node's durable state; it is created if missing and
	// locked while the node runs.
	DataDir string
	// RemoteAddr is where the native group API is served (protoactor remote
	// over gRPC). Port 0 picks a free port. Empty disables it: no native
	// clients, no cluster administration, no joining (an embedded or test
	// node; protoactor's remote can run only once per process).
	RemoteAddr string
	// Kafka configures the Kafka protocol listener.
	Kafka kafka.Config
	Group coordinator.Config
	// Consumer configures consumer groups (KIP-848); zero means Kafka's
	// defaults.
	Consumer coordinator.ConsumerConfig
	// Raft configures replication; Raft.Dir defaults to DataDir/raft.
	Raft raftfsm.Config
	// Bootstrap makes this node the first voter of a new cluster. A node with
	// neither Bootstrap nor Join and no Raft state bootstraps itself too: a
	// single-node cluster.
	Bootstrap bool
	// Join is the native API address of any cluster member; the node asks it
	// to be added as a voter (again on every start, which is harmless).
	Join   string
	Logger *slog.Logger
	// HTTPAddr is where the operator HTTP listener serves /metrics,
	// /healthz, /readyz and the status page; empty disables it.
	HTTPAddr string
	// Metrics is the registry the node's metrics go to; nil: a registry of
	// its own, with the Go runtime and process collectors.
	Metrics *prometheus.Registry
	// MetricsOff leaves out metrics and group views (benchmarks that
	// measure what they cost).
	MetricsOff bool
	// Security configures the Kafka listeners per security protocol, SASL
	// and ACLs (security.go). Its zero value is one PLAINTEXT listener on
	// Kafka.Addr with authorization off.
	Security SecurityConfig
	// TLS configures TLS on the node's links; off by default.
	TLS TLSConfig
	// ShardMoveInterval is how long a shard stays with a leader before
	// leader placement may move it again (0: DefaultShardMoveInterval).
	// The shard count itself is Raft.Shards.
	ShardMoveInterval time.Duration
}

// TLSConfig chooses the links that speak TLS and the files they use. The
// files are re-read on SIGHUP and when they change; new handshakes use
// what was read last.
type TLSConfig struct {
	tlsconfig.Files
	// Kafka, Native and Raft turn TLS on for the Kafka listener, the
	// native API (protoactor remote over gRPC: server and client side, so
	// its clients need certificates too) and Raft. The native API and Raft
	// require a client certificate from the CA; a Raft peer's certificate
	// must also name its node id as a DNS name.
	Kafka, Native, Raft bool
	// KafkaClientAuth is whether Kafka clients must present a certificate
	// (Kafka's ssl.client.auth).
	KafkaClientAuth tlsconfig.ClientAuth
	// ReloadInterval is how often the files are checked for changes (0:
	// every second).
	ReloadInterval time.Duration
}

// On reports whether any link uses TLS.
func (c TLSConfig) On() bool { return c.Kafka || c.Native || c.Raft }

func (c TLSConfig) validate() error {
	if err := c.Files.Validate(); err != nil {
		return err
	}
	switch {
	case c.On() && !c.Enabled():
		return errors.New("tls: a TLS link needs a certificate and key file")
	case !c.On() && c.Enabled():
		return errors.New("tls: certificate files given but no link uses TLS")
	case (c.Native || c.Raft || c.KafkaClientAuth != tlsconfig.ClientAuthNone) && c.CAFile == "":
		return errors.New("tls: client certificates (native API, Raft, Kafka client auth) need a CA file")
	}
	return nil
}

// DefaultConfig returns the embedded defaults.
func DefaultConfig() Config {
	return Config{
		DataDir:    "cohort-data",
		RemoteAddr: "127.0.0.1:8090",
		Kafka:      kafka.DefaultConfig(),
		Group:      coordinator.DefaultConfig(),
		Consumer:   coordinator.DefaultConsumerConfig(),
		Raft:       raftfsm.DefaultConfig(),
	}
}

// Validate reports every invalid setting.
func (c Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("data dir must not be empty"))
	}
	if c.RemoteAddr != "" {
		if err := validateAddr(c.RemoteAddr); err != nil {
			errs = append(errs, fmt.Errorf("remote addr: %w", err))
		}
	} else if c.Join != "" {
		errs = append(errs, errors.New("join needs the native API (remote addr)"))
	}
	if err := validateAddr(c.Kafka.Addr); err != nil {
		errs = append(errs, fmt.Errorf("kafka addr: %w", err))
	}
	if c.HTTPAddr != "" {
		if err := validateAddr(c.HTTPAddr); err != nil {
			errs = append(errs, fmt.Errorf("http addr: %w", err))
		}
	}
	if c.Kafka.AdvertisedAddr != "" {
		if err := validateAddr(c.Kafka.AdvertisedAddr); err != nil {
			errs = append(errs, fmt.Errorf("kafka advertised addr: %w", err))
		}
	}
	if c.Kafka.MaxRequestBytes <= 0 {
		errs = append(errs, fmt.Errorf("max request bytes must be positive, got %d", c.Kafka.MaxRequestBytes))
	}
	if c.Kafka.DefaultPartitions <= 0 {
		errs = append(errs, fmt.Errorf("default partitions must be positive, got %d", c.Kafka.DefaultPartitions))
	}
	if c.Consumer.SessionTimeout != 0 || c.Consumer.HeartbeatInterval != 0 || len(c.Consumer.Assignors) > 0 {
		if err := c.Consumer.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Raft.NodeID == "" {
		errs = append(errs, errors.New("node id must not be empty"))
	}
	if c.Raft.Shards < 0 || c.Raft.Shards > raftfsm.MaxShards {
		errs = append(errs, fmt.Errorf("shards must be between 1 and %d (0: what the data dir holds), got %d", raftfsm.MaxShards, c.Raft.Shards))
	}
	if err := validateAddr(c.Raft.RaftAddr); err != nil {
		errs = append(errs, fmt.Errorf("raft addr: %w", err))
	}
	if c.Join != "" {
		if err := validateAddr(c.Join); err != nil {
			errs = append(errs, fmt.Errorf("join: %w", err))
		}
		if c.Bootstrap {
			errs = append(errs, errors.New("bootstrap and join exclude each other"))
		}
	}
	for name, d := range map[string]time.Duration{"raft heartbeat timeout": c.Raft.HeartbeatTimeout, "raft election timeout": c.Raft.ElectionTimeout, "raft leader lease timeout": c.Raft.LeaderLeaseTimeout} {
		if d < 5*time.Millisecond {
			errs = append(errs, fmt.Errorf("%s must be at least 5ms, got %v", name, d))
		}
	}
	if err := c.Group.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.TLS.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Security.validate(c); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func validateAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", addr)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%q has an invalid port", addr)
	}
	return nil
}

// Node is a running coordinator.
type Node struct {
	cfg        Config
	log        *slog.Logger
	raft       *raftfsm.Node
	caughtUp   *catchUp
	system     *actor.ActorSystem
	remote     *remote.Remote
	service    *actors.Service // shard 0's, the only one with one shard
	shards     []*groupShard
	router     *groupRouter               // nil with one shard
	moving     atomic.Bool                // a shard leadership move is in flight
	topics     atomic.Pointer[topicsView] // consumer.go
	metrics    *shardMetrics
	kafka      *kafka.Listener   // the first of kafkas
	kafkas     []*kafka.Listener // one per security protocol
	stopKafka  context.CancelFunc
	kafkaDone  chan error
	lock       *os.File
	remoteAddr string
	kafkaID    int32
	stop       chan struct{}
	bg         sync.WaitGroup
	closeOnce  sync.Once
	registry   *prometheus.Registry
	observer   *actors.Observer
	http       *ops.Server
	tls        *tlsconfig.Source
}

// activateTimeout bounds the switch of the group service on a leadership change.
const activateTimeout = 30 * time.Second

// Start starts a node and returns once its listeners serve. Group requests
// are answered NOT_COORDINATOR until this node leads the Raft cluster.
func Start(cfg Config) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	n := &Node{cfg: cfg, log: log, stop: make(chan struct{}), kafkaID: KafkaNodeID(cfg.Raft.NodeID)}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if n.lock, err = lockDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	if cfg.TLS.On() {
		if n.tls, err = tlsconfig.Load(cfg.TLS.Files, log); err != nil {
			return nil, err
		}
		n.bg.Add(1)
		go func() {
			defer n.bg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { <-n.stop; cancel() }()
			n.tls.Watch(ctx, cfg.TLS.ReloadInterval)
		}()
		log.Info("tls on", "kafka", cfg.TLS.Kafka, "native", cfg.TLS.Native, "raft", cfg.TLS.Raft, "kafka_client_auth", cfg.TLS.KafkaClientAuth.String(), "subject", n.tls.Subject(), "not_after", n.tls.NotAfter())
	}
	rc := cfg.Raft
	if cfg.TLS.Raft {
		rc.TLS = n.tls
	}
	if rc.Dir == "" {
		rc.Dir = filepath.Join(cfg.DataDir, "raft")
	}
	rc.Bootstrap = cfg.Bootstrap || (cfg.Join == "" && !raftfsm.HasState(rc.Dir))
	rc.Logger = log
	if n.raft, err = raftfsm.Open(rc); err != nil {
		return nil, err
	}
	log.Info("listening", "listener", "raft", "addr", n.raft.Addr(), "node", rc.NodeID, "bootstrap", rc.Bootstrap, "shards", n.raft.ShardCount())
	n.caughtUp = newCatchUp(n.raft.Replica)
	cat := n.raft.Catalog
	cfg.Group.Partitions = func(topic string) (int32, bool) {
		t, ok := cat.Get(topic)
		return t.Partitions, ok
	}
	n.cfg.Group.Partitions = cfg.Group.Partitions // the shards' services read n.cfg
	if err = n.startMetrics(); err != nil {
		return nil, err
	}
	n.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(disconnectHandler{log.Handler()}).With("component", "actor")
	}))
	if cfg.RemoteAddr != "" {
		if err = n.startRemote(); err != nil {
			return nil, err
		}
	}
	if err = n.startShards(); err != nil {
		return nil, err
	}
	n.registerGuardMetrics()
	if err = n.registerShardMetrics(); err != nil {
		return nil, err
	}
	if _, err = n.system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &adminActor{n: n} }), AdminName); err != nil {
		return nil, fmt.Errorf("spawn %s actor: %w", AdminName, err)
	}
	if n.router != nil {
		if _, err = n.system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &routerActor{r: n.router} }), actors.RouterName); err != nil {
			return nil, fmt.Errorf("spawn %s actor: %w", actors.RouterName, err)
		}
	}
	if n.remote != nil {
		log.Info("listening", "listener", "remote", "addr", n.remoteAddr, "actors", actors.RouterName+","+AdminName)
	}
	kcfg := cfg.Kafka
	kcfg.NodeID = n.kafkaID
	kcfg.CaughtUp = n.caughtUp.Wait
	kcfg.ReadBarrier = n.readBarrier
	if !cfg.MetricsOff {
		kcfg.Metrics = n.registry
	}
	kcfg.ExclusiveOwnership = cfg.Group.OwnershipGuard
	if n.raft.ShardCount() > 1 {
		kcfg.AwaitTopic = n.awaitTopic
	}
	if cfg.TLS.Kafka {
		kcfg.TLS = n.tls.Server(cfg.TLS.KafkaClientAuth)
	}
	n.raft.Catalog.SetProposer(n.proposeTopic)
	if err = n.startKafka(kcfg); err != nil {
		return nil, err
	}
	if err = n.startHTTP(); err != nil {
		return nil, err
	}
	for _, gs := range n.shards {
		n.bg.Add(2)
		go gs.watch()
		go gs.renewLease()
	}
	if len(n.shards) > 1 {
		n.bg.Add(2)
		go n.watchMeta()
		go n.keepShards()
	}
	go n.stopOnHalt()
	if n.remote != nil {
		n.bg.Add(1)
		go n.register()
	}
	return n, nil
}

// KafkaNodeID is the broker id Kafka clients see for a node id.
func KafkaNodeID(id string) int32 {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int32(h.Sum32() & 0x7fffffff)
}

// registeredShards is the shard count a node registers: 0 for one shard,
// so that a one-shard cluster's registry reads as it did before shards.
func (n *Node) registeredShards() uint32 {
	if c := n.raft.ShardCount(); c > 1 {
		return uint32(c)
	}
	return 0
}

func (n *Node) self() *raftpb.NodeRegister {
	listeners := n.advertisedListeners()
	return &raftpb.NodeRegister{NodeId: n.raft.ID(), RaftAddr: n.raft.Addr(), RemoteAddr: n.remoteAddr,
		KafkaAddr: listeners[n.firstListener()], KafkaListeners: listeners, LogFormat: n.raft.AgreedLogFormat(), Shards: n.registeredShards()}
}

// register makes sure the cluster knows this node and its current
// addresses: a joining node asks the given member, a restarted one asks the
// members it knows. It retries until it succeeds or the node stops.
func (n *Node) register() {
	defer n.bg.Done()
	for attempt := 0; ; attempt++ {
		select {
		case <-n.stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
		if n.raft.IsLeader() {
			return // a leader registers itself
		}
		targets := n.joinTargets()
		for _, t := range targets {
			err := n.askJoin(t)
			if err == nil {
				n.log.Info("registered with the cluster", "via", t)
				return
			}
			if attempt%25 == 0 {
				n.log.Info("join attempt failed; retrying", "via", t, "err", err)
			}
		}
	}
}

// registered returns the registered nodes: the replicated registry once this
// node has caught up, and until then the one its own log held when it
// started (the FSM of a restarted node holds only its snapshot's
// registry until a leader tells it what is committed).
func (n *Node) registered() []*raftpb.NodeRegister {
	if n.caughtUp.Ready() {
		return n.raft.FSM.Nodes()
	}
	return n.raft.LoggedNodes()
}

// joinTargets are the native API addresses to ask: the --join address, or
// the other members this node knows from the replicated registry.
func (n *Node) joinTargets() []string {
	if n.cfg.Join != "" {
		return []string{n.cfg.Join}
	}
	var out []string
	for _, reg := range n.registered() {
		if reg.GetNodeId() != n.raft.ID() && reg.GetRemoteAddr() != "" {
			out = append(out, reg.GetRemoteAddr())
		}
	}
	return out
}

// askJoin sends a JoinRequest to a member, following it to the leader.
func (n *Node) askJoin(addr string) error {
	reg := n.self()
	join := &clusterpb.JoinRequest{NodeId: reg.NodeId, RaftAddr: reg.RaftAddr, RemoteAddr: reg.RemoteAddr, KafkaAddr: reg.KafkaAddr, KafkaListeners: reg.KafkaListeners, LogFormat: reg.LogFormat, Shards: max(reg.Shards, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		select {
		case <-n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	_, err := admin.NewClient(n.system).DoOnLeader(ctx, addr, join)
	return err
}

// replicaFor returns the replica that holds a group's state and whose
// leader coordinates it: the replica of the group's shard.
func (n *Node) replicaFor(groupID string) *raftfsm.Replica { return n.shardOf(groupID).rep }

// coordinatorFor answers FindCoordinator for a group key on a listener: the
// Kafka address, on that listener, of the leader of the group's replica. A
// follower that has not heard from that leader for a heartbeat timeout
// does not name it: the leader is probably gone, and a client told to
// retry finds the next one sooner than a client sent to a dead address.
func (n *Node) coordinatorFor(key, listener string) (kafka.Broker, int16) {
	r := n.replicaFor(key)
	id := r.LeaderID()
	if id == "" {
		return kafka.Broker{}, int16(coordinator.ErrCoordinatorNotAvailable)
	}
	if id != r.ID() && time.Since(r.LastLeaderContact()) > r.HeartbeatTimeout() {
		return kafka.Broker{}, int16(coordinator.ErrCoordinatorNotAvailable)
	}
	reg, ok := n.raft.FSM.Node(id) // the node registry is cluster-wide
	addr := kafkaAddrOf(reg, listener)
	if !ok || addr == "" {
		return kafka.Broker{}, int16(coordinator.ErrCoordinatorNotAvailable)
	}
	b, ok := brokerOf(id, addr)
	if !ok {
		return kafka.Broker{}, int16(coordinator.ErrCoordinatorNotAvailable)
	}
	return b, 0
}

func (n *Node) startRemote() (err error) {
	host, portStr, _ := net.SplitHostPort(n.cfg.RemoteAddr)
	port, _ := strconv.Atoi(portStr)
	if port == 0 {
		// protoactor's remote needs the port up front: reserve a free one.
		l, lerr := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if lerr != nil {
			return fmt.Errorf("remote listener: %w", lerr)
		}
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	server := []grpc.ServerOption{
		grpc.StreamInterceptor(recoverStream(n.log)),
		grpc.MaxRecvMsgSize(64 << 20),
	}
	opts := []remote.ConfigOption{remote.WithServerOptions(server...)}
	if n.cfg.TLS.Native {
		opts = nativeTLS(n.tls, n.log.With("listener", "native"), server...)
	}
	cfg := remote.Configure(host, port, opts...)
	n.remote = remote.NewRemote(n.system, cfg)
	defer func() {
		if p := recover(); p != nil {
			n.remote = nil
			err = fmt.Errorf("remote listener on %s: %v", cfg.Address(), p)
		}
	}()
	n.remote.Start()
	n.remoteAddr = n.system.Address()
	return nil
}

// recoverStream keeps a malformed remote message from crashing the process:
// protoactor's remote reader panics on some bad input (an unknown type name,
// an out-of-range serializer id); that closes only that stream.
func recoverStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Warn("remote stream closed on bad input", "panic", fmt.Sprint(p))
				err = fmt.Errorf("bad input: %v", p)
			}
		}()
		return handler(srv, ss)
	}
}

// TLS returns the node's certificate source; nil when no link uses TLS.
func (n *Node) TLS() *tlsconfig.Source { return n.tls }

// CaughtUp reports whether this node's replicated state is at least as new
// as what it had acknowledged before it started (see catchUp).
func (n *Node) CaughtUp() bool { return n.caughtUp.Ready() }

// Active reports whether this node coordinates groups now: with one
// shard, that it leads; with several, that every shard has a leader and
// this node leads at least one, with every shard it leads active.
func (n *Node) Active() bool {
	if len(n.shards) == 1 {
		return n.shards[0].active.Load()
	}
	leads := false
	for _, gs := range n.shards {
		switch {
		case gs.rep.LeaderID() == "":
			return false
		case gs.rep.IsLeader():
			if !gs.active.Load() {
				return false
			}
			leads = true
		}
	}
	return leads
}

// WaitActive waits until this node coordinates groups (Active).
func (n *Node) WaitActive(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !n.Active() {
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s did not become the coordinator within %v", n.raft.ID(), timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// KafkaAddr returns the address the Kafka listener is bound to.
func (n *Node) KafkaAddr() string { return n.kafka.Addr().String() }

// RaftAddr returns the Raft address.
func (n *Node) RaftAddr() string { return n.raft.Addr() }

// Raft returns the Raft node.
func (n *Node) Raft() *raftfsm.Node { return n.raft }

// Topics returns the topic catalog.
func (n *Node) Topics() *catalog.Catalog { return n.raft.Catalog }

// Service returns the group service of shard 0: with one shard, the one
// the listeners use.
func (n *Node) Service() *actors.Service { return n.service }

// Groups returns what the listeners send group requests to: with several
// shards, a router over the shards' services.
func (n *Node) Groups() kafka.Groups { return n.groups() }

// RemoteAddr returns the address the native API listens on.
func (n *Node) RemoteAddr() string { return n.remoteAddr }

// Shutdown stops the node gracefully: a leader first hands leadership of
// every shard it leads (and of the meta group) to another voter, so
// members see a failover without a session timeout.
func (n *Node) Shutdown() error {
	if n.raft != nil && len(n.raft.Voters()) > 1 {
		var wg sync.WaitGroup
		for _, gs := range n.shards {
			if !gs.rep.IsLeader() {
				continue
			}
			wg.Go(func() {
				if err := gs.handOver(""); err != nil {
					n.log.Warn("leadership transfer before shutdown failed", append(gs.attrs(), "err", err)...)
				} else {
					n.log.Info("leadership transferred before shutdown", append(gs.attrs(), "leader", gs.rep.LeaderID())...)
				}
			})
		}
		wg.Wait()
		if len(n.shards) > 1 && n.raft.IsLeader() {
			if err := n.raft.TransferLeadership(""); err != nil {
				n.log.Warn("meta leadership transfer before shutdown failed", "err", err)
			}
		}
	}
	return n.Close()
}

// Close stops the node at once: Kafka listener, group actors, native API,
// Raft.
func (n *Node) Close() error {
	var err error
	n.closeOnce.Do(func() {
		close(n.stop)
		n.stopHTTP()
		if n.stopKafka != nil {
			n.stopKafka()
			<-n.kafkaDone
		}
		if n.raft != nil {
			// Unblocks a leadership change in progress (barrier, Leadership);
			// writes still queued fail with "not the leader".
			err = n.raft.Close()
		}
		n.bg.Wait()
		for _, gs := range n.shards {
			gs.svc.Stop()
		}
		if n.remote != nil {
			n.remote.Shutdown(true)
		}
		if n.system != nil {
			n.system.Shutdown()
		}
		if n.lock != nil {
			n.lock.Close()
		}
	})
	return err
}

// Run starts a node and serves until ctx is done.
func Run(ctx context.Context, cfg Config) error {
	n, err := Start(cfg)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-n.stop:
		return n.raft.FSM.HaltErr()
	}
	n.log.Info("shutting down")
	return n.Shutdown()
}

// lockDataDir creates dir and takes an exclusive lock on it, so two nodes
// never share one data directory.
func lockDataDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("data dir %s is in use by another process: %w", dir, err)
	}
	return f, nil
}
