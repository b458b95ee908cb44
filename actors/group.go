package actors

import (
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// timerFired is sent by a timer to its group actor. entry identifies the
// arming (a timer re-armed or cancelled since has another entry or none).
type timerFired struct {
	key   coordinator.TimerKey
	entry *timerEntry
}

// timerEntry is one armed timer. Re-arming it later (every heartbeat) only
// moves deadline; the underlying timer keeps its fire time and, when it fires
// early, is re-armed for the rest. Re-arming it earlier resets the timer.
type timerEntry struct {
	timer    Timer
	deadline time.Time
	fireAt   time.Time
}

// persisted reports the completion of a write.
type persisted struct {
	incarnation *groupActor
	token       uint64
	err         error
}

// groupSummary tells the router a group's ListGroups entry changed.
type groupSummary struct {
	id           string
	state        coordinator.State
	protocolType string
}

// groupGone tells the router the group is dead and its writes are done.
type groupGone struct {
	id  string
	pid *actor.PID
}

type groupActor struct {
	id       string
	env      *env
	term     uint64 // the router's activation this actor serves
	g        *coordinator.Group
	fx       coordinator.Effects
	timers   map[coordinator.TimerKey]*timerEntry
	behavior actor.Behavior
	self     *actor.PID
	summary  groupSummary
	track    tracker
}

func newGroupActor(id string, e *env, term uint64) actor.Producer {
	return func() actor.Actor {
		a := &groupActor{id: id, env: e, term: term, timers: map[coordinator.TimerKey]*timerEntry{}}
		a.behavior = actor.NewBehavior()
		a.behavior.Become(a.active)
		return a
	}
}

func (a *groupActor) Receive(ctx actor.Context) { a.behavior.Receive(ctx) }

func (a *groupActor) active(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.onStarted(ctx)
	case *actor.Restarting:
		a.stopTimers()
	case *actor.Stopping:
		a.onStopping(ctx)
	case *call:
		a.onRequest(ctx, m.req, m.reply)
	case groupRequest:
		a.onRequest(ctx, m, ctx.Sender())
	case *timerFired:
		a.onTimer(ctx, m)
	case *persisted:
		if m.incarnation == a {
			a.g.OnPersisted(a.env.clock.Now(), m.token, m.err, &a.fx)
			a.execute(ctx)
		}
	}
}

// onRequest runs one native request through the machine; to is where its
// answer goes (a PID for remote and future-based callers, a channel for
// local calls).
func (a *groupActor) onRequest(ctx actor.Context, req proto.Message, to coordinator.ReplyTo) {
	if !a.env.answers(a.term) {
		deliver(ctx, to, coordinator.NotCoordinator(req, coordinator.ErrNotCoordinator))
		return
	}
	now := a.env.clock.Now()
	if _, hb := req.(*pb.HeartbeatRequest); !hb && a.env.observer != nil {
		a.track.cause = causeOf(a.g, req)
	}
	switch m := req.(type) {
	case *pb.HeartbeatRequest:
		code := a.g.Heartbeat(now, m, &a.fx)
		deliver(ctx, to, &pb.HeartbeatResponse{ErrorCode: code})
	case *pb.JoinGroupRequest:
		var newID string
		if m.GetMemberId() == "" {
			newID = uuid.NewString()
		}
		a.g.Join(now, m, newID, to, &a.fx)
	case *pb.SyncGroupRequest:
		a.g.Sync(now, m, to, &a.fx)
	case *pb.LeaveGroupRequest:
		a.g.Leave(now, m, to, &a.fx)
	case *pb.OffsetCommitRequest:
		a.g.Commit(now, m, to, &a.fx)
	case *pb.OffsetFetchRequest:
		deliver(ctx, to, a.g.Fetch(m))
	case *pb.OffsetDeleteRequest:
		a.g.OffsetDelete(now, m, to, &a.fx)
	case *pb.DescribeGroupRequest:
		deliver(ctx, to, a.g.Describe())
	case *pb.DeleteGroupRequest:
		a.g.Delete(now, to, &a.fx)
	default:
		return
	}
	a.execute(ctx)
}

// dead is the behavior once the group is gone: requests go back to the
// router, which no longer maps this id to us and routes them afresh.
func (a *groupActor) dead(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Restarting, *actor.Stopping:
		a.stopTimers()
	case *timerFired, *persisted, actor.SystemMessage, actor.AutoReceiveMessage:
	default:
		ctx.Forward(ctx.Parent())
	}
}

func (a *groupActor) onStarted(ctx actor.Context) {
	a.self = ctx.Self()
	now := a.env.clock.Now()
	rec, offsets, err := a.env.store.Load(a.id)
	if err != nil {
		// Without its durable state the group must not serve: fail the start
		// and let supervision retry.
		panic("load group " + a.id + ": " + err.Error())
	}
	if rec != nil || len(offsets) > 0 {
		if rec == nil {
			rec = &pb.GroupRecord{GroupId: a.id}
		}
		a.g = coordinator.Restore(&a.env.cfg, rec, offsets, now)
		a.track.cause = CauseFailover
	} else {
		a.g = coordinator.New(a.id, &a.env.cfg, now)
	}
	a.g.Start(now, &a.fx)
	a.execute(ctx)
}

func (a *groupActor) onTimer(ctx actor.Context, m *timerFired) {
	e := a.timers[m.key]
	if e != m.entry || a.env.serving.Load() != a.term {
		return // cancelled, from an earlier incarnation, or the term is over
	}
	now := a.env.clock.Now()
	if now.Before(e.deadline) {
		// Re-armed later since the timer was set: wait for the rest.
		e.fireAt = e.deadline
		e.timer.Reset(e.deadline.Sub(now))
		return
	}
	delete(a.timers, m.key)
	switch m.key.Kind {
	case coordinator.TimerMember, coordinator.TimerSync:
		a.track.cause = CauseExpiry
	case coordinator.TimerOffsetExpiry:
		a.track.cause = causeRetention
	}
	a.g.OnTimer(now, m.key, &a.fx)
	a.execute(ctx)
}

// deliver sends an answer to a PID or a local call's reply channel.
func deliver(ctx actor.Context, to coordinator.ReplyTo, msg proto.Message) {
	switch to := to.(type) {
	case *actor.PID:
		if to != nil {
			ctx.Send(to, msg)
		}
	case chan proto.Message:
		select {
		case to <- msg:
		default: // already answered: cannot happen, never block on it
		}
	}
}

// execute carries out the effects of the last machine call.
func (a *groupActor) execute(ctx actor.Context) {
	for {
		fx := &a.fx
		a.observe(fx)
		for _, r := range fx.Replies {
			deliver(ctx, r.To, r.Msg)
		}
		for _, op := range fx.Timers {
			a.setTimer(op)
		}
		for _, ev := range fx.Events {
			a.onEvent(ev)
		}
		var persists []coordinator.Persist
		if len(fx.Persists) > 0 {
			persists = append(persists, fx.Persists...)
		}
		gone := fx.Gone
		fx.Reset()
		for _, p := range persists {
			a.persist(p)
		}
		if gone {
			a.publishView()
			a.onGone(ctx)
			return
		}
		if len(fx.Replies)+len(fx.Timers)+len(fx.Persists) == 0 && !fx.Gone {
			break
		}
	}
	a.publishSummary(ctx)
	a.publishView()
}

func (a *groupActor) persist(p coordinator.Persist) {
	self, root, token := a.self, a.env.system.Root, p.Token
	a.env.store.Append(a.id, p.Records, p.Fence, func(err error) {
		root.Send(self, &persisted{incarnation: a, token: token, err: err})
	})
}

func (a *groupActor) setTimer(op coordinator.TimerOp) {
	e := a.timers[op.Key]
	if op.Cancel {
		if e != nil {
			e.timer.Stop()
			delete(a.timers, op.Key)
		}
		return
	}
	deadline := a.env.clock.Now().Add(op.After)
	if e != nil {
		e.deadline = deadline
		if deadline.Before(e.fireAt) {
			e.fireAt = deadline
			e.timer.Reset(op.After)
		}
		return
	}
	e = &timerEntry{deadline: deadline, fireAt: deadline}
	key, self, root := op.Key, a.self, a.env.system.Root
	msg := &timerFired{key: key, entry: e}
	e.timer = a.env.clock.AfterFunc(op.After, func() { root.Send(self, msg) })
	a.timers[op.Key] = e
}

// onStopping unloads the group (the node stopped coordinating): parked
// requests and waiting writes are answered NOT_COORDINATOR.
func (a *groupActor) onStopping(ctx actor.Context) {
	if a.g != nil && a.g.State() != coordinator.Dead {
		a.g.Unload(a.env.clock.Now(), &a.fx)
		for _, r := range a.fx.Replies {
			deliver(ctx, r.To, r.Msg)
		}
		a.fx.Reset()
	}
	if a.env.observer != nil {
		a.env.observer.forget(a.id)
	}
	a.stopTimers()
}

func (a *groupActor) stopTimers() {
	for k, e := range a.timers {
		e.timer.Stop()
		delete(a.timers, k)
	}
}

func (a *groupActor) publishSummary(ctx actor.Context) {
	s := groupSummary{id: a.id, state: a.g.State(), protocolType: a.g.ProtocolType()}
	if s.state != a.summary.state {
		// Every new generation passes through a state change.
		a.env.log.Debug("group state", slog.String("group", a.id), slog.String("state", s.state.String()), slog.Int("generation", int(a.g.Generation())), slog.Int("members", a.g.NumMembers()))
	}
	if s != a.summary {
		a.summary = s
		msg := s // allocated only when sent
		ctx.Send(ctx.Parent(), &msg)
	}
}

func (a *groupActor) onGone(ctx actor.Context) {
	if a.env.observer != nil {
		a.env.observer.forget(a.id)
	}
	a.stopTimers()
	a.env.log.Debug("group gone", slog.String("group", a.id))
	a.behavior.Become(a.dead)
	ctx.Send(ctx.Parent(), &groupGone{id: a.id, pid: ctx.Self()})
}

// onEvent logs a decision of the machine and counts it.
func (a *groupActor) onEvent(ev coordinator.Event) {
	switch ev.Kind {
	case coordinator.EventWithheld:
		a.env.guard.withheld.Add(uint64(ev.Count))
		a.env.log.Info("ownership guard withheld partitions still owned by other members",
			slog.String("group", a.id), slog.Int("generation", int(ev.Generation)), slog.Int("partitions", ev.Count), slog.String("withheld", ev.Detail))
	case coordinator.EventFollowUp:
		a.env.guard.followUps.Add(1)
		a.env.log.Info("ownership guard starts a follow-up rebalance to hand withheld partitions over",
			slog.String("group", a.id), slog.Int("generation", int(ev.Generation)), slog.String("reason", ev.Detail))
	case coordinator.EventTakeoverRejoin:
		a.env.log.Info("member rejoined after takeover, generation kept",
			slog.String("group", a.id), slog.Int("generation", int(ev.Generation)), slog.String("member", ev.Detail))
	}
}
