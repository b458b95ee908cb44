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

// refusal is the answer to a ConsumerGroupHeartbeat that would create a
// consumer group while none may be created (UNSUPPORTED_VERSION, on which
// clients use the classic protocol); nil when it may.
func (c *consumerEnv) refusal() *pb.ConsumerGroupHeartbeatResponse {
	if c.allowed == nil {
		return nil
	}
	if err := c.allowed(); err != nil {
		return &pb.ConsumerGroupHeartbeatResponse{ErrorCode: coordinator.ErrUnsupportedVersion, ErrorMessage: err.Error()}
	}
	return nil
}

// catalog returns the topic catalog and its version.
func (c *consumerEnv) catalog() (uint64, map[string]int32) {
	if c.topics == nil {
		return 0, map[string]int32{}
	}
	return c.topics()
}

// consumerSide is the consumer-protocol part of a group actor: the group's
// coordinator.ConsumerGroup lives in its coordinator.Group (Consumer), which
// also converts the group between the two protocols (online migration). The
// machine writes records before a request is answered; every answer waits
// for the writes issued before it, so no answer tells a member of a state
// that is not replicated yet.
type consumerSide struct {
	fx       coordinator.ConsumerEffects
	topicsAt uint64 // catalog version the machine last saw
	issued   uint64 // writes issued, numbered from 1
	// done is the highest write number completed. The store applies a
	// group's writes in order but may report them out of order: a write
	// reported done means every earlier one was applied too.
	done     uint64
	inflight int // writes not reported yet
	waiting  []consumerReply
	// failed is the error of a write that failed: the machine's state is
	// ahead of the store, so every answer is an error until the writes in
	// flight are done; then the router replaces the actor with one that
	// loads the group from the store (groupReload).
	failed error
}

// consumerReply is an answer to req held until write number after is done.
type consumerReply struct {
	after uint64
	to    coordinator.ReplyTo
	req   proto.Message
	msg   proto.Message
}

// consumerPersisted reports the completion of a consumer group write.
type consumerPersisted struct {
	incarnation *groupActor
	token       uint64
	err         error
}

// onConsumerHeartbeat runs a ConsumerGroupHeartbeat through the group:
// its consumer group, or one it attaches to an empty group, or the one a
// classic group with members is upgraded to.
func (a *groupActor) onConsumerHeartbeat(ctx actor.Context, m *pb.ConsumerGroupHeartbeatRequest, to coordinator.ReplyTo) {
	cs := &a.consumer
	if cs.failed != nil {
		deliver(ctx, to, coordinator.WriteFailed(m, cs.failed))
		return
	}
	req := coordinator.ConsumerHeartbeatFromProto(m)
	if req.MemberID == "" && req.MemberEpoch == coordinator.EpochJoin {
		req.GeneratedMemberID = uuid.NewString()
	}
	var topics map[string]int32
	if cg := a.g.Consumer(); cg != nil {
		a.refreshTopics(cg)
	} else {
		if r := a.env.consumer.refusal(); r != nil {
			deliver(ctx, to, r)
			return
		}
		cs.topicsAt, topics = a.env.consumer.catalog()
	}
	resp := a.g.ConsumerHeartbeat(a.env.consumer.cfg, topics, req, a.now, &cs.fx, &a.fx)
	a.executeConsumer(ctx)
	a.executeClassic(ctx)
	a.answerConsumer(ctx, to, m, resp.Proto())
}

// onClassicToConsumer hands a classic request to the consumer group the
// group is (online migration: classic members inside a consumer group);
// it reports whether the request was answered, or goes on to the classic
// machine (offsets, deletion, or a group that a JoinGroup just turned
// classic).
func (a *groupActor) onClassicToConsumer(ctx actor.Context, req proto.Message, to coordinator.ReplyTo) bool {
	cs := &a.consumer
	if cs.failed != nil {
		deliver(ctx, to, coordinator.WriteFailed(req, cs.failed))
		return true
	}
	var newID string
	if j, ok := req.(*pb.JoinGroupRequest); ok && j.GetMemberId() == "" {
		newID = uuid.NewString()
	}
	resp, served := a.g.ServeClassic(req, newID, a.now, &cs.fx, &a.fx)
	a.executeConsumer(ctx)
	a.executeClassic(ctx)
	if served {
		a.answerConsumer(ctx, to, req, resp)
	}
	return served
}

// refreshTopics hands the machine the catalog when it changed since the
// machine last saw it.
func (a *groupActor) refreshTopics(cg *coordinator.ConsumerGroup) {
	v, topics := a.env.consumer.catalog()
	if v != a.consumer.topicsAt {
		a.consumer.topicsAt = v
		cg.SetTopics(topics, a.now, &a.consumer.fx)
	}
}

// answerConsumer sends msg, the answer to req, once every write issued so
// far is done.
func (a *groupActor) answerConsumer(ctx actor.Context, to coordinator.ReplyTo, req, msg proto.Message) {
	cs := &a.consumer
	if cs.done == cs.issued {
		deliver(ctx, to, msg)
		return
	}
	cs.waiting = append(cs.waiting, consumerReply{after: cs.issued, to: to, req: req, msg: msg})
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
		cs.inflight++
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
// a failed write, once none is in flight, the actor gives the group up (the
// classic side's parked requests answered) and the router starts a new one,
// which loads it from the store as a takeover does.
func (a *groupActor) onConsumerPersisted(ctx actor.Context, m *consumerPersisted) {
	cs := &a.consumer
	cs.done = max(cs.done, m.token)
	cs.inflight--
	if m.err != nil && cs.failed == nil {
		cs.failed = m.err
		a.env.log.Warn("consumer group write failed; the group is loaded again from the store", "group", a.id, "err", m.err)
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
			msg = coordinator.WriteFailed(r.req, cs.failed)
		}
		deliver(ctx, r.to, msg)
	}
	clear(cs.waiting[n:])
	cs.waiting = cs.waiting[:n]
	if cs.failed != nil && cs.inflight == 0 {
		a.onStopping(ctx)
		a.behavior.Become(a.dead)
		ctx.Send(ctx.Parent(), &groupReload{id: a.id, pid: ctx.Self()})
	}
}

// restoreConsumer rebuilds the group's consumer machine from the store's
// records (a takeover) and arms its members' timers afresh.
func (a *groupActor) restoreConsumer(ctx actor.Context, recs []*pb.Record) {
	v, topics := a.env.consumer.catalog()
	cg := coordinator.RestoreConsumerGroup(a.id, a.env.consumer.cfg, topics, coordinator.ConsumerRecordsFromProto(recs))
	a.consumer.topicsAt = v
	a.g.ReplaceConsumer(cg)
	cg.ArmAll(a.now, &a.consumer.fx)
	a.executeConsumer(ctx)
}

// onConsumerTimer fires a consumer member's timer, or the group's regex
// resolution, which first hands the machine the newest catalog: a
// resolution the refresh interval arms is how a group with no heartbeat
// learns of the topics created since the last one.
func (a *groupActor) onConsumerTimer(ctx actor.Context, kind coordinator.ConsumerTimerKind, member string) {
	cg := a.g.Consumer()
	if cg == nil || a.consumer.failed != nil {
		return
	}
	if kind == coordinator.ConsumerTimerRegex {
		a.refreshTopics(cg)
	}
	if a.g.ConsumerTimer(kind, member, a.now, &a.consumer.fx, &a.fx) {
		a.track.cause = CauseExpiry
	}
	a.executeConsumer(ctx)
	a.executeClassic(ctx)
}

// executeClassic carries out what a call into the consumer group asked of
// the classic Group (a conversion's answers and timers); usually nothing,
// and then the views executeConsumer published stand.
func (a *groupActor) executeClassic(ctx actor.Context) {
	if !a.fx.Empty() {
		a.execute(ctx)
	}
}

// onConsumerDescribe answers ConsumerGroupDescribe.
func (a *groupActor) onConsumerDescribe(ctx actor.Context, to coordinator.ReplyTo) {
	cg := a.g.Consumer()
	if cg == nil {
		deliver(ctx, to, coordinator.ConsumerDescribeAbsent(a.id))
		return
	}
	a.answerConsumer(ctx, to, &pb.ConsumerGroupDescribeRequest{}, cg.Describe())
}

// unloadConsumer answers what waits for writes NOT_COORDINATOR (the node
// stopped coordinating the group).
func (a *groupActor) unloadConsumer(ctx actor.Context) {
	for _, r := range a.consumer.waiting {
		deliver(ctx, r.to, coordinator.WriteFailed(r.req, coordinator.ErrStoreNotLeader))
	}
	a.consumer.waiting = nil
}
