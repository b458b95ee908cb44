// Package node is the composition root of a cohort coordinator: it builds
// the actor system, the group service and the listeners, and owns the order
// in which they start and stop.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"

	"github.com/cohort-coord/cohort/actors"
	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/coordinator"
	"github.com/cohort-coord/cohort/kafka"
)

// Config is a node's configuration.
type Config struct {
	// DataDir holds the node's durable state; it is created if missing and
	// locked while the node runs.
	DataDir string
	// RemoteAddr is where the native group API is served (protoactor remote
	// over gRPC). Port 0 picks a free port.
	RemoteAddr string
	// Kafka configures the Kafka protocol listener.
	Kafka  kafka.Config
	Group  coordinator.Config
	Logger *slog.Logger
}

// DefaultConfig returns the embedded defaults.
func DefaultConfig() Config {
	return Config{
		DataDir:    "cohort-data",
		RemoteAddr: "127.0.0.1:8090",
		Kafka:      kafka.DefaultConfig(),
		Group:      coordinator.DefaultConfig(),
	}
}

// Validate reports every invalid setting.
func (c Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("data dir must not be empty"))
	}
	if err := validateAddr(c.RemoteAddr); err != nil {
		errs = append(errs, fmt.Errorf("remote addr: %w", err))
	}
	if err := validateAddr(c.Kafka.Addr); err != nil {
		errs = append(errs, fmt.Errorf("kafka addr: %w", err))
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
	if err := c.Group.Validate(); err != nil {
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
	system     *actor.ActorSystem
	remote     *remote.Remote
	service    *actors.Service
	topics     *catalog.Catalog
	kafka      *kafka.Listener
	stopKafka  context.CancelFunc
	kafkaDone  chan error
	lock       *os.File
	remoteAddr string
}

// Start starts a node and returns once it serves.
func Start(cfg Config) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	n := &Node{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if n.lock, err = lockDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	n.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return log.With("component", "actor")
	}))
	if err = n.startRemote(); err != nil {
		return nil, err
	}
	n.service, err = actors.Start(n.system, actors.Options{Config: cfg.Group, Logger: log})
	if err != nil {
		return nil, err
	}
	log.Info("listening", "listener", "remote", "addr", n.remoteAddr, "actor", actors.RouterName)
	n.topics = catalog.New()
	if n.kafka, err = kafka.New(cfg.Kafka, n.service, n.topics, log.With("component", "kafka")); err != nil {
		return nil, err
	}
	var kctx context.Context
	kctx, n.stopKafka = context.WithCancel(context.Background())
	n.kafkaDone = make(chan error, 1)
	go func() { n.kafkaDone <- n.kafka.Serve(kctx) }()
	return n, nil
}

// KafkaAddr returns the address the Kafka listener is bound to.
func (n *Node) KafkaAddr() string { return n.kafka.Addr().String() }

// Topics returns the topic catalog.
func (n *Node) Topics() *catalog.Catalog { return n.topics }

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
	cfg := remote.Configure(host, port, remote.WithServerOptions(
		grpc.StreamInterceptor(recoverStream(n.log)),
		grpc.MaxRecvMsgSize(64<<20),
	))
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

// Service returns the group service (the same the listeners use).
func (n *Node) Service() *actors.Service { return n.service }

// RemoteAddr returns the address the native API listens on.
func (n *Node) RemoteAddr() string { return n.remoteAddr }

// Close stops the node: the Kafka listener first (no new requests), then the
// group actors, then the native API.
func (n *Node) Close() error {
	if n.stopKafka != nil {
		n.stopKafka()
		<-n.kafkaDone
		n.stopKafka = nil
	}
	if n.service != nil {
		n.service.Stop()
		n.service = nil
	}
	if n.remote != nil {
		n.remote.Shutdown(true)
		n.remote = nil
	}
	if n.system != nil {
		n.system.Shutdown()
		n.system = nil
	}
	if n.lock != nil {
		n.lock.Close()
		n.lock = nil
	}
	return nil
}

// Run starts a node and serves until ctx is done.
func Run(ctx context.Context, cfg Config) error {
	n, err := Start(cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	n.log.Info("shutting down")
	return n.Close()
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
