package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// ErrTimeout is returned by Call when no answer came in time.
var ErrTimeout = errors.New("actors: request timed out")

// DefaultCallTimeout bounds a Call whose context has no deadline.
const DefaultCallTimeout = 30 * time.Second

// Options configure a Service.
type Options struct {
	Config coordinator.Config
	Store  Store // required
	// Fenced starts the service answering NOT_COORDINATOR until Activate
	// (a Raft node that is not the leader yet). By default it serves at once.
	Fenced bool
	Clock  Clock        // default: SystemClock
	Logger *slog.Logger // default: slog.Default()
	// Observer, when set, is kept current with every group's view, its
	// rebalance history and the group metrics, and its Group asks this
	// service for the group's members. An Observer serves one Service.
	Observer *Observer
	// Lease, when set, is asked before a group actor answers any request:
	// false answers NOT_COORDINATOR. A Raft leader's lease (confirmed by a
	// quorum within the last heartbeat timeout) keeps a leader that was
	// paused past an election from answering from state a newer leader has
	// changed. now is the actor's clock reading for the request, taken
	// just before the lease is asked.
	Lease func(now time.Time) bool
	// Peer, when set, reports whether an actor system address is another
	// node of the cluster. A request answered to such an address (a PID's,
	// or an Addressed answerer's) was forwarded by that node for a client
	// connected to it (a node that handed a shard over forwards what its
	// clients still send it): the group keeps the member's takeover window
	// open, since the member's connection may break without this
	// coordinator failing (coordinator.Group.HeardThroughPeer).
	Peer func(addr string) bool
	// Consumer configures consumer groups (KIP-848); nil means
	// coordinator.DefaultConsumerConfig().
	Consumer *coordinator.ConsumerConfig
	// ConsumerGroups, when set, says whether a ConsumerGroupHeartbeat may
	// create a consumer group now: a non-nil error (the protocol is turned
	// off, or the cluster's log format does not carry consumer group
	// records yet) answers it UNSUPPORTED_VERSION with the error's text, on
	// which clients fall back to the classic protocol. Nil allows it.
	ConsumerGroups func() error
	// Topics, when set, returns the topic catalog (topic -> partitions) and
	// a number that changes whenever it does; consumer groups assign from
	// it. The map is shared: nobody changes it once returned. Nil is an
	// empty catalog.
	Topics func() (version uint64, topics map[string]int32)
	// Name is the groups actor's name (default RouterName). A node that
	// holds several shards runs a service per shard, each under its own
	// name, behind one RouterName actor that routes by shard.
	Name string
}

// Service is the group coordinator running on an actor system: the groups
// actor and its group actors.
type Service struct {
	*Client
	env *env
	// replies recycles the reply channels of local calls.
	replies  sync.Pool
	timers   sync.Pool // of stopped *time.Timer, for call deadlines
	stopOnce sync.Once
	active   atomic.Bool
	// lost re-sends requests that reached dead letters (rescueLost).
	lost *eventstream.Subscription
}

// Call sends a native group request and waits for its answer until ctx's
// deadline (DefaultCallTimeout without one). A request for a group whose
// actor exists goes straight to that actor.
func (s *Service) Call(ctx context.Context, req proto.Message) (proto.Message, error) {
	return s.CallWithin(ctx, req, 0)
}

// CallWithin is Call bounded by timeout as well as by ctx; a zero timeout is
// Call's bound. It saves callers a derived context per call. A
// HeartbeatRequest is answered without waiting: a heartbeat neither parks nor
// writes (the Kafka listener calls it on a connection's reader goroutine).
func (s *Service) CallWithin(ctx context.Context, req proto.Message, timeout time.Duration) (proto.Message, error) {
	if _, ok := ctx.Deadline(); !ok && timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	reply, _ := s.replies.Get().(chan proto.Message)
	if reply == nil {
		reply = make(chan proto.Message, 1)
	}
	s.system.Root.Send(s.target(req), &call{req: req, reply: reply})
	select {
	case res := <-reply:
		s.replies.Put(reply)
		return res, nil
	default:
	}
	var expired <-chan time.Time
	if timeout > 0 {
		t := s.timer(timeout)
		defer s.timers.Put(t)
		defer t.Stop() // no stale expiry is received after Stop (Go 1.23+)
		expired = t.C
	}
	select {
	case res := <-reply:
		s.replies.Put(reply)
		return res, nil
	case <-ctx.Done():
	case <-expired:
	}
	// The answer may still come: the channel is not reused.
	return nil, ErrTimeout
}

// Send is CallWithin without the wait: the answer goes to to.Answer, on an
// actor's goroutine. A request that reaches a group actor as it stops goes
// back to the groups actor (rescueLost); the caller still bounds its own
// wait.
func (s *Service) Send(req proto.Message, to coordinator.Answerer) {
	s.system.Root.Send(s.target(req), &call{req: req, reply: to})
}

// target is where req goes: straight to its group's actor when that exists,
// to the groups actor otherwise.
func (s *Service) target(req proto.Message) *actor.PID {
	if gr, ok := req.(groupRequest); ok {
		if pid, ok := s.env.directory.Load(gr.GetGroupId()); ok {
			return pid
		}
	}
	return s.router
}

// timer returns a pooled timer set to fire after d.
func (s *Service) timer(d time.Duration) *time.Timer {
	if t, ok := s.timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// Client sends native group requests to a groups actor, local or remote.
type Client struct {
	system *actor.ActorSystem
	router *actor.PID
}

// NewClient returns a client of the groups actor at router. For a remote
// coordinator, system must run protoactor remote (answers come back through
// it) and router is actor.NewPID(address, RouterName).
func NewClient(system *actor.ActorSystem, router *actor.PID) *Client {
	return &Client{system: system, router: router}
}

// Start spawns the groups actor under RouterName on system.
func Start(system *actor.ActorSystem, opts Options) (*Service, error) {
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	e := &env{cfg: opts.Config, store: opts.Store, clock: opts.Clock, system: system, log: opts.Logger, directory: newDirectory(), observer: opts.Observer, lease: opts.Lease, peer: opts.Peer, workers: newWorkers(), lifecycle: newLifecycleLimiter()}
	e.consumer = consumerEnv{cfg: opts.Consumer, allowed: opts.ConsumerGroups, topics: opts.Topics}
	if e.consumer.cfg == nil {
		c := coordinator.DefaultConsumerConfig()
		e.consumer.cfg = &c
	}
	if err := e.consumer.cfg.Validate(); err != nil {
		return nil, err
	}
	if e.store == nil {
		return nil, errors.New("actors: a store is required")
	}
	if e.clock == nil {
		e.clock = SystemClock{}
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	name := opts.Name
	if name == "" {
		name = RouterName
	}
	pid, err := system.Root.SpawnNamed(actor.PropsFromProducer(newGroupsActor(e, !opts.Fenced),
		actor.WithDispatcher(&workerDispatcher{w: e.workers, throughput: routerThroughput})), name)
	if err != nil {
		return nil, fmt.Errorf("spawn %s actor: %w", name, err)
	}
	svc := &Service{Client: NewClient(system, pid), env: e}
	svc.active.Store(!opts.Fenced)
	svc.lost = system.EventStream.Subscribe(svc.rescueLost)
	if opts.Observer != nil {
		opts.Observer.DescribeWith(svc.Describe)
		opts.Observer.DescribeConsumerWith(svc.DescribeConsumer)
	}
	return svc, nil
}

// rescueLost takes a request that a group actor stopped before receiving,
// which protoactor hands to its dead letters, and sends it to the groups
// actor: that answers it NOT_COORDINATOR once the node stopped coordinating
// (a sender may look a group's actor up just before Deactivate stops it),
// or routes it to the group's actor of the moment, as a gone group's actor
// does with what it receives (dead). Without it the request was never
// answered, and its caller gave up at its bound with a retriable error
// instead of NOT_COORDINATOR. Requests to the groups actor itself are
// left: it is only gone once the service stopped.
func (s *Service) rescueLost(evt any) {
	dl, ok := evt.(*actor.DeadLetterEvent)
	if !ok || dl.PID == nil {
		return
	}
	c, ok := dl.Message.(*call)
	if !ok || dl.PID.Address != s.router.Address || !strings.HasPrefix(dl.PID.Id, s.router.Id+"/") {
		return
	}
	s.system.Root.Send(s.router, c)
}

// describeTimeout bounds the DescribeGroups call behind Observer.Group: a
// group actor answers it at once, so waiting longer only holds up a page.
const describeTimeout = 5 * time.Second

// Describe asks a group for its DescribeGroups answer; nil when none came
// in time or the group is not coordinated here.
func (s *Service) Describe(id string) *pb.DescribeGroupResponse {
	res, err := s.CallWithin(context.Background(), &pb.DescribeGroupRequest{GroupId: id}, describeTimeout)
	d, ok := res.(*pb.DescribeGroupResponse)
	if err != nil || !ok || d.GetErrorCode() != coordinator.ErrNone {
		return nil
	}
	return d
}

// DescribeConsumer asks a consumer group for its ConsumerGroupDescribe
// answer; nil when none came in time or no consumer group of that id is
// coordinated here.
func (s *Service) DescribeConsumer(id string) *pb.ConsumerGroupDescribeResponse {
	res, err := s.CallWithin(context.Background(), &pb.ConsumerGroupDescribeRequest{GroupId: id}, describeTimeout)
	d, ok := res.(*pb.ConsumerGroupDescribeResponse)
	if err != nil || !ok || d.GetErrorCode() != coordinator.ErrNone {
		return nil
	}
	return d
}

// GuardStats returns the ownership guard's counters summed over every group
// this service coordinated since it started.
func (s *Service) GuardStats() coordinator.GuardStats {
	return coordinator.GuardStats{Withheld: s.env.guard.withheld.Load(), FollowUps: s.env.guard.followUps.Load()}
}

// Router returns the PID of the groups actor.
func (c *Client) Router() *actor.PID { return c.router }

// Call sends a native group request (*grouppb.JoinGroupRequest, ...) and
// waits for its answer until ctx's deadline (DefaultCallTimeout without one).
func (c *Client) Call(ctx context.Context, req proto.Message) (proto.Message, error) {
	timeout := DefaultCallTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			return nil, ErrTimeout
		}
	}
	res, err := c.system.Root.RequestFuture(c.router, req, timeout).Result()
	if err != nil {
		if errors.Is(err, actor.ErrTimeout) {
			return nil, ErrTimeout
		}
		return nil, err
	}
	msg, ok := res.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("actors: unexpected answer %T", res)
	}
	return msg, nil
}

// GroupID returns the id string of a group this node has an actor for,
// equal to b, so that a caller decoding requests need not allocate one.
func (s *Service) GroupID(b []byte) (string, bool) { return s.env.directory.ID(b) }

// Activate makes the service coordinate groups: every stored group is
// loaded into its actor with fresh session timers. It returns once the
// groups actor has switched.
func (s *Service) Activate(timeout time.Duration) error {
	return s.ActivateAfter(timeout, time.Time{})
}

// ActivateAfter is Activate for a node that takes over from a coordinator
// last known alive at previousAlive (zero: unknown, as after a restart of
// the whole cluster): restored members' sessions end when they would have
// under that coordinator, rather than a full session from now (see
// coordinator.TakeoverSessions).
func (s *Service) ActivateAfter(timeout time.Duration, previousAlive time.Time) error {
	if previousAlive.IsZero() {
		s.env.previousAlive.Store(nil)
	} else {
		s.env.previousAlive.Store(&previousAlive)
	}
	_, err := s.system.Root.RequestFuture(s.router, &activate{}, timeout).Result()
	if err == nil {
		s.active.Store(true)
	}
	return err
}

// Loading reports how many stored groups are still being loaded after
// Activate (0 once every one has its actor and state).
func (s *Service) Loading() int { return int(s.env.loading.Load()) }

// Coordinating reports whether the service coordinates groups (it was
// activated and not deactivated since).
func (s *Service) Coordinating() bool { return s.active.Load() }

// Deactivate stops coordinating: group actors stop (parked requests are
// answered NOT_COORDINATOR) and every request is answered NOT_COORDINATOR.
func (s *Service) Deactivate(timeout time.Duration) error {
	s.active.Store(false)
	s.env.serving.Store(0)
	_, err := s.system.Root.RequestFuture(s.router, &deactivate{}, timeout).Result()
	return err
}

// Stop stops the groups actor and its group actors.
func (s *Service) Stop() {
	s.stopOnce.Do(func() {
		s.system.EventStream.Unsubscribe(s.lost)
		_ = s.system.Root.StopFuture(s.router).Wait()
		s.env.workers.close()
	})
}
