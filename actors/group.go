package actors

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// timerWake is sent by a group actor's one clock timer: some of the
// group's deadlines may have passed. A wake that finds none due (a
// deadline moved or cancelled since the timer was set, or a wake of an
// earlier incarnation) only sets the timer again.
type timerWake struct{}

// IgnoreDeadLetterLogging marks a wake as not worth a dead-letter log line:
// one that fires as its actor stops (the node stopped coordinating) has
// nothing left to do.
func (*timerWake) IgnoreDeadLetterLogging() {}

// wakeMsg is the one wake message every group sends itself.
var wakeMsg = &timerWake{}

// groupTimers are a group's armed timers: a deadline per key, and one clock
// timer set for the earliest deadline it knew of when set. Re-arming a key
// later (every heartbeat) only moves its deadline; re-arming it earlier
// than the clock timer resets that. A member costs a map entry, not a
// timer of its own.
//
// Deadlines are kept as nanoseconds since base, a reading of the actor's
// clock taken when the actor was made, and are read back through the same
// clock (Sub, so a monotonic reading is compared as such): an entry's value
// is 8 bytes where a time.Time is 24, and there is an entry per member.
type groupTimers struct {
	base      time.Time
	deadlines map[coordinator.TimerKey]int64 // since base
	wake      Timer
	fire      func() // what the timers run: sends the actor its wake
	wakeAt    int64  // when wake fires, since base; only if wakeSet
	wakeSet   bool
	firing    bool // onWake is running: it sets the timer when done
}

// since is the clock reading at as nanoseconds since base.
func (t *groupTimers) since(at time.Time) int64 { return int64(at.Sub(t.base)) }

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
	// consumerState is a consumer group's state (Empty, Assigning,
	// Reconciling, Stable); "" for a classic group.
	consumerState string
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
	persists []coordinator.Persist // execute's copy of fx.Persists, reused
	// now is the time of the message being handled: the machine's now, from
	// which its timers' deadlines are counted (one clock read per message).
	now      time.Time
	timers   groupTimers
	behavior actor.Behavior
	self     *actor.PID
	summary  groupSummary
	track    tracker
	consumer consumerSide // consumer.go
}

func newGroupActor(id string, e *env, term uint64) actor.Producer {
	return func() actor.Actor {
		a := &groupActor{id: id, env: e, term: term, timers: groupTimers{base: e.clock.Now(), deadlines: map[coordinator.TimerKey]int64{}}}
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
	case *timerWake:
		a.onWake(ctx)
	case *consumerPersisted:
		if m.incarnation == a {
			a.onConsumerPersisted(ctx, m)
		}
	case *persisted:
		if m.incarnation == a {
			a.now = a.env.clock.Now()
			a.g.OnPersisted(a.now, m.token, m.err, &a.fx)
			a.execute(ctx)
		}
	}
}

// onRequest runs one native request through the machine; to is where its
// answer goes (a PID for remote and future-based callers, a channel for
// local calls).
func (a *groupActor) onRequest(ctx actor.Context, req proto.Message, to coordinator.ReplyTo) {
	a.now = a.env.clock.Now()
	now := a.now
	if !a.env.answers(a.term, now) {
		deliver(ctx, to, coordinator.NotCoordinator(req, coordinator.ErrNotCoordinator))
		return
	}
	if _, hb := req.(*pb.HeartbeatRequest); !hb && a.env.observer != nil {
		a.track.cause = causeOf(a.g, req)
	}
	switch m := req.(type) {
	case *pb.ConsumerGroupHeartbeatRequest:
		a.onConsumerHeartbeat(ctx, m, to)
		return
	case *pb.ConsumerGroupDescribeRequest:
		a.onConsumerDescribe(ctx, to)
		return
	}
	if refusal := a.g.RefuseClassic(req); refusal != nil {
		deliver(ctx, to, refusal)
		return
	}
	forwarded := a.env.fromPeer(to)
	switch m := req.(type) {
	case *pb.HeartbeatRequest:
		code := a.g.Heartbeat(now, m, &a.fx)
		deliver(ctx, to, coordinator.HeartbeatAnswer(code))
	case *pb.JoinGroupRequest:
		var newID string
		if m.GetMemberId() == "" {
			newID = uuid.NewString()
		}
		if forwarded {
			a.g.ForwardedJoin(m.GetMemberId())
			forwarded = false // a join is the member's own: no window
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
	if forwarded {
		// Heartbeat, SyncGroup and OffsetCommit name their member.
		if m, ok := req.(interface{ GetMemberId() string }); ok {
			a.g.HeardThroughPeer(now, m.GetMemberId())
		}
	}
	a.execute(ctx)
}

// dead is the behavior once the group is gone: requests go back to the
// router, which no longer maps this id to us and routes them afresh.
func (a *groupActor) dead(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Restarting, *actor.Stopping:
		a.stopTimers()
	case *timerWake, *persisted, actor.SystemMessage, actor.AutoReceiveMessage:
	default:
		ctx.Forward(ctx.Parent())
	}
}

func (a *groupActor) onStarted(ctx actor.Context) {
	a.self = ctx.Self()
	a.now = a.env.clock.Now()
	now := a.now
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
		a.g.SetTakeover(a.env.takeover(a.id))
		a.track.cause = CauseFailover
	} else {
		a.g = coordinator.New(a.id, &a.env.cfg, now)
	}
	a.g.Start(now, &a.fx)
	a.execute(ctx)
	if len(a.env.store.ConsumerRecords(a.id)) > 0 {
		a.track.cause = CauseFailover
		a.restoreConsumer(ctx)
	}
}

// onWake fires every timer whose deadline has passed, earliest first (ties
// in key order), then sets the clock timer for the earliest left. Once the
// activation this actor serves is over, nothing fires.
func (a *groupActor) onWake(ctx actor.Context) {
	if a.env.serving.Load() != a.term {
		return
	}
	t := &a.timers
	t.wakeSet = false
	a.now = a.env.clock.Now()
	now := a.now
	at := t.since(now)
	type due struct {
		key      coordinator.TimerKey
		deadline int64
	}
	var fire []due
	for k, d := range t.deadlines {
		if d <= at {
			fire = append(fire, due{k, d})
		}
	}
	slices.SortFunc(fire, func(x, y due) int {
		return cmp.Or(cmp.Compare(x.deadline, y.deadline), cmp.Compare(x.key.Kind, y.key.Kind), cmp.Compare(x.key.Member, y.key.Member))
	})
	t.firing = true
	for _, f := range fire {
		// An earlier fire in this wake may have re-armed or cancelled it.
		if d, ok := t.deadlines[f.key]; !ok || d > at {
			continue
		}
		delete(t.deadlines, f.key)
		if kind, ok := f.key.ConsumerKind(); ok {
			a.onConsumerTimer(ctx, kind, f.key.Member)
			continue
		}
		switch f.key.Kind {
		case coordinator.TimerMember, coordinator.TimerSync:
			a.track.cause = CauseExpiry
		case coordinator.TimerOffsetExpiry:
			a.track.cause = causeRetention
		}
		before := a.g.NumMembers()
		a.g.OnTimer(now, f.key, &a.fx)
		if n := a.g.NumMembers(); n < before {
			a.membersExpired(f.key, before-n)
		}
		a.execute(ctx)
	}
	t.firing = false
	var next int64
	found := false
	for _, d := range t.deadlines {
		if !found || d < next {
			next, found = d, true
		}
	}
	if found {
		a.armWake(next)
	}
}

// armWake sets the clock timer to fire at the deadline, in nanoseconds
// since the timers' base (earlier than it is set for, or not set).
func (a *groupActor) armWake(at int64) {
	t := &a.timers
	if t.wakeSet && at >= t.wakeAt {
		return
	}
	t.wakeAt, t.wakeSet = at, true
	after := time.Duration(at - t.since(a.now))
	if t.fire == nil {
		// The wake is sent from a worker: a timer's goroutine is new each
		// time it fires, and the group actor runs on the goroutine that
		// sends to it.
		self, root, w := a.self, a.env.system.Root, a.env.workers
		send := func() { root.Send(self, wakeMsg) }
		t.fire = func() { w.run(send) }
	}
	if t.wake == nil {
		t.wake = a.env.clock.AfterFunc(after, t.fire)
		return
	}
	if after <= 0 {
		// Due now (a join phase without an initial delay): a timer of its
		// own, the clock timer left set for later (its wake finds nothing
		// due). Resetting a Go timer that is already set, so that it fires
		// now, makes the runtime scan every timer of its processor (one per
		// group) at its next check. A timer, rather than a message straight
		// to the mailbox, keeps the moment's wait in which members that
		// join together reach the same generation.
		a.env.clock.AfterFunc(0, t.fire)
		return
	}
	t.wake.Reset(after)
}

// deliver sends an answer to a PID, a local call's reply channel or a local
// caller's Answerer.
func deliver(ctx actor.Context, to coordinator.ReplyTo, msg proto.Message) {
	switch to := to.(type) {
	case coordinator.Answerer:
		to.Answer(msg)
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
		// The writes are started after the reset (a write's answer may come
		// back into fx), from a copy kept between calls.
		persists := append(a.persists[:0], fx.Persists...)
		gone := fx.Gone
		fx.Reset()
		for _, p := range persists {
			a.persist(p)
		}
		clear(persists)
		a.persists = persists[:0]
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
	t := &a.timers
	if op.Cancel {
		// The clock timer stays set: its wake finds nothing due.
		delete(t.deadlines, op.Key)
		return
	}
	deadline := t.since(a.now.Add(op.After))
	t.deadlines[op.Key] = deadline
	if !t.firing {
		a.armWake(deadline)
	}
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
	a.unloadConsumer(ctx)
	if a.env.observer != nil {
		a.env.observer.forget(a.id)
	}
	a.stopTimers()
}

func (a *groupActor) stopTimers() {
	t := &a.timers
	if t.wake != nil {
		t.wake.Stop()
	}
	t.wakeSet = false
	clear(t.deadlines)
}

func (a *groupActor) publishSummary(ctx actor.Context) {
	s := groupSummary{id: a.id, state: a.g.State(), protocolType: a.g.ProtocolType()}
	if cg := a.g.Consumer(); cg != nil && s.state != coordinator.Dead {
		s.protocolType, s.consumerState = "consumer", cg.State()
	}
	if s.state != a.summary.state && a.env.log.Enabled(context.Background(), slog.LevelDebug) {
		// Every new generation passes through a state change. (Unchecked,
		// boxing the values would cost allocations on each.)
		a.env.log.Debug("group state", slog.String("group", a.id), slog.String("state", s.state.String()), slog.Int("generation", int(a.g.Generation())), slog.Int("members", a.g.NumMembers()))
	}
	if s.state != a.summary.state && a.summary.id != "" {
		a.lifecycle(a.summary.state, s.state)
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
	a.logLifecycle("group deleted", slog.String("group", a.id))
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
