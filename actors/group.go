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

type timerEntry struct {
	timer    Timer
	deadline time.Time
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
	g        *coordinator.Group
	fx       coordinator.Effects
	timers   map[coordinator.TimerKey]*timerEntry
	behavior actor.Behavior
	self     *actor.PID
	summary  groupSummary
}

func newGroupActor(id string, e *env) actor.Producer {
	return func() actor.Actor {
		a := &groupActor{id: id, env: e, timers: map[coordinator.TimerKey]*timerEntry{}}
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
	case *actor.Restarting, *actor.Stopping:
		a.stopTimers()
	case *pb.HeartbeatRequest:
		a.onHeartbeat(ctx, m)
	case *pb.JoinGroupRequest:
		a.onJoin(ctx, m)
	case *pb.SyncGroupRequest:
		a.g.Sync(a.env.clock.Now(), m, ctx.Sender(), &a.fx)
		a.execute(ctx)
	case *pb.LeaveGroupRequest:
		a.respond(ctx, a.g.Leave(a.env.clock.Now(), m, &a.fx))
		a.execute(ctx)
	case *pb.OffsetCommitRequest:
		a.g.Commit(a.env.clock.Now(), m, ctx.Sender(), &a.fx)
		a.execute(ctx)
	case *pb.OffsetFetchRequest:
		a.respond(ctx, a.g.Fetch(m))
	case *pb.OffsetDeleteRequest:
		a.g.OffsetDelete(a.env.clock.Now(), m, ctx.Sender(), &a.fx)
		a.execute(ctx)
	case *pb.DescribeGroupRequest:
		a.respond(ctx, a.g.Describe())
	case *pb.DeleteGroupRequest:
		a.g.Delete(a.env.clock.Now(), ctx.Sender(), &a.fx)
		a.execute(ctx)
	case *timerFired:
		a.onTimer(ctx, m)
	case *persisted:
		if m.incarnation == a {
			a.g.OnPersisted(a.env.clock.Now(), m.token, m.err, &a.fx)
			a.execute(ctx)
		}
	}
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
	} else {
		a.g = coordinator.New(a.id, &a.env.cfg, now)
	}
	a.g.Start(now, &a.fx)
	a.execute(ctx)
}

func (a *groupActor) onHeartbeat(ctx actor.Context, m *pb.HeartbeatRequest) {
	code := a.g.Heartbeat(a.env.clock.Now(), m, &a.fx)
	a.respond(ctx, &pb.HeartbeatResponse{ErrorCode: code})
	a.execute(ctx)
}

func (a *groupActor) onJoin(ctx actor.Context, m *pb.JoinGroupRequest) {
	var newID string
	if m.GetMemberId() == "" {
		newID = uuid.NewString()
	}
	a.g.Join(a.env.clock.Now(), m, newID, ctx.Sender(), &a.fx)
	a.execute(ctx)
}

func (a *groupActor) onTimer(ctx actor.Context, m *timerFired) {
	e := a.timers[m.key]
	if e != m.entry {
		return // cancelled, or from an earlier incarnation
	}
	now := a.env.clock.Now()
	if now.Before(e.deadline) {
		return // re-armed later after this fire was sent; it fires again
	}
	delete(a.timers, m.key)
	a.g.OnTimer(now, m.key, &a.fx)
	a.execute(ctx)
}

func (a *groupActor) respond(ctx actor.Context, msg proto.Message) {
	if s := ctx.Sender(); s != nil {
		ctx.Send(s, msg)
	}
}

// execute carries out the effects of the last machine call.
func (a *groupActor) execute(ctx actor.Context) {
	for {
		fx := &a.fx
		for _, r := range fx.Replies {
			if pid, ok := r.To.(*actor.PID); ok && pid != nil {
				ctx.Send(pid, r.Msg)
			}
		}
		for _, op := range fx.Timers {
			a.setTimer(op)
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
			a.onGone(ctx)
			return
		}
		if len(fx.Replies)+len(fx.Timers)+len(fx.Persists) == 0 && !fx.Gone {
			break
		}
	}
	a.publishSummary(ctx)
}

func (a *groupActor) persist(p coordinator.Persist) {
	self, root, token := a.self, a.env.system.Root, p.Token
	a.env.store.Append(a.id, p.Records, func(err error) {
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
		e.timer.Reset(op.After)
		return
	}
	e = &timerEntry{deadline: deadline}
	key, self, root := op.Key, a.self, a.env.system.Root
	msg := &timerFired{key: key, entry: e}
	e.timer = a.env.clock.AfterFunc(op.After, func() { root.Send(self, msg) })
	a.timers[op.Key] = e
}

func (a *groupActor) stopTimers() {
	for k, e := range a.timers {
		e.timer.Stop()
		delete(a.timers, k)
	}
}

func (a *groupActor) publishSummary(ctx actor.Context) {
	s := groupSummary{id: a.id, state: a.g.State(), protocolType: a.g.ProtocolType()}
	if s != a.summary {
		a.summary = s
		ctx.Send(ctx.Parent(), &s)
	}
}

func (a *groupActor) onGone(ctx actor.Context) {
	a.stopTimers()
	a.env.log.Debug("group gone", slog.String("group", a.id))
	a.behavior.Become(a.dead)
	ctx.Send(ctx.Parent(), &groupGone{id: a.id, pid: ctx.Self()})
}
