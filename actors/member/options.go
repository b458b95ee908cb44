package member

import (
	"context"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/cohort-coord/cohort/assignor"
	"github.com/cohort-coord/cohort/membership"
)

// Opt configures a member, in the style of franz-go's kgo.Opt.
type Opt func(*config)

type config struct {
	m              membership.Config
	transport      TransportFactory
	bootstrap      []string
	requestTimeout time.Duration
	handler        Handler
	notify         *actor.PID
	log            *slog.Logger
	protocol       string // membership.ClassicProtocol (default) or ConsumerProtocol
}

// Topics sets the subscription (required).
func Topics(topics ...string) Opt {
	return func(c *config) { c.m.Topics = append(c.m.Topics, topics...) }
}

// Balancers sets the assignors in preference order. Default:
// [cooperative-sticky, range] (assignor.CooperativeSticky, assignor.Range).
func Balancers(bs ...assignor.Balancer) Opt {
	return func(c *config) { c.m.Balancers = bs }
}

// InstanceID makes the member static (group.instance.id, KIP-345): restarted
// within its session timeout it gets its partitions back without a
// rebalance.
func InstanceID(id string) Opt { return func(c *config) { c.m.InstanceID = id } }

// ConsumerProtocol makes the member speak the consumer group protocol
// (KIP-848, Kafka's group.protocol=consumer): the coordinator assigns, and
// the member reconciles through ConsumerGroupHeartbeat. Balancers and
// Partitions do not apply; ServerAssignor names the coordinator's assignor.
// A coordinator that does not serve the protocol answers the first
// heartbeat UNSUPPORTED_VERSION, and the member speaks the classic protocol
// instead (Member.GroupProtocol tells).
func ConsumerProtocol() Opt { return GroupProtocol(membership.ConsumerProtocol) }

// GroupProtocol selects the group protocol by Kafka's group.protocol name:
// "classic" (the default) or "consumer" (see ConsumerProtocol).
func GroupProtocol(name string) Opt { return func(c *config) { c.protocol = name } }

// ServerAssignor names the assignor a consumer-protocol member asks the
// coordinator for ("uniform" or "range" on cohort and Kafka; default: the
// coordinator's first).
func ServerAssignor(name string) Opt { return func(c *config) { c.m.ServerAssignor = name } }

// Rack sets the member's rack (client.rack) for rack-aware assignors.
func Rack(rack string) Opt { return func(c *config) { c.m.Rack = rack } }

// SessionTimeout sets session.timeout.ms (default 45s). Under the consumer
// protocol the coordinator keeps the session timeout (Kafka's
// group.consumer.session.timeout.ms) and the member uses this one as its
// own bound: when no heartbeat was answered for it, counted from the send of
// the last answered one, its partitions are reported lost and it rejoins.
// Keep it at most the coordinator's.
func SessionTimeout(d time.Duration) Opt { return func(c *config) { c.m.SessionTimeout = d } }

// RebalanceTimeout sets the rebalance timeout (max.poll.interval.ms in the
// Java consumer; default 60s): how long the group waits for members to
// rejoin, and so how long revoke callbacks may take. The member heartbeats
// while a revoke callback runs, so a callback may outlast the session
// timeout. One that outlasts the rebalance timeout loses the generation:
// commits from it are refused, what the member kept is reported Lost, and
// it joins again as a new member once the callback returns.
func RebalanceTimeout(d time.Duration) Opt { return func(c *config) { c.m.RebalanceTimeout = d } }

// HeartbeatInterval sets heartbeat.interval.ms (default 3s). Under the
// consumer protocol the coordinator's interval, in every answer, replaces
// it after the first heartbeat.
func HeartbeatInterval(d time.Duration) Opt { return func(c *config) { c.m.HeartbeatInterval = d } }

// RetryBackoff sets the first and the largest backoff between retries of a
// failed step (defaults 100ms and 1s, as retry.backoff.ms and
// retry.backoff.max.ms).
func RetryBackoff(first, max time.Duration) Opt {
	return func(c *config) { c.m.RetryBackoff, c.m.MaxRetryBackoff = first, max }
}

// RequestTimeout bounds every request but JoinGroup, which may take the
// rebalance timeout more (default 10s). Over the native transport a
// heartbeat, commit or leave waits at most twice the heartbeat interval (a
// second at least) within it, and a request to a coordinator whose
// connection ended fails at once.
func RequestTimeout(d time.Duration) Opt { return func(c *config) { c.requestTimeout = d } }

// Partitions sizes a topic for the leader's assignment. Over the native
// transport (which has no topic metadata) every subscribed topic must be
// sized this way; over the Kafka transport unsized topics are looked up with
// Metadata.
func Partitions(topic string, n int32) Opt {
	return func(c *config) {
		if c.m.Partitions == nil {
			c.m.Partitions = map[string]int32{}
		}
		c.m.Partitions[topic] = n
	}
}

// MetadataMaxAge sets how often the leader looks at the partition counts of
// the topics it sized from Metadata and rejoins when one changed
// (metadata.max.age.ms; default 5m). Topics sized with Partitions are fixed.
func MetadataMaxAge(d time.Duration) Opt { return func(c *config) { c.m.MetadataMaxAge = d } }

// ClientID sets the client id sent with requests.
func ClientID(id string) Opt { return func(c *config) { c.m.ClientID = id } }

// Bootstrap sets the native API addresses of cohortd nodes for the default
// native transport (default 127.0.0.1:8090).
func Bootstrap(addrs ...string) Opt {
	return func(c *config) { c.bootstrap = append(c.bootstrap, addrs...) }
}

// WithTransport replaces the default native transport, e.g. with
// Kafka(seeds...) or Native(addrs...).
func WithTransport(f TransportFactory) Opt { return func(c *config) { c.transport = f } }

// WithHandler sets the callbacks for assigned, revoked and lost partitions.
func WithHandler(h Handler) Opt { return func(c *config) { c.handler = h } }

// OnAssigned, OnRevoked and OnLost set one callback each (see Handler).
func OnAssigned(f func(context.Context, *Member, []assignor.TopicPartitions)) Opt {
	return func(c *config) { c.funcs().assigned = f }
}

// OnRevoked: see OnAssigned.
func OnRevoked(f func(context.Context, *Member, []assignor.TopicPartitions)) Opt {
	return func(c *config) { c.funcs().revoked = f }
}

// OnLost: see OnAssigned.
func OnLost(f func(context.Context, *Member, []assignor.TopicPartitions)) Opt {
	return func(c *config) { c.funcs().lost = f }
}

// NotifyActor delivers every assigned, revoked and lost as a *PartitionsEvent
// message to a user actor, with Request semantics: the member waits for the
// actor's answer (any message, sent with ctx.Respond) before it moves on,
// for at most the rebalance timeout.
func NotifyActor(pid *actor.PID) Opt { return func(c *config) { c.notify = pid } }

// Logger sets the logger (default slog.Default()).
func Logger(l *slog.Logger) Opt { return func(c *config) { c.log = l } }

func (c *config) funcs() *funcHandler {
	if f, ok := c.handler.(*funcHandler); ok {
		return f
	}
	f := &funcHandler{}
	c.handler = f
	return f
}

// Handler receives partition changes. Callbacks run one at a time, in order,
// on a goroutine of their own (never on the member's actor), so they may
// block and may call the member's methods (Commit from Revoked, for example).
// The member does not send its next JoinGroup (eager), its follow-up
// JoinGroup (cooperative) or its SyncGroup (downgrade) before Revoked or Lost
// has returned; under the consumer protocol it does not report revoked
// partitions gone, nor rejoin after Lost, before the callback returned.
type Handler interface {
	// Assigned: the partitions are now the member's. Called after every
	// completed rebalance, with the newly added partitions (maybe none).
	Assigned(ctx context.Context, m *Member, ps []assignor.TopicPartitions)
	// Revoked: the member gives the partitions up; nobody else gets them
	// before this returns, for up to the rebalance timeout (RebalanceTimeout).
	// The member keeps heartbeating meanwhile, and a commit made from here
	// is accepted while the generation is current.
	Revoked(ctx context.Context, m *Member, ps []assignor.TopicPartitions)
	// Lost: the partitions may already be another member's (session
	// expired, fenced, generation gone); they were not revoked.
	Lost(ctx context.Context, m *Member, ps []assignor.TopicPartitions)
}

type funcHandler struct {
	assigned, revoked, lost func(context.Context, *Member, []assignor.TopicPartitions)
}

func (f *funcHandler) Assigned(ctx context.Context, m *Member, ps []assignor.TopicPartitions) {
	if f.assigned != nil {
		f.assigned(ctx, m, ps)
	}
}

func (f *funcHandler) Revoked(ctx context.Context, m *Member, ps []assignor.TopicPartitions) {
	if f.revoked != nil {
		f.revoked(ctx, m, ps)
	}
}

func (f *funcHandler) Lost(ctx context.Context, m *Member, ps []assignor.TopicPartitions) {
	if f.lost != nil {
		f.lost(ctx, m, ps)
	}
}

// PartitionsEvent is the message NotifyActor sends.
type PartitionsEvent struct {
	Member     *Member
	Kind       membership.CallbackKind // membership.Assigned, Revoked or Lost
	Partitions []assignor.TopicPartitions
	Generation int32
}
