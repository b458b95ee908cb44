package member

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/cohort-coord/cohort/assignor"
	"github.com/cohort-coord/cohort/membership"
)

// Errors a member's methods return (see package membership for their meaning).
var (
	ErrRebalanceInProgress     = membership.ErrRebalanceInProgress
	ErrCoordinatorNotAvailable = membership.ErrCoordinatorNotAvailable
	ErrIllegalState            = membership.ErrIllegalState
	ErrFenced                  = membership.ErrFenced
	ErrCommitFailed            = membership.ErrCommitFailed
	ErrConfig                  = membership.ErrConfig
	ErrUnsupported             = membership.ErrUnsupported
	// ErrCloseTimeout: Close's context ended before the member finished
	// leaving; it was stopped without waiting further.
	ErrCloseTimeout = errors.New("member: close did not finish in time")
)

// DefaultBootstrap is the native API address of a cohortd started with its
// defaults.
const DefaultBootstrap = "127.0.0.1:8090"

// DefaultRequestTimeout bounds a JoinGroup (beside the rebalance timeout) and
// a SyncGroup, and every other request of the Kafka transport; the native
// transport waits at most twice the heartbeat interval for the others.
const DefaultRequestTimeout = 10 * time.Second

// Member is one running group member: a protoactor actor that owns the
// member's protocol state, timers and transport. Its methods are safe for
// concurrent use.
type Member struct {
	group  string
	system *actor.ActorSystem
	pid    *actor.PID
	cfg    *config
	done   chan struct{}
	err    error // set before done is closed
	state  atomic.Pointer[snapshot]
}

type snapshot struct {
	memberID      string
	generation    int32
	protocol      string
	groupProtocol string
	phase         membership.Phase
	owned         []assignor.TopicPartitions
}

// Start starts a member of group on system and returns at once; the member
// finds its coordinator and joins in the background. With the default native
// transport the system must run protoactor remote.
//
//	m, err := member.Start(system, "orders",
//		member.Topics("orders"), member.Partitions("orders", 12),
//		member.OnAssigned(func(ctx context.Context, m *member.Member, ps []assignor.TopicPartitions) { ... }))
func Start(system *actor.ActorSystem, group string, opts ...Opt) (*Member, error) {
	c := &config{requestTimeout: DefaultRequestTimeout}
	c.m.Group = group
	for _, o := range opts {
		o(c)
	}
	if err := c.m.Validate(); err != nil {
		return nil, err
	}
	switch c.protocol {
	case "":
		c.protocol = membership.ClassicProtocol
	case membership.ClassicProtocol, membership.ConsumerProtocol:
	default:
		return nil, fmt.Errorf("%w: group protocol %q (want %q or %q)", ErrConfig, c.protocol, membership.ClassicProtocol, membership.ConsumerProtocol)
	}
	if c.requestTimeout <= 0 {
		return nil, fmt.Errorf("%w: request timeout %v", ErrConfig, c.requestTimeout)
	}
	if err := checkRegex(c); err != nil {
		return nil, err
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.transport == nil {
		addrs := c.bootstrap
		if len(addrs) == 0 {
			addrs = []string{DefaultBootstrap}
		}
		c.transport = Native(addrs...)
	}
	if system == nil {
		return nil, fmt.Errorf("%w: no actor system", ErrConfig)
	}
	tr, err := c.transport(TransportEnv{
		System:            system,
		Group:             group,
		ClientID:          c.m.ClientID,
		RequestTimeout:    c.requestTimeout,
		RebalanceTimeout:  c.m.RebalanceTimeout,
		HeartbeatInterval: c.m.HeartbeatInterval,
		Logger:            c.log,
	})
	if err != nil {
		return nil, err
	}
	m := &Member{group: group, system: system, cfg: c, done: make(chan struct{})}
	m.state.Store(&snapshot{generation: -1, groupProtocol: c.protocol})
	props := actor.PropsFromProducer(func() actor.Actor { return newMemberActor(m, tr) })
	m.pid = system.Root.Spawn(props)
	return m, nil
}

// Group returns the group id.
func (m *Member) Group() string { return m.group }

// PID returns the member's actor.
func (m *Member) PID() *actor.PID { return m.pid }

// Assignment returns the partitions the member owns now.
func (m *Member) Assignment() []assignor.TopicPartitions { return m.state.Load().owned }

// Generation returns the generation the member is in, under the consumer
// protocol its member epoch (-1 when none).
func (m *Member) Generation() int32 { return m.state.Load().generation }

// MemberID returns the member id the coordinator gave ("" before).
func (m *Member) MemberID() string { return m.state.Load().memberID }

// Protocol returns the assignor the group selected in the member's
// generation ("" under the consumer protocol: the coordinator does not say).
func (m *Member) Protocol() string { return m.state.Load().protocol }

// GroupProtocol returns the group protocol the member speaks: "classic", or
// "consumer" (ConsumerProtocol) unless the coordinator did not serve it.
func (m *Member) GroupProtocol() string { return m.state.Load().groupProtocol }

// Phase returns where the member is in its protocol loop.
func (m *Member) Phase() membership.Phase { return m.state.Load().phase }

// Done is closed once the member stopped (after Close, or on a fatal error).
func (m *Member) Done() <-chan struct{} { return m.done }

// Err returns why the member stopped: nil while it runs and after a clean
// Close; ErrFenced (wrapping kerr.FencedInstanceID) when another instance
// took its instance id; a *membership.CodeError for other fatal codes.
func (m *Member) Err() error {
	select {
	case <-m.done:
		return m.err
	default:
		return nil
	}
}

// Mark records an offset to commit with Commit(ctx, nil) and at Close.
func (m *Member) Mark(topic string, partition int32, offset int64) {
	m.system.Root.Send(m.pid, &markCmd{topic: topic, partition: partition, offset: offset})
}

// Commit commits offsets (topic -> partition -> offset; nil commits the
// marked offsets) in the member's generation and waits for the answer. It is
// refused with ErrRebalanceInProgress while a join or sync is in flight,
// rather than sent with a generation about to be stale.
func (m *Member) Commit(ctx context.Context, offsets map[string]map[int32]int64) error {
	reply := make(chan error, 1)
	m.CommitAsync(offsets, func(err error) { reply <- err })
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CommitAsync is Commit without waiting: done (if not nil) gets the result,
// on a goroutine of its own.
func (m *Member) CommitAsync(offsets map[string]map[int32]int64, done func(error)) {
	if done == nil {
		done = func(error) {}
	}
	select {
	case <-m.done:
		go done(ErrIllegalState)
		return
	default:
	}
	m.system.Root.Send(m.pid, &commitCmd{offsets: offsets, done: done})
}

// EnforceRebalance asks the group to rebalance without revoking what a
// cooperative member owns (KIP-568); reason goes with the JoinGroup. It
// returns ErrRebalanceInProgress when a rebalance is already under way (retry
// after it), ErrCoordinatorNotAvailable while the coordinator is unknown, and
// ErrIllegalState after Close. A member that is not in an active group is
// already rejoining: no error.
//
// Under the consumer protocol it returns ErrUnsupported and does nothing:
// the coordinator reassigns on every change of membership, subscription or
// topic metadata, and Kafka has no request for a client to force it (a
// rejoin at epoch 0 gives the member its assignment back, nothing more).
//
// Against cohort the rejoin is a real rebalance even when a follower asks:
// the member's subscription carries its generation, so it differs from the
// one the group holds (Kafka's classic coordinator answers a follower's
// byte-identical rejoin with the current assignment and no rebalance).
func (m *Member) EnforceRebalance(reason string) error {
	select {
	case <-m.done:
		return ErrIllegalState
	default:
	}
	res, err := m.system.Root.RequestFuture(m.pid, &enforceCmd{reason: reason}, m.cfg.requestTimeout).Result()
	if err != nil {
		if errors.Is(err, actor.ErrDeadLetter) {
			return ErrIllegalState
		}
		return err
	}
	if e, ok := res.(*cmdResult); ok {
		return e.err
	}
	return nil
}

// Close revokes what the member owns (the Revoked callback runs), commits the
// marked offsets, leaves the group (a static member stays, to come back
// within its session timeout) and stops. If ctx ends first the member is
// stopped at once and Close returns ErrCloseTimeout.
func (m *Member) Close(ctx context.Context) error {
	m.system.Root.Send(m.pid, &closeCmd{})
	select {
	case <-m.done:
		return m.closeErr()
	case <-ctx.Done():
		m.system.Root.Send(m.pid, &forceStop{})
		<-m.done
		return ErrCloseTimeout
	}
}

func (m *Member) closeErr() error {
	if m.err != nil && !errors.Is(m.err, ErrIllegalState) {
		return m.err
	}
	return nil
}
