// Package kafka is the Kafka wire-protocol listener: it decodes Kafka requests
// with franz-go's kmsg, translates group requests into native requests for the
// group core (Groups), answers topic requests from the catalog, and encodes the
// answers. It keeps no group state.
package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/coordinator"
	"github.com/cohort-coord/cohort/security"
)

// Groups executes native group requests (grouppb.*Request).
//
// CallWithin executes one and returns the matching native response. The call
// is bounded by ctx and by timeout; a zero timeout leaves the bound to ctx's
// deadline, or to Groups' own default without one (requests that never park,
// such as heartbeats, skip the cost of a timer per request). It answers a
// HeartbeatRequest without waiting (no parking, no writes, no locks held by
// others for long): the listener calls it for heartbeats on the connection's
// reader goroutine.
//
// Send takes a request without its caller waiting: the answer goes to
// to.Answer, at most once, from the Groups' own goroutines. The listener sends
// the requests that wait on a Raft write or a rebalance (OffsetCommit,
// JoinGroup, SyncGroup) from the connection's reader and writes each answer
// when it comes, with no goroutine waiting for it; it answers by itself at the
// call's bound.
type Groups interface {
	CallWithin(ctx context.Context, req proto.Message, timeout time.Duration) (proto.Message, error)
	Send(req proto.Message, to coordinator.Answerer)
}

// GroupIDs is implemented by a Groups that can hand out the id string of a
// group it holds: the listener then decodes a heartbeat's group id without
// allocating a copy of it.
type GroupIDs interface {
	GroupID(b []byte) (string, bool)
}

// Coordinating is implemented by a Groups that may not coordinate groups at
// times (a Raft follower). While it does not, the listener skips its own
// topic checks so that the answer is NOT_COORDINATOR, not a catalog error
// from a node whose catalog may lag.
type Coordinating interface {
	Coordinating() bool
}

// GroupCoordinating is implemented by a Groups that coordinates some groups
// and not others (a node that leads some shards of the cluster's groups).
type GroupCoordinating interface {
	CoordinatingGroup(id string) bool
}

// coordinating reports whether the listener's Groups coordinates group id
// now.
func (l *Listener) coordinating(id string) bool {
	switch c := l.groups.(type) {
	case GroupCoordinating:
		return c.CoordinatingGroup(id)
	case Coordinating:
		return c.Coordinating()
	}
	return true
}

// Config configures a Listener.
type Config struct {
	// Addr is the address to bind, host:port (port 0 allowed).
	Addr string
	// AdvertisedAddr is the host:port clients are told to connect to
	// (Metadata, FindCoordinator). Defaults to the bound address.
	AdvertisedAddr string
	// NodeID is the broker id this listener reports.
	NodeID int32
	// MaxRequestBytes bounds a request frame; bigger frames close the
	// connection. Default 100 MiB.
	MaxRequestBytes int32
	// AutoCreateTopics creates topics named in Metadata requests (Kafka's
	// auto.create.topics.enable). DefaultConfig sets it; a zero Config has it off.
	AutoCreateTopics bool
	// AutoCreateOnlyWhenAllowed keeps Kafka's rule that a Metadata request
	// v4+ creates topics only when it sets allow_auto_topic_creation.
	// Off by default: cohort keeps no records, a topic only sizes
	// assignments, and librdkafka consumers never set the flag, so a
	// `kcat -G group topic` against a fresh coordinator would otherwise
	// wait for a topic nobody creates.
	AutoCreateOnlyWhenAllowed bool
	// DefaultPartitions is the partition count of auto-created topics and of
	// CreateTopics with -1 partitions. Default 1.
	DefaultPartitions int32
	// Coordinator, when set, answers FindCoordinator for a group key; nil
	// means this listener's own advertised address. Errors are Kafka error
	// codes (e.g. COORDINATOR_NOT_AVAILABLE while no leader is known).
	Coordinator CoordinatorFunc
	// Brokers, when set, lists the brokers Metadata reports (every node of
	// a cluster, so clients know the coordinator) and the controller id; nil
	// means this listener alone.
	Brokers func() (brokers []Broker, controller int32)
	// CaughtUp, when set, waits up to wait until the topic catalog and the
	// coordinator registry are at least as new as what this node had
	// acknowledged before it started, and reports whether they are. Until
	// they are, Metadata answers every topic LEADER_NOT_AVAILABLE and
	// FindCoordinator COORDINATOR_NOT_AVAILABLE (both retried by clients)
	// instead of answering from an older state. Metadata for topics the
	// catalog knows is answered at once (a topic's partition count never
	// changes); otherwise it waits up to MetadataCatchUpWait first, since
	// some clients (librdkafka) rebalance when a topic they consume shows
	// an error. FindCoordinator does not wait, so a client asks another
	// node at once.
	CaughtUp func(ctx context.Context, wait time.Duration) bool
	// ReadBarrier, when set, is called before a Metadata request is
	// answered from the topic catalog: it waits (bounded) until the catalog
	// holds every change the cluster had committed when the request
	// arrived, so that no node answers older than a change a client saw
	// acknowledged through another.
	ReadBarrier func(ctx context.Context) bool
	// Metrics, when set, receives the listener's Prometheus series
	// (requests by API and error code, their latency, connections).
	Metrics prometheus.Registerer
	// Security configures SASL and ACLs; nil: PLAINTEXT, everything allowed.
	Security *Security
	// ExclusiveOwnership advertises, in ApiVersions v3+ supported features,
	// that the coordinator enforces exclusive partition ownership in consumer
	// groups (FeatureExclusiveOwnership): the group ownership guard is on.
	ExclusiveOwnership bool
	// ConsumerProtocol serves the consumer group protocol of KIP-848
	// (ConsumerGroupHeartbeat, ConsumerGroupDescribe; Kafka's
	// group.coordinator.rebalance.protocols listing "consumer"). Off, the two
	// APIs stay listed in ApiVersions and every request is answered
	// UNSUPPORTED_VERSION, as Kafka does: clients fall back to the classic
	// protocol. DefaultConfig turns it on; a zero Config has it off.
	ConsumerProtocol bool
	// TLS, when set, makes the listener speak TLS: every accepted
	// connection completes a handshake with this configuration (within
	// TLSHandshakeTimeout) before its first request is read; a client that
	// does not speak TLS is logged and closed. The connection's
	// tls.ConnectionState is then known to the request handlers.
	TLS *tls.Config
	// AwaitTopic, when set, is asked before a commit or an offset deletion
	// is refused for an unknown topic: it waits a moment for the topic to
	// appear in a catalog that may lag the one it was created in (a shard
	// leader that does not lead the meta group), and reports whether it
	// did.
	AwaitTopic func(topic string) bool
}

// TLSHandshakeTimeout bounds the TLS handshake of a new connection.
const TLSHandshakeTimeout = 10 * time.Second

// MetadataCatchUpWait bounds how long a Metadata request on a node that
// has not caught up waits before it is answered LEADER_NOT_AVAILABLE (only
// a request that names a topic the node does not know, or asks for all,
// waits). A restarted follower learns its leader within a heartbeat, but
// the entries it already holds are committed only when the leader next
// replicates to it, and hashicorp/raft backs off retrying a peer that
// failed, up to 10.24 s: after an outage of a few seconds that took 1-4 s
// here. Every Kafka client waits longer than this for an answer.
const MetadataCatchUpWait = 11 * time.Second

// FeatureExclusiveOwnership is the ApiVersions supported feature (version 1)
// a coordinator with the ownership guard advertises: no SyncGroup answer
// gives a member a partition another member has not released yet.
const FeatureExclusiveOwnership = coordinator.FeatureExclusiveOwnership

// DefaultConfig returns the defaults: 127.0.0.1:9092, 100 MiB requests,
// auto-created topics with 1 partition, the consumer group protocol on.
func DefaultConfig() Config {
	return Config{Addr: "127.0.0.1:9092", MaxRequestBytes: defaultMaxRequestBytes, AutoCreateTopics: true, DefaultPartitions: 1, ConsumerProtocol: true}
}

// Broker is a node as Kafka clients see it.
type Broker struct {
	NodeID int32
	Host   string
	Port   int32
}

// CoordinatorFunc returns the broker that coordinates the group key, or a
// non-zero Kafka error code.
type CoordinatorFunc func(groupKey string) (Broker, int16)

// Stats are counters of the listener's connections.
type Stats struct {
	// Accepted connections since start.
	Accepted uint64
	// Open connections now.
	Open int64
	// Requests decoded and dispatched.
	Requests uint64
	// BadConnections counts connections closed for bad input: malformed
	// frames or requests, oversized frames, unknown API keys, failed TLS
	// handshakes.
	BadConnections uint64
	// UnsupportedVersions counts requests answered with UNSUPPORTED_VERSION.
	UnsupportedVersions uint64
	// CallErrors counts group calls that failed (answered with a retriable
	// error code).
	CallErrors uint64
	// AuthFailures counts failed SASL exchanges.
	AuthFailures uint64
}

// Listener serves the Kafka protocol on one TCP socket.
type Listener struct {
	cfg     Config
	groups  Groups
	topics  *catalog.Catalog
	log     *slog.Logger
	ln      net.Listener
	self    Broker
	autoOn  bool
	apis    map[int16]apiSpec
	version []apiVersion

	mu    sync.Mutex
	conns map[*conn]struct{}
	wg    sync.WaitGroup

	// commitSlots holds the pooled blocks of OffsetCommits (commitSlot).
	// A slot's channel belongs to the goroutines of the listener that made
	// it (inside a testing/synctest bubble, to that bubble).
	commitSlots *sync.Pool
	// waitSlots holds the pooled answer slots of JoinGroups and SyncGroups
	// (waitSlot), under the same rule.
	waitSlots *sync.Pool

	accepted, requests, bad, unsupported, callErrors, authFailures atomic.Uint64
	connSeq                                                        atomic.Uint32 // connections made, for their latency shards
	open                                                           atomic.Int64

	// authz checks requests; nil: authorization off.
	authz *security.Authorizer

	groupIDs GroupIDs // nil: heartbeat group ids are copied
	// metrics is nil without Config.Metrics.
	metrics *metrics
	// audit counts and logs SASL outcomes and ACL denials (audit.go).
	audit *audit

	// onJoin, when set (tests), observes every JoinGroup version received.
	onJoin func(clientID string, version int16)
	// onPanic, when set (tests), observes recovered handler panics.
	onPanic func(v any)
}

const (
	defaultMaxRequestBytes = 100 << 20
	// maxInFlight bounds the requests of one connection that are being
	// processed or waiting to be written.
	maxInFlight = 64
	// connBufferSize is the size of each connection's read and write
	// buffers. A window of pipelined group requests fits (16 commits are
	// about 2 KB, their answers under 1 KB); a bigger frame is read into a
	// buffer of its own and a bigger answer written straight through. The
	// buffers live as long as the connection, so their size sets much of
	// what an idle member's connection costs once the heap has been reused:
	// 18 KB of resident memory per connection with 4 KB buffers
	// (kafka/BENCHMARKS.md), 107 KB with 64 KB ones (BenchmarkConnMemory).
	connBufferSize = 4 << 10
)

// New binds the socket and returns a Listener ready to Serve.
func New(cfg Config, groups Groups, topics *catalog.Catalog, log *slog.Logger) (*Listener, error) {
	if groups == nil || topics == nil {
		return nil, errors.New("kafka: groups and topics are required")
	}
	if log == nil {
		log = slog.Default()
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = defaultMaxRequestBytes
	}
	if cfg.DefaultPartitions <= 0 {
		cfg.DefaultPartitions = 1
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("kafka: listen %s: %w", cfg.Addr, err)
	}
	adv := cfg.AdvertisedAddr
	if adv == "" {
		adv = ln.Addr().String()
	}
	self, err := parseBroker(cfg.NodeID, adv)
	if err != nil {
		ln.Close()
		return nil, err
	}
	if self.Host == "" || self.Host == "0.0.0.0" || self.Host == "::" {
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		p, _ := strconv.Atoi(port)
		self.Host, self.Port = "127.0.0.1", int32(p)
	}
	l := &Listener{
		cfg:         cfg,
		groups:      groups,
		topics:      topics,
		log:         log.With("listener", "kafka"),
		ln:          ln,
		self:        self,
		autoOn:      cfg.AutoCreateTopics,
		conns:       make(map[*conn]struct{}),
		commitSlots: new(sync.Pool),
		waitSlots:   new(sync.Pool),
	}
	l.groupIDs, _ = groups.(GroupIDs)
	if cfg.Security != nil {
		if cfg.Security.SASL && cfg.Security.Store == nil {
			ln.Close()
			return nil, errors.New("kafka: SASL needs a credential store")
		}
		l.authz = cfg.Security.Authorizer
	}
	l.apis, l.version = l.apiTable()
	if cfg.Metrics != nil {
		l.metrics = newMetrics(cfg.Metrics, l)
	}
	l.audit = newAudit(cfg.Metrics)
	return l, nil
}

func parseBroker(id int32, addr string) (Broker, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return Broker{}, fmt.Errorf("kafka: advertised address %q: %w", addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return Broker{}, fmt.Errorf("kafka: advertised port %q: %w", port, err)
	}
	return Broker{NodeID: id, Host: host, Port: int32(p)}, nil
}

// Addr is the bound address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Stats returns the connection counters.
func (l *Listener) Stats() Stats {
	return Stats{
		Accepted:            l.accepted.Load(),
		Open:                l.open.Load(),
		Requests:            l.requests.Load(),
		BadConnections:      l.bad.Load(),
		UnsupportedVersions: l.unsupported.Load(),
		CallErrors:          l.callErrors.Load(),
		AuthFailures:        l.authFailures.Load(),
	}
}

// Serve accepts connections until ctx is done, then closes the socket and all
// connections, waits for their goroutines and returns.
func (l *Listener) Serve(ctx context.Context) error {
	l.log.Info("listening", "addr", l.ln.Addr().String(), "advertised", net.JoinHostPort(l.self.Host, strconv.Itoa(int(l.self.Port))))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { l.ln.Close() })
	defer stop()

	var err error
	for {
		nc, aerr := l.ln.Accept()
		if aerr != nil {
			if ctx.Err() == nil {
				err = fmt.Errorf("kafka: accept: %w", aerr)
			}
			break
		}
		l.accepted.Add(1)
		if l.cfg.TLS != nil {
			nc = tls.Server(nc, l.cfg.TLS)
		}
		c := l.newConn(ctx, nc)
		l.mu.Lock()
		l.conns[c] = struct{}{}
		l.mu.Unlock()
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			c.serve()
			l.mu.Lock()
			delete(l.conns, c)
			l.mu.Unlock()
		}()
	}
	cancel()
	l.ln.Close()
	l.mu.Lock()
	for c := range l.conns {
		c.close()
	}
	l.mu.Unlock()
	l.wg.Wait()
	return err
}

// Close closes the socket of a listener that never served (Serve closes it
// otherwise).
func (l *Listener) Close() error { return l.ln.Close() }
