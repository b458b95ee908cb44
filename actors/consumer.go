package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// consumerEnv is what the group actors need for consumer groups (KIP-848).
type consumerEnv struct {
	cfg     *coordinator.ConsumerConfig
	allowed func() error
	topics  func() (uint64, map[string]int32)
}

// catalog returns the topic catalog and its version.
func (c *consumerEnv) catalog() (uint64, map[string]int32) {
	if c.topics == nil {
		return 0, map[string]int32{}
	}
	return c.topics()
}

// consumerSide is the consumer-protocol part of a group actor: the group's
// coordinator.ConsumerGroup lives in its coordinator.Group (Consumer). The
// machine writes records before a heartbeat is answered; every answer waits
// for the writes issued before it, so no answer tells a member of a state
// that is not replicated yet.
type consumerSide struct {
	fx       coordinator.ConsumerEffects
	topicsAt uint64 // catalog version the machine last saw
	issued   uint64 // writes issued
	done     uint64 // writes completed, in order
	waiting  []consumerReply
	// failed is the error of a write that failed: the machine's state is
	// ahead of the store, so every answer is an error until the writes in
	// flight are done and the group is rebuilt from the store.
	failed error
}

// consumerReply is an answer held until write number after is done.
type consumerReply struct {
	after uint64
	to    coordinator.ReplyTo
	msg   proto.Message
}

// consumerPersisted reports the completion of a consumer group write.
type consumerPersisted struct {
	incarnation *groupActor
	token       uint64
	err         error
}

// onConsumerHeartbeat runs a ConsumerGroupHeartbeat through the group's
// consumer machine, attaching one to an empty group on a valid join.
func (a *groupActor) onConsumerHeartbeat(ctx actor.Context, m *pb.ConsumerGroupHeartbeatRequest, to coordinator.ReplyTo) {
	cs := &a.consumer
	if cs.failed != nil {
		deliver(ctx, to, coordinator.ConsumerWriteFailed(cs.failed))
		return
	}
	if resp, refused := a.g.RefuseConsumerHeartbeat(); refused {
		deliver(ctx, to, resp.Proto())
		return
	}
	req := coordinator.ConsumerHeartbeatFromProto(m)
	if req.MemberID == "" && req.MemberEpoch == coordinator.EpochJoin {
		req.GeneratedMemberID = uuid.NewString()
	}
	cg := a.g.Consumer()
	fresh := cg == nil
	if fresh {
		if err := a.consumerAllowed(); err != nil {
			deliver(ctx, to, &pb.ConsumerGroupHeartbeatResponse{ErrorCode: coordinator.ErrUnsupportedVersion, ErrorMessage: err.Error()})
			return
		}
		v, topics := a.env.consumer.catalog()
		cg, cs.topicsAt = coordinator.NewConsumerGroup(a.id, a.env.consumer.cfg, topics), v
	} else {
		a.refreshTopics(cg)
	}
	resp := cg.Heartbeat(req, a.now, &cs.fx)
	if fresh {
		if cg.Epoch() == 0 {
			// The join failed: the group stays what it was.
			deliver(ctx, to, resp.Proto())
			return
		}
		a.g.AttachConsumer(cg)
	}
	a.executeConsumer(ctx)
	a.answerConsumer(ctx, to, resp.Proto())
}

// consumerAllowed reports why consumer groups cannot be created now (nil:
// they can).
func (a *groupActor) consumerAllowed() error {
	if f := a.env.consumer.allowed; f != nil {
		return f()
	}
	return nil
}

// refreshTopics hands the machine the catalog when it changed since the
// machine last saw it.
func (a *groupActor) refreshTopics(cg *coordinator.ConsumerGroup) {
	v, topics := a.env.consumer.catalog()
	if v != a.consumer.topicsAt {
		a.consumer.topicsAt = v
		cg.SetTopics(topics, &a.consumer.fx)
	}
}

// answerConsumer sends msg once every write issued so far is done.
func (a *groupActor) answerConsumer(ctx actor.Context, to coordinator.ReplyTo, msg proto.Message) {
	cs := &a.consumer
	if cs.done == cs.issued {
		deliver(ctx, to, msg)
		return
	}
	cs.waiting = append(cs.waiting, consumerReply{after: cs.issued, to: to, msg: msg})
}

// executeConsumer carries out the consumer machine's effects: its timers,
// and its records as one write.
func (a *groupActor) executeConsumer(ctx actor.Context) {
	cs := &a.consumer
	for _, t := range cs.fx.Timers {
		a.setTimer(coordinator.TimerOp{Key: t.Key(), After: t.After, Cancel: t.Cancel})
	}
	if len(cs.fx.Records) > 0 {
		cs.issued++
		self, root, token := a.self, a.env.system.Root, cs.issued
		a.env.store.Append(a.id, coordinator.ConsumerRecordsToProto(a.id, cs.fx.Records), nil, func(err error) {
			root.Send(self, &consumerPersisted{incarnation: a, token: token, err: err})
		})
	}
	cs.fx.Reset()
	a.publishSummary(ctx)
	a.publishView()
}

// onConsumerPersisted delivers the answers that waited for the write; after
// a failed write, once none is in flight, it rebuilds the group from the
// store.
func (a *groupActor) onConsumerPersisted(ctx actor.Context, m *consumerPersisted) {
	cs := &a.consumer
	cs.done = m.token
	if m.err != nil && cs.failed == nil {
		cs.failed = m.err
		a.env.log.Warn("consumer group write failed; the group is rebuilt from the store", "group", a.id, "err", m.err)
	}
	n := 0
	for _, r := range cs.waiting {
		if r.after > cs.done {
			cs.waiting[n] = r
			n++
			continue
		}
		msg := r.msg
		if cs.failed != nil {
			msg = coordinator.ConsumerWriteFailed(cs.failed)
		}
		deliver(ctx, r.to, msg)
	}
	clear(cs.waiting[n:])
	cs.waiting = cs.waiting[:n]
	if cs.failed != nil && cs.done == cs.issued {
		cs.failed = nil
		a.now = a.env.clock.Now()
		a.restoreConsumer(ctx)
	}
}

// restoreConsumer rebuilds the group's consumer machine from the store and
// arms its members' timers afresh (a takeover, or a failed write); the
// timers of the machine it replaces are dropped.
func (a *groupActor) restoreConsumer(ctx actor.Context) {
	for k := range a.timers.deadlines {
		if _, ok := k.ConsumerKind(); ok {
			delete(a.timers.deadlines, k)
		}
	}
	recs := a.env.store.ConsumerRecords(a.id)
	if len(recs) == 0 {
		a.g.ReplaceConsumer(nil)
		a.publishSummary(ctx)
		return
	}
	v, topics := a.env.consumer.catalog()
	cg := coordinator.RestoreConsumerGroup(a.id, a.env.consumer.cfg, topics, coordinator.ConsumerRecordsFromProto(recs))
	a.consumer.topicsAt = v
	if !a.g.AttachConsumer(cg) {
		a.g.ReplaceConsumer(cg)
	}
	cg.ArmAll(a.now, &a.consumer.fx)
	a.executeConsumer(ctx)
}

// onConsumerTimer fires a consumer member's timer.
func (a *groupActor) onConsumerTimer(ctx actor.Context, kind coordinator.ConsumerTimerKind, member string) {
	cg := a.g.Consumer()
	if cg == nil || a.consumer.failed != nil {
		return
	}
	if cg.OnTimer(kind, member, a.now, &a.consumer.fx) {
		a.track.cause = CauseExpiry
	}
	a.executeConsumer(ctx)
}

// onConsumerDescribe answers ConsumerGroupDescribe.
func (a *groupActor) onConsumerDescribe(ctx actor.Context, to coordinator.ReplyTo) {
	cg := a.g.Consumer()
	if cg == nil {
		deliver(ctx, to, coordinator.ConsumerDescribeAbsent(a.id))
		return
	}
	a.answerConsumer(ctx, to, cg.Describe())
}

// unloadConsumer answers what waits for writes NOT_COORDINATOR (the node
// stopped coordinating the group).
func (a *groupActor) unloadConsumer(ctx actor.Context) {
	for _, r := range a.consumer.waiting {
		deliver(ctx, r.to, coordinator.ConsumerWriteFailed(coordinator.ErrStoreNotLeader))
	}
	a.consumer.waiting = nil
}
